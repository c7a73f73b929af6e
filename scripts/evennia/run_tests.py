"""Set up real Evennia environments and run the Evennia contrib's tests in each.

``make test-evennia`` runs this file.  The contrib is supported on two Evennia
releases, each tested with the Python it is published for:

* Evennia 5.0.x on Python 3.11, in the virtualenv ``.venv-evennia-5.0``;
* Evennia 6.1.x on Python 3.12, in the virtualenv ``.venv-evennia-6.1``.

For each, one after the other (the machine has two cores; the end-to-end
test times restarts), from a fresh clone it:

1. finds the interpreter (``$(pyenv root)/versions/3.X.*`` by full path,
   since the pyenv shim refuses a version that is not selected, else
   ``python3.X`` on the PATH if it really is that version) — a missing
   interpreter fails the run, it is never skipped;
2. creates the virtualenv with that Evennia from PyPI (Evennia pins its own
   Twisted and Django) and installs ai_tools into it, so the main ``.venv``
   keeps its own versions;
3. creates a game directory with ``evennia --init`` under
   ``var/evennia-test/<version>/`` (git-ignored), writes its settings (listeners
   on 127.0.0.1 only, free ports) and migrates its database (a copy of it is
   the unit tests' database, kept between runs);
4. runs ``evennia test --settings settings.py ai_tools.contrib.evennia`` (the
   contrib's tests under Evennia's own test runner and test base classes);
5. runs the end-to-end test (``scripts/evennia/e2e.py``) against a real
   ``evennia start`` in a fresh game directory beside it.

Steps 2 and 3 leave stamp files holding a digest of their inputs, so a rerun
skips them unless ``setup.cfg``, ``pyproject.toml``, ``setup.py``, the
interpreter or this script changed.  Only the standard library is used here:
this runs before any virtualenv exists.  The last lines are
``evennia 5.0.x: N passed, M failed`` and ``evennia 6.1.x: N passed, M failed``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "var" / "evennia-test"
CONTRIB = "ai_tools.contrib.evennia"

# What the contrib's tests need beyond ai_tools' own install_requires.
TEST_REQUIREMENTS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """One supported Evennia release and the Python it is tested with."""

    version: str
    """``"5.0"``: the release series, as in the venv's and the game dir's names."""
    requirement: str
    python: str
    """``"3.11"``: the interpreter's major.minor."""

    @property
    def label(self) -> str:
        """How the summary line names it: ``evennia 5.0.x``."""
        return f"evennia {self.version}.x"

    @property
    def venv(self) -> Path:
        return ROOT / f".venv-evennia-{self.version}"

    @property
    def work(self) -> Path:
        return WORK / self.version

    @property
    def game(self) -> Path:
        """The game directory of the unit tests (its database is the e2e template)."""
        return self.work / "game"

    def bin(self, name: str) -> str:
        """Path of an executable inside the target's virtualenv."""
        return str(self.venv / "bin" / name)


TARGETS = (
    Target("5.0", "evennia>=5.0,<5.1", "3.11"),
    Target("6.1", "evennia>=6.1,<6.2", "3.12"),
)
"""Every Evennia release the contrib supports, oldest first."""


@dataclass
class Outcome:
    """What one target's run counted."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self, target: Target) -> str:
        text = f"{target.label}: {self.passed} passed, {self.failed} failed"
        if self.skipped:
            text += f", {self.skipped} skipped"
        if self.notes:
            text += " (" + "; ".join(self.notes) + ")"
        return text


class SetupError(Exception):
    """A target could not be set up (no interpreter, pip failed...)."""


SETTINGS_TEMPLATE = '''\
"""Settings of a throw-away game directory used by the ai_tools contrib tests.

