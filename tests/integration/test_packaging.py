"""Packaging: the distribution ``ai-tools-twisted`` ships every module and the twistd plugin.

``pip install ai_tools`` would fetch an unrelated project from the public
index, so the distribution has a name of its own; the import package stays
``ai_tools`` and the twistd plugin ``ai-assistant``.

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

import configparser
import json
import os
import re
import shutil
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet.utils import getProcessOutputAndValue

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "ai-tools-twisted"
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
    (wheel,) = out.glob("ai_tools_twisted-*.whl")
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
    console = {p.relative_to(source).as_posix()
               for p in (source / "ai_tools" / "web" / "console" / "static").iterdir()}
    assert "ai_tools/web/console/static/index.html" in console
    assert console <= names, f"the web console's files are not in the wheel: {console - names}"


def source_modules(source: Path) -> list[str]:
    """Every module of the ai_tools source tree, by dotted name."""
    names = []
    for path in sorted((source / "ai_tools").rglob("*.py")):
        parts = path.relative_to(source).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


IMPORT_EVERY_MODULE = """
import importlib, json, sys
report = {}
for name in json.load(open(sys.argv[1])):
    try:
        report[name] = importlib.import_module(name).__file__
    except BaseException as exc:
        report[name] = f"FAILED: {type(exc).__name__}: {exc}"
print(json.dumps(report))
"""


@pytest_twisted.ensureDeferred
async def test_pip_install_then_every_module_imports_and_twistd_lists_the_plugin(
        tmp_path: Path, workdir: Path) -> None:
    """``pip install .`` into a new virtualenv: the distribution is ai-tools-twisted, it
    provides ``ai_tools``, every module imports from the installed copy, and twistd there
    knows ``ai-assistant``.  (The Evennia contrib needs Evennia to import: its files are
    checked in the wheel above and imported by ``make test-evennia``.)"""
    source = copy_source(tmp_path)
    environment = tmp_path / "venv"
    python = new_environment(environment)
    await pip_install(python, source)
    await assert_twistd_lists_the_plugin(python, environment, workdir)
    metadata = await run(python, "-c", "import importlib.metadata as m, ai_tools; "
                         f"d = m.distribution({DISTRIBUTION!r}); print(d.metadata['Name']); "
                         "print(d.locate_file('ai_tools/__init__.py') == "
                         "__import__('pathlib').Path(ai_tools.__file__))", cwd=workdir)
    assert metadata.split() == [DISTRIBUTION, "True"], metadata
    modules = [m for m in source_modules(source) if not m.startswith("ai_tools.contrib.evennia")]
    listed = tmp_path / "modules.json"
    listed.write_text(json.dumps(modules))
    report = json.loads(await run(python, "-c", IMPORT_EVERY_MODULE, str(listed), cwd=workdir))
    failed = {name: where for name, where in report.items()
              if not Path(where).resolve().is_relative_to(environment.resolve())}
    assert not failed, f"not importable from the installed wheel: {failed}"
    assert len(report) == len(modules) > 100


@pytest_twisted.ensureDeferred
async def test_editable_install_then_twistd_lists_the_plugin(tmp_path: Path,
                                                             workdir: Path) -> None:
    """``pip install -e .`` (what ``make`` does): twistd finds the plugin in the source."""
    source = copy_source(tmp_path)
    python = new_environment(tmp_path / "venv")
    await pip_install(python, source, editable=True)
    await assert_twistd_lists_the_plugin(python, source, workdir)


def makefile_install_options() -> list[str]:
    """The options of the Makefile's ``pip install -e`` line (what ``make`` runs)."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines()
                if "pip install" in line and " -e " in line)
    options = line.split(" -e ", 1)[1].split()
    return [o for o in options[1:] if o != "-q"]  # the first is the requirement


@pytest_twisted.ensureDeferred
async def test_the_makefile_install_prints_no_deprecation_banner(tmp_path: Path) -> None:
    """The first ``make`` installs without setuptools' deprecation banners (the compat
    editable mode printed one)."""
    source = copy_source(tmp_path)
    python = new_environment(tmp_path / "venv")
    from twisted.internet import reactor

    args = ("-m", "pip", "--python", str(python), "install", "--no-deps",
            "--no-build-isolation", "--no-index", *makefile_install_options(), "-e", ".")
    out, err, code = await getProcessOutputAndValue(sys.executable, args, env=clean_env(),
                                                    path=str(source), reactor=reactor)
    text = (out + err).decode(errors="replace")
    assert code == 0, text
    assert not re.search(r"Deprecat|\*{20}|!!", text), text


def test_setup_cfg_lists_every_package() -> None:
    """The explicit package list of setup.cfg holds every package directory of ai_tools (a
    missing one would leave its modules out of the wheel)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    listed = set(parser["options"]["packages"].split())
    packages = {".".join(p.parent.relative_to(ROOT).parts)
                for p in (ROOT / "ai_tools").rglob("__init__.py")}
    assert packages - listed == set(), "add these to [options] packages in setup.cfg"
    # the plugin directory, and the web console's files (data, no __init__.py)
    assert listed - packages == {"twisted.plugins", "ai_tools.web.console.static"}
    assert parser["metadata"]["name"] == DISTRIBUTION


def test_processes_do_not_inherit_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The children must not see this checkout through PYTHONPATH (it would fake a pass)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PIP_INDEX_URL", "http://example.invalid")
    env = clean_env()
    assert "PYTHONPATH" not in env and "PIP_INDEX_URL" not in env
    assert env["PIP_NO_INPUT"] == "1"

