"""Crash test: a writer process is SIGKILLed at several points; the file stays sound.

A child process (this module run with ``--write``) saves assistant states in a
loop through :class:`SQLiteStore`, alternating single saves and grouped
``save_many`` writes.  Each state is a deterministic function of
``(name, version)`` with a history holding tool calls, some left unanswered
(a crash in the middle of a tool call).  After every write it prints
``saved <version>``.

The test kills it with SIGKILL at several points — at once, after start-up,
and after a number of saves — on the same file, and after each kill a new
process (``--check``) opens the file and reports:

* ``PRAGMA integrity_check`` is ``ok``;
* every assistant's state is exactly the state of one version (no mix of two
  writes), and that version is at least the last one acknowledged;
* after ``load_assistant`` every tool call in the history has an answer.

Nothing here depends on timing: wherever the kill lands, the checks must hold.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer, protocol

NAMES = ("ada", "bob", "cyd")
REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.integration.test_store_crash"


def make_state(name: str, version: int) -> dict[str, Any]:
    """The state ``name`` has at ``version``: big enough to span many pages."""
    history: list[dict[str, Any]] = [{"role": "system", "content": f"You are {name}."}]
    for turn in range(3 + version % 5):
        call_id = f"{name}-{version}-{turn}"
        history.append({"role": "user", "content": f"turn {turn} of version {version}"})
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "inspect_location", "arguments": "{}"},
                    }
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": call_id, "content": '{"success": true}'})
    if version % 2:
        # The process "stopped" while these calls were running: no answers saved.
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"{name}-{version}-open-{i}",
                        "type": "function",
                        "function": {"name": "say", "arguments": "{}"},
                    }
                    for i in range(2)
                ],
            }
        )
    if version % 3 == 0:
        history.append({"role": "assistant", "content": json.dumps({"tool": "look"})})
    return {
        "version": version,
        "mode": "awake" if version % 4 else "sleep",
        "history": history,
        "pending_events": [{"type": "say", "text": f"event {version}-{n}"} for n in range(3)],
        "counters": {"ticks": version, "tool_calls": version * 3},
        "padding": f"{name}:{version}:" + "x" * (30_000 + version),
    }


# -- child programs ---------------------------------------------------------------


def run_writer(path: str) -> None:
    """Save states forever (until killed), printing ``saved <version>`` after each round."""
    from twisted.internet import task

    from ai_tools.store.sqlite import SQLiteStore

    async def main(reactor: Any) -> None:
        store = SQLiteStore(path, synchronous="FULL")
        await store.open()
        first = await store.load_assistant(NAMES[0])
        version = (first["version"] + 1) if first else 0
        print(f"ready {version}", flush=True)
        while version < 100_000:
            if version % 2:
                await store.save_many({name: make_state(name, version) for name in NAMES})
            else:
                for name in NAMES:
                    await store.save_assistant(name, make_state(name, version))
            print(f"saved {version}", flush=True)
            version += 1

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


def run_checker(path: str) -> None:
    """Open the file in a fresh process and print a JSON report of what is in it."""
    from twisted.internet import task

    from ai_tools.store.history_repair import repair_state, unanswered_tool_calls
    from ai_tools.store.sqlite import SQLiteStore

    report: dict[str, Any] = {}
    if os.path.exists(path):
        conn = sqlite3.connect(path)
        report["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
        conn.close()

    async def main(reactor: Any) -> None:
        store = SQLiteStore(path)
        await store.open()
        states = {}
        for name in NAMES:
            loaded = await store.load_assistant(name)
            if loaded is None:
                states[name] = None
                continue
            version = loaded.get("version")
            expected, _ = repair_state(make_state(name, version))
            states[name] = {
                "version": version,
                "exact": loaded == expected,
                "unanswered": len(unanswered_tool_calls(loaded["history"])),
            }
        report["states"] = states
        report["integrity_after_open"] = await store.integrity_check()
        await store.close()
        print(json.dumps(report), flush=True)

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


# -- the test -----------------------------------------------------------------------


class ChildProcess(protocol.ProcessProtocol):
    """Collects a child's output; kills it when ``kill_after`` 'saved' lines arrived."""

    def __init__(self, kill_after: int | None) -> None:
        self.kill_after = kill_after
        self.lines: list[str] = []
        self.stderr = b""
        self.saved = -1
        self.started_at = -1
        self._buffer = b""
        self.ended: defer.Deferred[None] = defer.Deferred()
        self.killed = False

    def connectionMade(self) -> None:
        if self.kill_after == -2:  # kill at once, wherever start-up is
            self.kill()

    def kill(self) -> None:
        if not self.killed:
            self.killed = True
            self.transport.signalProcess("KILL")

    def outReceived(self, data: bytes) -> None:
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for raw in complete:
            line = raw.decode()
            self.lines.append(line)
            if line.startswith("saved "):
                self.saved = int(line.split()[1])
            if self.kill_after is None:
                continue
            if line.startswith("ready "):
                self.started_at = int(line.split()[1])
            if self.kill_after == -1 and line.startswith("ready "):
                self.kill()
            elif self.kill_after >= 0 and line.startswith("saved "):
                self.kill_after -= 1
                if self.kill_after < 0:
                    self.kill()

    def errReceived(self, data: bytes) -> None:
        self.stderr += data

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(None)


