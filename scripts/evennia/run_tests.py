"""Set up a real Evennia environment and run the Evennia contrib's tests in it.

``make test-evennia`` runs this file with Python 3.11.  From a fresh clone it:

1. creates the virtualenv ``.venv-evennia`` with Evennia 5.0.x from PyPI (which
   pins Twisted < 25 and Django 5.2) and installs ai_tools into it, so the
   main ``.venv`` keeps its own versions;
2. creates a game directory with ``evennia --init`` under ``var/evennia-test/``
   (git-ignored), writes its settings (the contrib's settings, listeners on
   127.0.0.1 only, free ports) and migrates its database;
3. runs ``evennia test --settings settings.py ai_tools.contrib.evennia`` (the
   contrib's tests under Evennia's own test runner and test base classes);
4. runs the end-to-end test (``scripts/evennia/e2e.py``) against a real
   ``evennia start`` in a fresh game directory under ``var/evennia-test/e2e``.

Steps 1 and 2 leave stamp files holding a digest of their inputs, so a rerun
skips them unless ``setup.cfg``, ``pyproject.toml``, ``setup.py`` or this
script changed.  Only the standard library is used here: this runs before the
virtualenv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-evennia"
VENV_STAMP = VENV / ".installed"
WORK = ROOT / "var" / "evennia-test"
GAME = WORK / "game"
GAME_STAMP = WORK / ".game-configured"
CONTRIB = "ai_tools.contrib.evennia"

EVENNIA_REQUIREMENT = "evennia>=5.0,<5.1"
# What the contrib's tests need beyond ai_tools' own install_requires.
TEST_REQUIREMENTS: tuple[str, ...] = ()

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

######################################################################
# ai_tools contrib
######################################################################

# Settings are read lazily by the contrib (ai_tools/contrib/evennia/conf.py holds
# the defaults); importing the contrib here would load Django models too early.
{contrib_settings}

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


def run(cmd: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
    """Run a command, failing loudly (with the command) if it fails."""
    result = subprocess.run(cmd, cwd=cwd, env=env)
    if result.returncode != 0:
        raise SystemExit(f"[test-evennia] failed ({result.returncode}): {' '.join(cmd)}")


def venv_bin(name: str) -> str:
    """Path of an executable inside ``.venv-evennia``."""
    return str(VENV / "bin" / name)


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


def ensure_venv() -> None:
    """Create or update ``.venv-evennia`` when its inputs changed."""
    wanted = digest(
        ROOT / "setup.cfg",
        ROOT / "setup.py",
        ROOT / "pyproject.toml",
        EVENNIA_REQUIREMENT,
        *TEST_REQUIREMENTS,
        sys.version,
    )
    if stamp_is_current(VENV_STAMP, wanted):
        log("virtualenv .venv-evennia is up to date")
        return
    started = time.monotonic()
    if not (VENV / "bin" / "python").exists():
        log(f"creating .venv-evennia with {sys.executable}")
        run([sys.executable, "-m", "venv", str(VENV)])
    pip = [venv_bin("python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, "--upgrade", "pip", "setuptools", "wheel"])
    log(f"installing {EVENNIA_REQUIREMENT} and ai_tools into .venv-evennia")
    run([*pip, EVENNIA_REQUIREMENT, *TEST_REQUIREMENTS])
    # compat mode: a plain path entry, so Evennia's importers and twistd find ai_tools.
    run([*pip, "-e", str(ROOT), "--config-settings", "editable_mode=compat"])
    VENV_STAMP.write_text(wanted + "\n")
    log(f"virtualenv ready in {time.monotonic() - started:.0f}s")


def write_settings(game: Path, contrib_settings: str = "") -> dict[str, int]:
    """Write ``game``'s settings with fresh free ports; returns the ports."""
    telnet_port, amp_port = free_ports(2)
    text = SETTINGS_TEMPLATE.format(
        telnet_port=telnet_port, amp_port=amp_port, contrib_settings=contrib_settings
    )
    (game / "server" / "conf" / "settings.py").write_text(text)
    return {"telnet": telnet_port, "amp": amp_port}


