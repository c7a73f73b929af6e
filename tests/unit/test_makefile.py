"""What the Makefile's targets install, read from a dry run of the real ``make``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(tmp_path: Path, target: str) -> str:
    """``make -n TARGET`` in a copy of the build files with no virtualenv yet (a fresh clone)."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is needed (the project's commands are make targets)")
    for name in ("Makefile", "setup.cfg", "setup.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    done = subprocess.run([make, "-n", target], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("target", ["demo", "run"])
def test_the_demo_installs_the_runtime_only(tmp_path: Path, target: str) -> None:
    """``make demo`` and ``make run`` install the package and what it needs to run, not the
    test and lint tools (nor the optional drivers)."""
    commands = dry_run(tmp_path, target)
    installs = re.findall(r"pip install [^\n]*", commands)
    assert any(re.search(r"-e \.$", line) for line in installs), installs
    assert not any("[dev" in line or "pytest" in line for line in installs), installs


def test_the_tests_install_the_dev_tools(tmp_path: Path) -> None:
    commands = dry_run(tmp_path, "venv")
    assert "'.[dev,tokens,postgres]'" in commands


def test_the_readme_says_what_make_test_takes() -> None:
    """Its duration and what it needs that make installs as root, or the user must have."""
    text = " ".join((ROOT / "README.md").read_text().split())
    paragraph = text[text.index("make test"):]
    paragraph = paragraph[:paragraph.index("## ")]
    for needed in ("minutes", "C++ compiler", "PostgreSQL", "Chromium", "root"):
        assert needed in paragraph, needed
