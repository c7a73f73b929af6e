"""The parts of the end-to-end test that know nothing of ai_tools.

A telnet client that logs in as a player (:class:`Player`), a throw-away game
directory and the ``evennia`` commands run in it (:class:`Game`), and named
checks that report and go on (:class:`Checks`).  ``e2e.py`` drives them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from twisted.conch.telnet import TelnetProtocol, TelnetTransport
from twisted.internet import defer, error, protocol, task
from twisted.internet.utils import getProcessOutputAndValue

WAIT = 40.0
"""Seconds any single wait may take (a telnet answer, a command)."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def say(message: str) -> None:
    """One progress line."""
    print(f"[e2e] {message}", flush=True)


def free_ports(count: int) -> list[int]:
    """Distinct TCP ports free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def pause(reactor: Any, seconds: float) -> defer.Deferred[None]:
    """Wait ``seconds`` on the real reactor."""
    return task.deferLater(reactor, seconds, lambda: None)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


# -- telnet ------------------------------------------------------------------------


class _Screen(TelnetProtocol):
    """Collects what the server sends (telnet options refused, ANSI stripped)."""

    def __init__(self) -> None:
        self.text = ""
        self.waiters: list[tuple[re.Pattern[str], int, defer.Deferred[str]]] = []
        self.closed: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.text += _ANSI.sub("", data.decode("utf-8", "replace")).replace("\r", "")
        for waiter in list(self.waiters):
            pattern, start, d = waiter
            match = pattern.search(self.text, start)
            if match:
                self.waiters.remove(waiter)
                d.callback(match.group(0))

    def connectionLost(self, reason: Any) -> None:
        if not self.closed.called:
            self.closed.callback(None)


class Player:
    """A telnet client logged in as one account."""

    def __init__(self, reactor: Any, name: str, screen: _Screen, transport: Any) -> None:
        self.reactor = reactor
        self.name = name
        self.screen = screen
        self.transport = transport
        self.mark = 0

    @classmethod
    async def connect(cls, reactor: Any, port: int, name: str, timeout: float = WAIT) -> Player:
        """Open a telnet connection and wait for the connection screen."""
        screen = _Screen()
        creator = protocol.ClientCreator(reactor, TelnetTransport, lambda: screen)
        transport = await creator.connectTCP("127.0.0.1", port, timeout=timeout)
        player = cls(reactor, name, screen, transport)
        try:
            await player.expect(r"connect|Connect|create", "the connection screen", timeout)
        except AssertionError:
            player.close()
            raise
        return player

    @property
    def connected(self) -> bool:
        """Whether the telnet connection is still open."""
        return not self.screen.closed.called

    def send(self, line: str) -> None:
        """Type one line; later ``expect`` calls only look at newer output."""
        self.mark = len(self.screen.text)
        self.transport.write(line.encode("utf-8") + b"\r\n")

    async def expect(
        self, pattern: str, what: str, timeout: float = WAIT, since: int | None = None
    ) -> str:
        """Wait for ``pattern`` in the output since the last ``send`` (or ``since``)."""
        start = self.mark if since is None else since
        regex = re.compile(pattern, re.DOTALL)
        match = regex.search(self.screen.text, start)
        if match:
            return match.group(0)
        d: defer.Deferred[str] = defer.Deferred()
        self.screen.waiters.append((regex, start, d))
        d.addTimeout(timeout, self.reactor)
        try:
            return await d
        except defer.TimeoutError:
            tail = self.screen.text[start:][-800:]
            raise AssertionError(
                f"{self.name}: no {what} within {timeout:.0f}s; got:\n{tail}"
            ) from None

    async def command(self, line: str, pattern: str, what: str, timeout: float = WAIT) -> str:
        """Send ``line`` and wait for ``pattern``; returns the output since the line."""
        self.send(line)
        await self.expect(pattern, what, timeout)
        return self.screen.text[self.mark :]

    async def login(self, password: str, create: bool = False) -> None:
        """Log in (creating the account first if asked); fires once in Limbo."""
        if create:
            await self.command(
                f"create {self.name} {password}", r"created|[Ww]elcome", "account creation"
            )
        await self.command(f"connect {self.name} {password}", r"Limbo", "login into Limbo")

    async def answered(self, deadline: float, line: str = "look", pattern: str = r"Limbo") -> None:
        """Type ``line`` every half second until the game answers it (or ``deadline``)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: the game did not answer {line!r} in time")
            try:
                await self.command(line, pattern, f"an answer to {line!r}", min(left, 0.5))
                return
            except AssertionError:
                if not self.connected:
                    raise AssertionError(f"{self.name}: the telnet session was closed") from None

    def close(self) -> None:
        """Hang up."""
        self.transport.loseConnection()