def init_game(game: Path, contrib_settings: str = "") -> dict[str, int]:
    """Create a game directory with ``evennia --init``, configure and migrate it."""
    if game.exists():
        shutil.rmtree(game)
    game.parent.mkdir(parents=True, exist_ok=True)
    run([venv_bin("evennia"), "--init", game.name], cwd=game.parent)
    ports = write_settings(game, contrib_settings)
    run([venv_bin("evennia"), "migrate"], cwd=game)
    return ports


def ensure_game() -> None:
    """Create the unit-test game directory when missing or out of date."""
    wanted = digest(VENV_STAMP, Path(__file__))
    if stamp_is_current(GAME_STAMP, wanted) and (GAME / "server" / "evennia.db3").exists():
        log("game directory var/evennia-test/game is up to date")
        return
    started = time.monotonic()
    log("creating and migrating var/evennia-test/game")
    init_game(GAME)
    GAME_STAMP.write_text(wanted + "\n")
    log(f"game directory ready in {time.monotonic() - started:.0f}s")


def run_contrib_tests(labels: list[str]) -> tuple[int, int, int]:
    """Run the contrib's tests with ``evennia test``; returns (ran, failed, skipped)."""
    cmd = [
        venv_bin("evennia"),
        "test",
        "--settings",
        "settings.py",
        "--noinput",
        "--keepdb",
        *labels,
    ]
    log("running: " + " ".join(["evennia", *cmd[1:]]))
    proc = subprocess.Popen(
        cmd, cwd=GAME, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    output = []
    for line in proc.stdout:
        sys.stdout.write(line)
        output.append(line)
    returncode = proc.wait()
    text = "".join(output)
    ran_match = re.search(r"^Ran (\d+) tests? in", text, re.MULTILINE)
    ran = int(ran_match.group(1)) if ran_match else 0
    failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", text))
    skipped_match = re.search(r"skipped=(\d+)", text)
    skipped = int(skipped_match.group(1)) if skipped_match else 0
    if returncode != 0 and failed == 0:
        failed = 1  # the runner itself failed (import error, bad settings...)
    return ran, failed, skipped


def run_e2e() -> tuple[int, int]:
    """Run the end-to-end test (scripts/evennia/e2e.py); returns (passed, failed)."""
    cmd = [venv_bin("python"), str(Path(__file__).with_name("e2e.py"))]
    log("running the end-to-end test: a real evennia start, telnet, a scripted model")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    summary = None
    for line in proc.stdout:
        sys.stdout.write(line)
        match = re.match(r"^e2e: (\d+) passed, (\d+) failed", line)
        if match:
            summary = (int(match.group(1)), int(match.group(2)))
    returncode = proc.wait()
    if summary is None:
        return 0, 1
    passed, failed = summary
    if returncode != 0 and failed == 0:
        failed = 1
    return passed, failed


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``make test-evennia``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "labels", nargs="*", default=[CONTRIB], help="test labels (default: the contrib)"
    )
    parser.add_argument("--setup-only", action="store_true", help="prepare, run nothing")
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end test")
    parser.add_argument("--e2e-only", action="store_true", help="only the end-to-end test")
    args = parser.parse_args(argv)
    if sys.version_info[:2] != (3, 11):
        log(f"warning: Evennia 5.0 is tested here on Python 3.11, not {sys.version.split()[0]}")
    started = time.monotonic()
    ensure_venv()
    ensure_game()
    if args.setup_only:
        return 0
    ran = failed = skipped = 0
    if not args.e2e_only:
        ran, failed, skipped = run_contrib_tests(args.labels)
        if ran == 0:
            failed += 1
    passed = max(ran - failed - skipped, 0)
    if not args.no_e2e and args.labels == [CONTRIB]:
        e2e_passed, e2e_failed = run_e2e()
        passed += e2e_passed
        failed += e2e_failed
    log(f"finished in {time.monotonic() - started:.0f}s")
    summary = f"evennia: {passed} passed, {failed} failed"
    if skipped:
        summary += f", {skipped} skipped"
    print(summary, flush=True)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
