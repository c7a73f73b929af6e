"""Real ``twistd ai-assistant`` processes for the HTTP API's hardening tests.

The process harness of :mod:`tests.integration.twistd_process` (the ``Twistd``
protocol, the bounded waits) with what these tests add: a fixture that can
lower a process's file-descriptor limit, a config where Pip only listens,
the saved state read from the file, a process's resident memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest_twisted

from tests.integration.twistd_process import (
    SCENARIO_MODEL,
    TWISTD,
    WORLD,
    Twistd,
    assert_stopped_by,
    clean_environment,
    reactor,
    sleep,
    start_and_wait,
    until,
    write_scenario,
)

__all__ = [
    "SCENARIO_MODEL",
    "TWISTD",
    "WORLD",
    "Twistd",
    "assert_stopped_by",
    "disabled_pip",
    "pid_of",
    "reactor",
    "read_state",
    "rss_bytes",
    "sleep",
    "start_and_wait",
    "twistd_processes",
    "until",
    "write_scenario",
]


def disabled_pip(directory: Path, *, http: str = "") -> Path:
    """A config where Pip hears but never ticks: every event it hears stays pending.

    The HTTP API listens on a free port of 127.0.0.1; ``http`` adds lines to
    its table (limits, ``listen`` to replace the default).
    """
    write_scenario(directory)
    listen = "" if "listen" in http else 'listen = "127.0.0.1:0"'
    text = f"""
[service]
tick_interval = 0.2
stop_grace = 5.0

[store]
path = "state/assistants.sqlite"

[world]
file = {json.dumps(str(WORLD))}

{SCENARIO_MODEL}

[http]
{listen}
{http}

[[assistants]]
name = "pip"
character_id = "char:pip"
persona = "You are Pip, the innkeeper."
enabled = false
max_pending_events = 1000000
"""
    path = directory / "assistant.toml"
    path.write_text(text)
    return path


def read_state(path: Path, name: str = "pip") -> dict[str, Any]:
    """An assistant's saved state, read from the SQLite file by this (another) process."""
    import sqlite3

    conn = sqlite3.connect(str(path))
    try:
        (state,) = conn.execute("SELECT state FROM assistants WHERE name = ?",
                                (name,)).fetchone()
        return dict(json.loads(state))
    finally:
        conn.close()


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@pytest_twisted.async_yield_fixture
async def twistd_processes() -> AsyncIterator[Callable[..., Twistd]]:
    """Starts twistd processes (``nofile=N`` lowers their descriptor limit, ``env`` adds
    variables); kills leftovers."""
    started: list[Twistd] = []

    def start(cwd: Path, config: Path, *extra: str, nofile: int | None = None,
              env: dict[str, str] | None = None) -> Twistd:
        args = [str(TWISTD), "-n", "--pidfile", str(cwd / "twistd.pid"), "ai-assistant",
                "--config", str(config), *extra]
        executable = str(TWISTD)
        if nofile is not None:
            # prlimit(1) would need util-linux; the shell's ulimit is always there
            command = " ".join(["ulimit -n", str(nofile), "&& exec", *map(_quote, args)])
            args, executable = ["/bin/sh", "-c", command], "/bin/sh"
        proc = Twistd(cwd, args)
        reactor().spawnProcess(proc, executable, args,
                               env={**clean_environment(), **(env or {})}, path=str(cwd))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.running:
            proc.signal("KILL")
            await proc.wait_ended()


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def pid_of(proc: Twistd) -> int:
    """The process id of a running twistd."""
    pid = proc.transport.pid
    assert isinstance(pid, int) and pid > 0 and os.path.exists(f"/proc/{pid}")
    return pid