Written by scripts/evennia/run_tests.py; edits are lost on the next setup.
"""

from evennia.settings_default import *  # noqa: F401,F403

SERVERNAME = "ai_tools_test"

# Listen on the loopback interface only, on ports free when this was written.
TELNET_INTERFACES = ["127.0.0.1"]
TELNET_PORTS = [{telnet_port}]
AMP_INTERFACE = "127.0.0.1"
AMP_PORT = {amp_port}
WEBSERVER_ENABLED = False
WEBCLIENT_ENABLED = False
WEBSERVER_INTERFACES = ["127.0.0.1"]
WEBSOCKET_CLIENT_INTERFACE = "127.0.0.1"
SSL_INTERFACES = ["127.0.0.1"]
SSH_INTERFACES = ["127.0.0.1"]
# The test database is a file kept between runs (``evennia test --keepdb``), so a
# rerun does not apply Evennia's hundred migrations again.
DATABASES["default"]["TEST"] = {{"NAME": GAME_DIR + "/server/test-evennia.db3"}}  # noqa: F405
IDLE_TIMEOUT = -1
GUEST_ENABLED = False
# Test accounts use short throw-away passwords, hashed fast (this game is never public).
AUTH_PASSWORD_VALIDATORS = []
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

try:
    from server.conf.secret_settings import *  # noqa: F401,F403
except ImportError:
    pass
'''


def log(message: str) -> None:
    """Print one progress line (flushed so ``make`` shows it at once)."""
    print(f"[test-evennia] {message}", flush=True)


def digest(*parts: str | Path) -> str:
    """A stable digest of files and strings, for the stamp files."""
    sha = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            sha.update(part.read_bytes() if part.exists() else b"<missing>")
        else:
            sha.update(part.encode())
        sha.update(b"\0")
    return sha.hexdigest()


def stamp_is_current(stamp: Path, value: str) -> bool:
    """Whether ``stamp`` exists and records ``value``."""
    return stamp.exists() and stamp.read_text().strip() == value


def run(cmd: list[str], cwd: Path = ROOT) -> None:
    """Run a command; a failure raises :class:`SetupError` naming the command."""
    result = subprocess.run(cmd, cwd=cwd)
    if result.returncode != 0:
        raise SetupError(f"failed ({result.returncode}): {' '.join(cmd)}")


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# -- the interpreter ------------------------------------------------------------------


def python_version_of(executable: str) -> str | None:
    """``"3.12"`` for a working interpreter, None if it does not run (a refusing shim)."""
    try:
        result = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _release(path: Path) -> tuple[int, ...]:
    """``(3, 12, 1)`` from ``.../versions/3.12.1/bin/python3.12``, for sorting."""
    numbers = re.findall(r"\d+", path.parents[1].name)
    return tuple(int(n) for n in numbers)


def pyenv_root() -> Path | None:
    """``pyenv root`` (PYENV_ROOT, else asking pyenv), or None without pyenv."""
    if os.environ.get("PYENV_ROOT"):
        return Path(os.environ["PYENV_ROOT"])
    try:
        result = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(result.stdout.strip()) if result.returncode == 0 and result.stdout else None


def find_python(minor: str, override: str | None = None) -> str:
    """The interpreter of Python ``minor`` (``"3.12"``); SetupError if there is none."""
    candidates: list[str] = [override] if override else []
    if not override:
        root = pyenv_root()
        if root is not None:
            found = (root / "versions").glob(f"{minor}.*/bin/python{minor}")
            candidates += [str(p) for p in sorted(found, key=_release, reverse=True)]
        on_path = shutil.which(f"python{minor}")
        if on_path:
            candidates.append(on_path)
    for candidate in candidates:
        if python_version_of(candidate) == minor:
            return candidate
    tried = ", ".join(candidates) or "nothing found"
    raise SetupError(
        f"no Python {minor} (tried: {tried}); install it (e.g. `pyenv install {minor}`) "
        f"or name it with --python {minor}=PATH"
    )


# -- the virtualenv and the game directory ------------------------------------------------


def ensure_venv(target: Target, python: str) -> None:
    """Create or update the target's virtualenv when its inputs changed."""
    stamp = target.venv / ".installed"
    version = subprocess.run([python, "-VV"], capture_output=True, text=True).stdout
    wanted = digest(
        ROOT / "setup.cfg",
        ROOT / "setup.py",
        ROOT / "pyproject.toml",
        target.requirement,
        *TEST_REQUIREMENTS,
        version,
    )
    if stamp_is_current(stamp, wanted):
        log(f"virtualenv {target.venv.name} is up to date")
        return
    started = time.monotonic()
    if target.venv.exists():
        shutil.rmtree(target.venv)  # another interpreter or release: start clean
    log(f"creating {target.venv.name} with {python}")
    run([python, "-m", "venv", str(target.venv)])
    pip = [target.bin("python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, "--upgrade", "pip", "setuptools", "wheel"])
    log(f"installing {target.requirement} and ai_tools into {target.venv.name}")
    run([*pip, target.requirement, *TEST_REQUIREMENTS])
    # An editable install puts the checkout on sys.path (Evennia's twistd imports it from there).
    run([*pip, "-e", str(ROOT)])
    stamp.write_text(wanted + "\n")
    log(f"{target.venv.name} ready in {time.monotonic() - started:.0f}s")


def write_settings(game: Path) -> None:
    """Write ``game``'s settings with fresh free ports."""
    telnet_port, amp_port = free_ports(2)
    text = SETTINGS_TEMPLATE.format(telnet_port=telnet_port, amp_port=amp_port)
    (game / "server" / "conf" / "settings.py").write_text(text)


def ensure_game(target: Target) -> None:
    """Create (``evennia --init``), configure and migrate the unit-test game directory."""
    stamp = target.work / ".game-configured"
    wanted = digest(target.venv / ".installed", Path(__file__))
    game = target.game
    if stamp_is_current(stamp, wanted) and (game / "server" / "evennia.db3").exists():
        log(f"game directory {game.relative_to(ROOT)} is up to date")
        return
    started = time.monotonic()
    log(f"creating and migrating {game.relative_to(ROOT)}")
    if game.exists():
        shutil.rmtree(game)
    game.parent.mkdir(parents=True, exist_ok=True)
    run([target.bin("evennia"), "--init", game.name], cwd=game.parent)
    write_settings(game)
    run([target.bin("evennia"), "migrate"], cwd=game)
    # The test database starts as a copy of the migrated one (``--keepdb`` then
    # applies nothing), instead of Evennia's migrations run a second time.
    database = game / "server" / "evennia.db3"
    shutil.copyfile(database, database.with_name("test-evennia.db3"))
    stamp.write_text(wanted + "\n")
    log(f"game directory ready in {time.monotonic() - started:.0f}s")


# -- the tests ----------------------------------------------------------------------------


def stream(cmd: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``cmd``, echoing its output as it comes; returns (exit code, output)."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    output = []
    for line in proc.stdout:
        sys.stdout.write(line)
        output.append(line)
    return proc.wait(), "".join(output)


def run_contrib_tests(target: Target, labels: list[str], outcome: Outcome) -> None:
    """Run the contrib's tests with ``evennia test``; adds to ``outcome``."""
    cmd = [target.bin("evennia"), "test", "--settings", "settings.py", "--noinput", "--keepdb"]
    log("running: evennia " + " ".join([*cmd[1:], *labels]))
    returncode, text = stream([*cmd, *labels], target.game)
    ran_match = re.search(r"^Ran (\d+) tests? in", text, re.MULTILINE)
    ran = int(ran_match.group(1)) if ran_match else 0
    failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", text))
    skipped_match = re.search(r"skipped=(\d+)", text)
    skipped = int(skipped_match.group(1)) if skipped_match else 0
    if returncode != 0 and failed == 0:
        failed = 1  # the runner itself failed (import error, bad settings...)
        outcome.notes.append("evennia test failed to run")
    if ran == 0:
        failed = max(failed, 1)
        outcome.notes.append("no tests ran")
    outcome.passed += max(ran - failed - skipped, 0)
    outcome.failed += failed
    outcome.skipped += skipped


def run_e2e(target: Target, outcome: Outcome) -> None:
    """Run the end-to-end test (scripts/evennia/e2e.py); adds to ``outcome``."""
    cmd = [
        target.bin("python"),
        str(Path(__file__).with_name("e2e.py")),
        "--workdir",
        str(target.work / "e2e"),
        "--template-db",
        str(target.game / "server" / "evennia.db3"),
    ]
    log("running the end-to-end test: a real evennia start, telnet, a scripted model")
    returncode, text = stream(cmd, ROOT)
    match = re.search(r"^e2e: (\d+) passed, (\d+) failed", text, re.MULTILINE)
    if match is None:
        outcome.failed += 1
        outcome.notes.append("the end-to-end test did not finish")
        return
    passed, failed = int(match.group(1)), int(match.group(2))
    if returncode != 0 and failed == 0:
        failed = 1
    outcome.passed += passed
    outcome.failed += failed


def run_target(target: Target, args: argparse.Namespace) -> Outcome:
    """Set up one target and run its tests."""
    outcome = Outcome()
    started = time.monotonic()
    log(f"{target.label} on Python {target.python}")
    try:
        python = find_python(target.python, args.interpreters.get(target.python))
        ensure_venv(target, python)
        ensure_game(target)
    except SetupError as exc:
        log(f"{target.label}: {exc}")
        outcome.failed += 1
        outcome.notes.append(str(exc))
        return outcome
    if args.setup_only:
        return outcome
    if not args.e2e_only:
        run_contrib_tests(target, args.labels, outcome)
    if not args.no_e2e and args.labels == [CONTRIB]:
        run_e2e(target, outcome)
    log(f"{target.label} finished in {time.monotonic() - started:.0f}s")
    return outcome


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see ``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "labels", nargs="*", default=[CONTRIB], help="test labels (default: the contrib)"
    )
    parser.add_argument(
        "--evennia",
        action="append",
        choices=[t.version for t in TARGETS],
        help="only this Evennia release (repeatable; default: every one)",
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="X.Y=PATH",
        help="the interpreter to use for Python X.Y (default: found under pyenv, then PATH)",
    )
    parser.add_argument("--setup-only", action="store_true", help="prepare, run nothing")
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end test")
    parser.add_argument("--e2e-only", action="store_true", help="only the end-to-end test")
    args = parser.parse_args(argv)
    try:
        args.interpreters = dict(item.split("=", 1) for item in args.python)
    except ValueError:
        parser.error("--python takes X.Y=PATH")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``make test-evennia``."""
    args = parse_args(argv)
    targets = [t for t in TARGETS if not args.evennia or t.version in args.evennia]
    started = time.monotonic()
    outcomes = [(target, run_target(target, args)) for target in targets]
    log(f"finished in {time.monotonic() - started:.0f}s")
    for target, outcome in outcomes:
        print(outcome.line(target), flush=True)
    if args.setup_only:
        return 1 if any(o.failed for _, o in outcomes) else 0
    return 1 if any(o.failed or not o.passed for _, o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
