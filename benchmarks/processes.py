"""What the benchmarks run in processes of their own, and how they measure them from outside.

* :func:`process_cpu` — the CPU time a process has used (every thread), from ``/proc``;
  :func:`cluster_cpu` — the same for a PostgreSQL cluster (its server and every
  backend, those that ended included).
* :class:`ScriptedServerProcess` — the scripted model server
  (``python -m ai_tools.testing``) in a child process, so a benchmark measures only
  the client side in its own process, and the server's CPU apart.
* :func:`run_in_child` — a benchmark that runs the global reactor, in a Python of
  its own: a reactor cannot be restarted, and the next benchmark of the run may
  need one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import attrs
from twisted.internet import defer, protocol

__all__ = ["ScriptedServerProcess", "cluster_cpu", "process_cpu", "run_in_child"]

_FIRST_LINE_BYTES = 64 * 1024
"""The server's first line (its address) comes within this many bytes, or never."""

_START_SECONDS = 30.0
"""How long the server may take to say where it listens."""

_STOP_SECONDS = 10.0
"""How long the server may take to stop after SIGTERM before it is killed."""


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (field 3 on), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_cpu(pid: int | None, children: bool = False) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far; 0 if unknown.

    ``children`` adds the CPU of its children that ended (and were waited for).
    """
    fields = _stat_fields(pid) if pid is not None else None
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def cluster_cpu(data: Path) -> float:
    """CPU seconds a PostgreSQL cluster has used: its server, its live processes and the
    backends that ended (connections closed), from ``postmaster.pid`` in ``data``."""
    try:
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = process_cpu(postmaster, children=True)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == postmaster:
                total += process_cpu(int(entry.name))
    return total


class _FirstLine(protocol.ProcessProtocol):
    """Fires ``line`` with the process's first line of output; ``ended`` when it ends."""

    def __init__(self) -> None:
        self.buffer = b""
        self.line: defer.Deferred[str] = defer.Deferred()
        self.ended: defer.Deferred[None] = defer.Deferred()

    def outReceived(self, data: bytes) -> None:
        if self.line.called:
            return  # the server's later output is not read: it is --quiet anyway
        self.buffer += data
        if b"\n" in self.buffer:
            self.line.callback(self.buffer.split(b"\n", 1)[0].decode())
        elif len(self.buffer) > _FIRST_LINE_BYTES:
            self.line.errback(RuntimeError("the server's first line never ended"))

    def processEnded(self, reason: Any) -> None:
        if not self.line.called:
            self.line.errback(RuntimeError(f"server did not start: {self.buffer!r}"))
        self.ended.callback(None)


@attrs.define(eq=False)
class ScriptedServerProcess:
    """The scripted model server in a child process, answering every request with ``turn``.

    ``turn`` is a scenario turn (``{"tool_calls": [...], "latency": 0.05,
    "stream": False}``); the scenario file goes into ``directory``.  Call
    :meth:`start`, then :meth:`stop` (also when the benchmark fails).
    """

    reactor: Any
    directory: Path
    turn: dict[str, Any]
    model: str = "bench"
    url: str = attrs.field(default="", init=False)
    pid: int | None = attrs.field(default=None, init=False)
    _protocol: _FirstLine | None = attrs.field(default=None, init=False)
    _process: Any = attrs.field(default=None, init=False)

    async def start(self) -> str:
        """Start the server; its base URL (``http://127.0.0.1:PORT/v1``) once it listens."""
        scenario = self.directory / "bench-scenario.json"
        scenario.write_text(json.dumps({"model": self.model, "default": self.turn}),
                            encoding="utf-8")
        self._protocol = _FirstLine()
        self._process = self.reactor.spawnProcess(
            self._protocol, sys.executable,
            [sys.executable, "-m", "ai_tools.testing", str(scenario), "--port", "0", "--quiet"],
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.pid = self._process.pid
        line = self._protocol.line
        line.addTimeout(_START_SECONDS, self.reactor)
        self.url = (await line).rsplit(" ", 1)[-1]
        return self.url

    def cpu(self) -> float:
        """The server's CPU seconds so far."""
        return process_cpu(self.pid)

    async def stop(self) -> None:
        """Stop the server (SIGTERM) and wait until it ended; harmless if it never started."""
        if self._protocol is None or self._protocol.ended.called:
            return
        self._process.signalProcess("TERM")
        waiter: defer.Deferred[None] = defer.Deferred()
        self._protocol.ended.addBoth(lambda _: None if waiter.called else waiter.callback(None))
        waiter.addTimeout(_STOP_SECONDS, self.reactor)
        try:
            await waiter
        except defer.TimeoutError:
            self._process.signalProcess("KILL")
            await self._protocol.ended


def run_in_child(module: str, function: str = "run") -> None:
    """Run ``module.function()`` in a child Python from the repository's root (see above);
    its output goes where ours goes, and its failure fails the benchmark."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", f"from {module} import {function}; {function}()"],
                   cwd=root, check=True)
