"""Packaging: metadata lives in setup.cfg; this file only ships the docs.

The user documentation in ``docs/`` is copied into the built package as
``ai_tools/docs/*.md`` so that the ``doc_lookup`` tool can search it from an
installed copy (a source checkout reads ``docs/`` directly).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent


class BuildWithDocs(build_py):
    """``build_py`` that also copies ``docs/*.md`` into ``ai_tools/docs/``."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "ai_tools" / "docs"
        target.mkdir(parents=True, exist_ok=True)
        for page in sorted((HERE / "docs").glob("*.md")):
            shutil.copy2(page, target / page.name)


setup(cmdclass={"build_py": BuildWithDocs})
