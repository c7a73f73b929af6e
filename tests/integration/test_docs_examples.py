"""Every Python example of README.md and docs/ runs (tests/integration/docs_examples.py).

Each program runs in a fresh interpreter in its own empty directory, with a
deadline; it must exit with status 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.docs_examples import ROOT, Program, pages, programs

DEADLINE = 120
"""Seconds one program may take (they take about one; a hung one fails here, not the run)."""

PROGRAMS = [program for page in pages() for program in programs(page)]


def test_the_pages_have_examples() -> None:
    """The collector finds the examples (a broken pattern would pass every test)."""
    names = {program.page for program in PROGRAMS}
    assert {"docs/writing-tools.md", "docs/service.md", "docs/react-loop.md"} <= names
    assert len(PROGRAMS) >= 15


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_example_runs(program: Program, tmp_path: Path) -> None:
    """The example runs to the end, with exit status 0."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    spec = tmp_path / "program.json"
    spec.write_text(json.dumps({"name": program.name, "segments": program.segments}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.docs_examples", str(spec)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=DEADLINE,
        stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, (
        f"{program.name} failed (status {done.returncode}):\n{done.stdout[-3000:]}"
        f"\n{done.stderr[-3000:]}")