def spawn(mode: str, path: Path, kill_after: int | None) -> ChildProcess:
    """Start this module as a child in ``mode`` (``--write`` or ``--check``)."""
    from twisted.internet import reactor

    child = ChildProcess(kill_after)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    reactor.spawnProcess(  # type: ignore[attr-defined]
        child,
        sys.executable,
        [sys.executable, "-m", MODULE, mode, str(path)],
        env=env,
        path=str(REPO_ROOT),
    )
    return child


async def wait_for(child: ChildProcess, limit: float = 120.0) -> None:
    """Wait for the child to end; a child stuck beyond ``limit`` seconds is killed."""
    from twisted.internet import reactor

    guard = reactor.callLater(limit, child.kill)  # type: ignore[attr-defined]
    try:
        await child.ended
    finally:
        if guard.active():
            guard.cancel()


@pytest_twisted.ensureDeferred
async def test_sigkill_at_several_points_leaves_a_sound_file(tmp_path: Path) -> None:
    """Kill the writer at once, after start-up, and after 1, 3, 10 and 25 saves."""
    path = tmp_path / "crash.sqlite"
    acknowledged = -1  # every assistant was saved at this version or later
    attempted = -1  # no version beyond this one was ever asked for
    for kill_after in (-2, -1, 0, 2, 9, 24):
        writer = spawn("--write", path, kill_after)
        await wait_for(writer)
        assert writer.killed, writer.stderr.decode()
        acknowledged = max(acknowledged, writer.saved)
        attempted = max(attempted, writer.saved + 1, writer.started_at)

        checker = spawn("--check", path, None)
        await wait_for(checker)
        assert checker.lines, checker.stderr.decode()
        report = json.loads(checker.lines[-1])
        assert report.get("integrity", "ok") == "ok"
        assert report["integrity_after_open"] == "ok"
        for name, state in report["states"].items():
            if state is None:
                assert acknowledged < 0, (name, report)  # nothing was promised yet
                continue
            assert state["exact"], (name, report)  # exactly one version, never a mix
            assert state["unanswered"] == 0, (name, report)
            # Durable: at least the last acknowledged version, at most one in flight.
            assert acknowledged <= state["version"] <= attempted, (name, report)
    assert acknowledged >= 24  # the runs really wrote (each run continues the versions)


if __name__ == "__main__":
    mode, db_path = sys.argv[1], sys.argv[2]
    if mode == "--write":
        run_writer(db_path)
    elif mode == "--check":
        run_checker(db_path)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
