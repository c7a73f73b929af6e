"""Packaging: the wheel ships the twistd plugin, and twistd finds it after a real install.

Each test works on a copy of the source tree (so builds never touch the
checkout) and installs it with pip into a brand-new virtualenv.  To stay fast
and offline, the project is installed with ``--no-deps --no-build-isolation
--no-index``: the new environment gets the already-installed dependencies
(Twisted, setuptools...) through a ``.pth`` file naming the test environment's
site-packages, whose own ``.pth`` files (including this checkout's editable
install) are *not* processed — so ``ai_tools`` and the plugin can only come
from the fresh install.  Then a real ``twistd --help`` runs in that environment.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.utils import getProcessOutputAndValue

ROOT = Path(__file__).resolve().parents[2]
PROCESS_TIMEOUT = 240
PLUGIN = "twisted/plugins/ai_tools_plugin.py"
TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
IGNORED = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
    "var", "dropin.cache", ".coverage*", "htmlcov",
)


def copy_source(destination: Path) -> Path:
    """A copy of the project tree, without environments, builds and caches."""
    source = destination / "src"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    return source


def clean_env() -> dict[str, str]:
    """The environment for child processes: no PYTHONPATH, no pip prompts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1")
    return env


async def run(executable: str | Path, *args: str, cwd: Path) -> str:
    """Run a process to completion; its stdout, or a test failure showing its output."""
    from twisted.internet import reactor

    d = getProcessOutputAndValue(str(executable), args, env=clean_env(), path=str(cwd),
                                 reactor=reactor)
    d.addTimeout(PROCESS_TIMEOUT, reactor)
    out, err, code = await d
    text = out.decode(errors="replace")
    if code != 0:
        pytest.fail(f"{executable} {' '.join(args)} exited {code}:\n{text}\n"
                    f"{err.decode(errors='replace')}")
    return text


def new_environment(where: Path) -> Path:
    """A fresh virtualenv seeing only its own packages plus the test environment's deps."""
    venv.EnvBuilder(with_pip=False, clear=True).create(where)
    python = where / "bin" / "python"
    site = Path(sysconfig.get_path("purelib", vars={"base": str(where),
                                                    "platbase": str(where)}))
    site.mkdir(parents=True, exist_ok=True)
    (site / "_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return python


async def pip_install(python: Path, source: Path, *options: str, editable: bool = False
                      ) -> None:
    """``pip install [options] [-e] .`` from ``source`` into the environment of ``python``."""
    target = ("--editable", ".") if editable else (".",)
    await run(sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
              "--no-deps", "--no-build-isolation", "--no-index", *options, *target, cwd=source)


async def assert_twistd_lists_the_plugin(python: Path, expected_source: Path,
                                         cwd: Path) -> None:
    """twistd in that environment lists ``ai-assistant``, loaded from the expected place."""
    listing = await run(python, "-c", TWISTD, "--help", cwd=cwd)
    commands = listing.split("Commands:", 1)[-1]
    assert "ai-assistant" in commands, listing
    help_text = await run(python, "-c", TWISTD, "ai-assistant", "--help", cwd=cwd)
    assert "--config" in help_text
    where = await run(python, "-c", "import ai_tools, twisted.plugins.ai_tools_plugin as p;"
                      "print(ai_tools.__file__); print(p.__file__)", cwd=cwd)
    for line in where.split():
        assert Path(line).resolve().is_relative_to(expected_source.resolve()), where


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch directory that is not the checkout (so '' on sys.path finds nothing)."""
    scratch = tmp_path / "run"
    scratch.mkdir()
    return scratch


@pytest_twisted.ensureDeferred
async def test_wheel_ships_the_plugin_without_a_twisted_package(tmp_path: Path) -> None:
    """The wheel holds the plugin and every ai_tools module, and no twisted/__init__.py."""
    source = copy_source(tmp_path)
    out = tmp_path / "wheels"
    await run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
              "--no-build-isolation", "--no-index", "--wheel-dir", str(out), ".", cwd=source)
    (wheel,) = out.glob("ai_tools-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert PLUGIN in names
    assert "twisted/__init__.py" not in names
    assert "twisted/plugins/__init__.py" not in names
    assert not any(n.endswith("dropin.cache") for n in names)
    assert "ai_tools/py.typed" in names
    relative = [p.relative_to(source) for p in (source / "ai_tools").rglob("*.py")]
    modules = {  # shipping test modules is optional
        p.as_posix() for p in relative if "tests" not in p.parts and not p.name.startswith("test")
    }
    missing = sorted(modules - names)
    assert not missing, f"not in the wheel (list the package in setup.cfg): {missing}"


@pytest_twisted.ensureDeferred
async def test_pip_install_then_twistd_lists_the_plugin(tmp_path: Path, workdir: Path
                                                        ) -> None:
    """``pip install .`` into a new virtualenv; twistd there knows ``ai-assistant``."""
    source = copy_source(tmp_path)
    environment = tmp_path / "venv"
    python = new_environment(environment)
    await pip_install(python, source)
    await assert_twistd_lists_the_plugin(python, environment, workdir)


@pytest.mark.parametrize("options", [(), ("--config-settings", "editable_mode=compat")],
                         ids=["editable", "editable-compat"])
@pytest_twisted.ensureDeferred
async def test_editable_install_then_twistd_lists_the_plugin(
    tmp_path: Path, workdir: Path, options: Any
) -> None:
    """``pip install -e .`` (plain and compat mode): twistd finds the plugin in the source."""
    source = copy_source(tmp_path)
    python = new_environment(tmp_path / "venv")
    await pip_install(python, source, *options, editable=True)
    await assert_twistd_lists_the_plugin(python, source, workdir)


def test_processes_do_not_inherit_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The children must not see this checkout through PYTHONPATH (it would fake a pass)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PIP_INDEX_URL", "http://example.invalid")
    env = clean_env()
    assert "PYTHONPATH" not in env and "PIP_INDEX_URL" not in env
    assert env["PIP_NO_INPUT"] == "1"

