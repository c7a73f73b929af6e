"""A throwaway PostgreSQL cluster for the tests and benchmarks: 127.0.0.1, a free port.

:class:`ThrowawayCluster` runs ``initdb`` into a new temporary directory,
starts ``postgres`` listening only on 127.0.0.1 (no Unix socket) on a free
port, and removes everything again on :meth:`ThrowawayCluster.stop`.  The
server binaries are found under Debian's versioned directory
(``/usr/lib/postgresql/<version>/bin``), through ``pg_config --bindir``, or
in ``AI_TOOLS_PG_BINDIR``; when none is there, :class:`ClusterUnavailable`
says how to install them (``make test`` does).

``initdb`` refuses to run as root, and CI runs as root: then the cluster runs
as the ``postgres`` system user (``runuser -u postgres``) on a directory it
owns.  The superuser's password is random, written to a file only the cluster
owner reads while ``initdb`` runs, and checked over TCP (``scram-sha-256``),
so the tests connect as a deployment does: a DSN without the password plus
the password from the environment or a file.

The server runs with ``fsync=off``: these clusters hold test data only, and
a killed *process* (what the crash tests do) loses nothing committed anyway.

A test run killed from outside (SIGKILL, a CI timeout) cannot stop its
clusters, so each cluster has a watchdog: a small process of its own session
that waits for the end of a pipe the test process holds.  The kernel closes
that pipe whatever way the test process ends; the watchdog then stops the
server and removes its directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

SUPERUSER = "ai_tools_test"
"""The cluster's superuser (the tests' connection role)."""

SYSTEM_USER = "postgres"
"""The system user that owns the cluster when the tests run as root."""

_START_ATTEMPTS = 3
"""A free port can be taken by someone else before the server binds it: try again."""


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL server binaries, or the cluster could not be started."""


def find_bindir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (newest version first)."""
    candidates: list[str] = []
    if os.environ.get("AI_TOOLS_PG_BINDIR"):
        candidates.append(os.environ["AI_TOOLS_PG_BINDIR"])
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                             key=lambda p: _version_key(Path(p).parent.name), reverse=True))
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 check=True, timeout=30)
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    raise ClusterUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin, "
        "pg_config --bindir, PATH or AI_TOOLS_PG_BINDIR: install them "
        "(Debian: apt-get update && apt-get install -y postgresql; `make test` does this)")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@attrs.define(eq=False)
class ThrowawayCluster:
    """One PostgreSQL cluster in a temporary directory; :meth:`start`, then :meth:`stop`.

    After :meth:`start`: ``port``, ``password`` and :meth:`dsn` (without the
    password) are set.
    """

    bindir: Path = attrs.field(factory=find_bindir)
    port: int = attrs.field(default=0, init=False)
    password: str = attrs.field(factory=lambda: secrets.token_urlsafe(24), init=False)
    root: Path | None = attrs.field(default=None, init=False)
    _as_user: str | None = attrs.field(default=None, init=False)
    _watchdog: subprocess.Popen[bytes] | None = attrs.field(default=None, init=False)

    @property
    def data(self) -> Path:
        """The cluster's data directory."""
        assert self.root is not None, "the cluster was not started"
        return self.root / "data"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq connection string for ``dbname``, without the password."""
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname}"

    def start(self) -> ThrowawayCluster:
        """Create and start the cluster; ClusterUnavailable (with the server's log) on failure."""
        self.root = Path(tempfile.mkdtemp(prefix="ai_tools_pg_"))
        try:
            self._watchdog = _start_watchdog(self.root, self.bindir)
            self._prepare_root()
            self._initdb()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare_root(self) -> None:
        assert self.root is not None
        os.chmod(self.root, 0o700)
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                raise ClusterUnavailable(
                    f"running as root, and initdb refuses root: no {SYSTEM_USER!r} system user "
                    "to run the cluster as (the postgresql package creates it)") from None
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as_user = SYSTEM_USER

    def _run(self, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if self._as_user is not None:
            command = ["runuser", "-u", self._as_user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              cwd=str(self.root), check=False)

    def _initdb(self) -> None:
        assert self.root is not None
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        os.chmod(pwfile, 0o600)
        if self._as_user is not None:
            owner = pwd.getpwnam(self._as_user)
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        try:
            done = self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
                             f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
                             "--auth-local=reject", "-E", "UTF8", "--locale=C.UTF-8",
                             "--no-sync")
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            raise ClusterUnavailable(f"initdb failed ({done.returncode}): "
                                     f"{(done.stderr or done.stdout).strip()}")

    def _start_server(self) -> None:
        assert self.root is not None
        log = self.root / "server.log"
        for _ in range(_START_ATTEMPTS):
            self.port = free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} "
                       "-c unix_socket_directories='' -c fsync=off -c full_page_writes=off "
                       "-c synchronous_commit=off -c max_connections=200")
            done = self._run(str(self.bindir / "pg_ctl"), "start", "-w", "-t", "60",
                             "-D", str(self.data), "-l", str(log), "-o", options)
            if done.returncode == 0:
                return
            time.sleep(0.2)  # not a test wait: the port was taken, pick another
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ClusterUnavailable(f"PostgreSQL did not start on 127.0.0.1: {tail.strip()}")

    def stop(self) -> None:
        """Stop the server (immediately) and remove the directory; harmless twice."""
        root, self.root = self.root, None
        if root is not None:
            _remove_cluster(root, self.bindir)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:  # its pipe closed, it finds nothing left and ends
            assert watchdog.stdin is not None
            watchdog.stdin.close()
            watchdog.wait(timeout=60)


def _remove_cluster(root: Path, bindir: Path) -> None:
    """Stop the server of the cluster in ``root`` (if running), then remove ``root``.

    ``pg_ctl`` runs as the owner of the data directory (root cannot run it).
    """
    data = root / "data"
    if (data / "postmaster.pid").exists():
        command = [str(bindir / "pg_ctl"), "stop", "-m", "immediate", "-w", "-D", str(data)]
        if os.geteuid() == 0:
            owner = pwd.getpwuid(data.stat().st_uid).pw_name
            command = ["runuser", "-u", owner, "--", *command]
        subprocess.run(command, capture_output=True, timeout=60, check=False)
    shutil.rmtree(root, ignore_errors=True)


def _start_watchdog(root: Path, bindir: Path) -> subprocess.Popen[bytes]:
    """The process that removes the cluster in ``root`` once this process has ended.

    It reads a pipe until its end (see the module docstring), in a session of its
    own so that a Ctrl-C to the test run does not stop it before it cleans up.
    """
    return subprocess.Popen([sys.executable, __file__, "--watch", str(root), str(bindir)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _watch(root: Path, bindir: Path) -> None:
    sys.stdin.buffer.read()  # returns when the test process closed the pipe or ended
    if root.exists():
        _remove_cluster(root, bindir)


if __name__ == "__main__" and sys.argv[1:2] == ["--watch"]:
    _watch(Path(sys.argv[2]), Path(sys.argv[3]))