async def login_when_up(
    reactor: Any, port: int, name: str, password: str, deadline: float
) -> Player:
    """Connect and log in again and again until it works (the game may be starting).

    Input typed while the Portal waits for its Server is lost (the Portal has
    no Server to hand it to), so a login that gets no answer is tried anew on
    a fresh connection, which must get the connection screen first.
    """
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{name} could not log in: the game did not come up in time")
        player = None
        try:
            player = await Player.connect(reactor, port, name, timeout=min(left, 2.0))
            await player.command(
                f"connect {name} {password}", r"Limbo", "login into Limbo", min(left, 5.0)
            )
            return player
        except (AssertionError, error.ConnectError, defer.TimeoutError):
            if player is not None:
                player.close()
            await pause(reactor, 0.25)


# -- the game directory and the server processes --------------------------------------


class Game:
    """A game directory and the ``evennia`` commands run in it."""

    def __init__(self, reactor: Any, workdir: Path, env: dict[str, str]) -> None:
        self.reactor = reactor
        self.dir = workdir / "game"
        self.workdir = workdir
        self.telnet_port, self.amp_port = free_ports(2)
        self.evennia = str(Path(sys.executable).parent / "evennia")
        self._env = dict(os.environ)
        self._env.update(env)
        self._env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]

    def reset_dir(self) -> None:
        """Start from an empty work directory."""
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)

    async def run(self, *args: str, cwd: Path | None = None, timeout: float = 120.0) -> str:
        """Run ``evennia args...``; fails with its output if it fails or hangs."""
        d = getProcessOutputAndValue(
            self.evennia, args, env=self._env, path=str(cwd or self.dir), reactor=self.reactor
        )
        d.addTimeout(timeout, self.reactor)
        out, err, code = await d
        text = out.decode("utf-8", "replace") + err.decode("utf-8", "replace")
        if code != 0:
            raise AssertionError(f"evennia {' '.join(args)} exited {code}:\n{text[-2000:]}")
        return text

    async def control(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``evennia start|reload|stop``, again if the launcher timed out.

        The launcher gives the Portal ten seconds to answer; on a loaded machine
        it may take longer, and running the same command again is how Evennia
        itself says to recover ("Try again").
        """
        outputs = []
        for attempt in range(4):
            output = await self.run(*args, timeout=timeout)
            outputs.append(output)
            if "timed out" not in output:
                break
            say(f"evennia {' '.join(args)}: the launcher timed out (attempt {attempt + 1})")
            await pause(self.reactor, 2.0)
        return "\n".join(outputs)

    def pids(self) -> dict[str, int]:
        """The pids of the running Server and Portal (from their pid files)."""
        found = {}
        for name in ("server", "portal"):
            path = self.dir / "server" / f"{name}.pid"
            if path.exists():
                try:
                    found[name] = int(path.read_text().strip())
                except ValueError:
                    pass
        return found

    @property
    def server_log(self) -> Path:
        """The Server's log file."""
        return self.dir / "server" / "logs" / "server.log"

    def log_size(self) -> int:
        """The server log's size now (to read only what is written after)."""
        return self.server_log.stat().st_size if self.server_log.exists() else 0

    def log_since(self, offset: int) -> str:
        """The server log written since ``offset``."""
        if not self.server_log.exists():
            return ""
        with self.server_log.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server log (for failure reports)."""
        if not self.server_log.exists():
            return "(no server.log)"
        text = self.server_log.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """Last resort: SIGKILL whatever is still running from this game."""
        for name, pid in self.pids().items():
            try:
                os.kill(pid, signal.SIGKILL)
                say(f"killed leftover {name} process {pid}")
            except OSError:
                pass


# -- the checks ------------------------------------------------------------------------


class Checks:
    """Named checks, run in order; one failing is reported and the next still runs."""

    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: list[tuple[str, str]] = []

    async def check(self, name: str, body: Callable[[], Awaitable[Any]]) -> bool:
        """Run one check; True if it passed."""
        started = time.monotonic()
        try:
            await body()
        except Exception as exc:  # report and go on
            self.failed.append((name, f"{type(exc).__name__}: {exc}"))
            say(f"FAIL {name} ({time.monotonic() - started:.1f}s): {exc}")
            return False
        self.passed.append(name)
        say(f"ok   {name} ({time.monotonic() - started:.1f}s)")
        return True
