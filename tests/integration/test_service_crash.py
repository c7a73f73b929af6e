"""Crash test: a process running an AssistantService on SQLite is SIGKILLed mid-loop.

The child (this module run with ``--run PATH RUN``) hosts one assistant on a
SQLite file.  It sends the assistant an event every few milliseconds and
prints ``sent <text>`` once that event is durable; the assistant answers each
batch of events with a three-step loop (look, look, say) against an
in-process model that takes a little time per answer, and the tools take a
little time too.  Observers print every loop event (``iteration``,
``tool_call``, ``tool_result``, ``termination``).

The test kills the child with SIGKILL at several points — at once, right
after an event became durable, while a model request is in flight, while a
tool runs, right after a tool result, while the terminal tool runs, between
loops —
always on the same file.  After each kill a checker process (``--check``)
opens the file with a new service and reports that:

* SQLite's integrity check passes;
* the history is valid: every tool call has exactly one answer (a call cut
  off by the kill got a synthetic "interrupted" answer);
* no durable event is lost: each ``sent`` event is in the history or still
  pending;
* the assistant goes on: one more tick runs a full loop and the history is
  still valid.

Kills are triggered by the child's own output, never by a timer.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer, protocol, task

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.integration.test_service_crash"
CONFIG = {
    "name": "ada",
    "character_id": "char:ada",
    "persona": "You are Ada.",
    "tick_rate": 0.05,
    "max_history": 100_000,
}


# -- what the child runs ---------------------------------------------------------


def build(path: str, reactor: Any) -> Any:
    """A service on ``path`` with a slow scripted model and two slow tools."""
    from zope.interface import implementer

    from ai_tools.interfaces import ILLMClient
    from ai_tools.llm.events import ChatResponse
    from ai_tools.service.service import AssistantService
    from ai_tools.store.sqlite import SQLiteStore
    from ai_tools.tools.base import Actor, Tool, ToolCategory
    from ai_tools.tools.registry import ToolRegistry

    class Look(Tool):
        name = "look"
        description = "Look around."
        parameters = {"type": "object", "properties": {}}

        def execute(self, actor: Actor, **params: Any) -> Any:
            return task.deferLater(reactor, 0.01, lambda: {"success": True, "seen": "a room"})

    class Say(Tool):
        name = "say"
        description = "Say something."
        category = ToolCategory.TERMINAL
        parameters = {"type": "object", "properties": {"text": {"type": "string"}},
                      "required": ["text"]}

        def execute(self, actor: Actor, **params: Any) -> Any:
            return task.deferLater(reactor, 0.01, lambda: {"success": True})

    @implementer(ILLMClient)
    class SlowModel:
        """Look twice, then say: three iterations per batch of events."""

        model = "scripted"
        context_window = 1_000_000

        def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                     stream: Any = None, on_event: Any = None) -> Any:
            since_user = 0
            for message in reversed(messages):
                if message.get("role") == "user":
                    break
                if message.get("role") == "tool":
                    since_user += 1
            name, args = ("look", {}) if since_user < 2 else ("say", {"text": "Hello."})
            call = {"id": f"call-{uuid.uuid4().hex[:12]}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            response = ChatResponse.from_message(
                {"role": "assistant", "content": None, "tool_calls": [call]})
            return task.deferLater(reactor, 0.02, lambda: response)

        def close(self) -> Any:
            return defer.succeed(None)

    store = SQLiteStore(path, reactor=reactor, clock=reactor)
    return AssistantService(llm=SlowModel(), store=store, registry=ToolRegistry([Look, Say]),
                            clock=reactor, tick_interval=0.02, min_tick_rate=0.05)


def run_child(path: str, run: str) -> None:
    """Host the assistant until killed, printing durable events and loop events."""

    async def main(reactor: Any) -> None:
        service = build(path, reactor)
        service.add_observer(lambda e: print(e["type"], e.get("tool") or "", flush=True))
        service.startService()
        assistant = await service.add_assistant(CONFIG)
        print(f"ready {len(assistant.history)} {len(assistant.pending_events)}", flush=True)
        for n in range(100_000):
            text = f"run {run} message {n}"
            await service.send("ada", {"type": "say", "from": "bob", "text": text})
            print(f"sent {text}", flush=True)
            await task.deferLater(reactor, 0.015, lambda: None)

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


def run_checker(path: str) -> None:
    """Load the file in a new service, report on it, then tick once more."""
    report: dict[str, Any] = {}
    conn = sqlite3.connect(path)
    report["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
    conn.close()

    async def main(reactor: Any) -> None:
        service = build(path, reactor)
        service.startService()
        assistant = await service.add_assistant({**CONFIG, "enabled": True})
        service.disable("ada")  # look first, tick on demand below
        report["unanswered"] = assistant.history.unanswered_tool_calls()
        report["history"] = [m.get("content") for m in assistant.history.messages
                             if m.get("role") == "user"]
        report["pending"] = [e.get("text") for e in assistant.pending_events]
        report["interrupted"] = sum(
            1 for m in assistant.history.messages
            if m.get("role") == "tool" and "interrupted" in str(m.get("content")))
        await service.enable("ada")
        await service.send("ada", {"type": "say", "from": "checker", "text": "still there?"})
        result = await service.run_tick("ada")
        if result.reason == "already_ticking":  # the timer got there first
            await task.deferLater(reactor, 0.5, lambda: None)
        report["tick"] = assistant.last_tick
        report["unanswered_after"] = assistant.history.unanswered_tool_calls()
        await service.stopService()
        print(json.dumps(report), flush=True)

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


# -- the test -------------------------------------------------------------------------


class Child(protocol.ProcessProtocol):
    """Collects output; SIGKILLs the child on the ``count``-th line starting ``trigger``."""

    def __init__(self, trigger: str | None = None, count: int = 1) -> None:
        self.trigger = trigger
        self.count = count
        self.lines: list[str] = []
        self.stderr = b""
        self._buffer = b""
        self.ended: defer.Deferred[None] = defer.Deferred()
        self.killed = False

    def connectionMade(self) -> None:
        if self.trigger == "":
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
            if self.trigger and line.startswith(self.trigger):
                self.count -= 1
                if self.count <= 0:
                    self.kill()

    def errReceived(self, data: bytes) -> None:
        self.stderr += data

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(None)


def spawn(args: list[str], child: Child) -> Child:
    from twisted.internet import reactor

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    reactor.spawnProcess(  # type: ignore[attr-defined]
        child, sys.executable, [sys.executable, "-m", MODULE, *args], env=env,
        path=str(REPO_ROOT),
    )
    return child


async def wait_for(child: Child, limit: float = 120.0) -> None:
    """Wait for the child to end; one stuck beyond ``limit`` seconds is killed."""
    from twisted.internet import reactor

    guard = reactor.callLater(limit, child.kill)  # type: ignore[attr-defined]
    try:
        await child.ended
    finally:
        if guard.active():
            guard.cancel()


KILL_POINTS = [
    ("", 1),  # at once, wherever start-up is
    ("sent", 1),  # right after the first event became durable
    ("iteration", 2),  # a model request in flight
    ("tool_call look", 1),  # a tool running
    ("tool_result look", 3),  # right after a tool result, before its checkpoint landed
    ("tool_call say", 2),  # the terminal tool running
    ("termination", 3),  # between loops
]


@pytest_twisted.ensureDeferred
async def test_sigkill_mid_loop_at_several_points(tmp_path: Path) -> None:
    path = tmp_path / "assistants.sqlite"
    durable: list[str] = []
    reached = 0
    for run, (trigger, count) in enumerate(KILL_POINTS):
        child = spawn(["--run", str(path), str(run)], Child(trigger, count))
        await wait_for(child)
        assert child.killed, child.stderr.decode()[-3000:]
        durable += [line[len("sent "):] for line in child.lines if line.startswith("sent ")]
        if trigger and any(line.startswith(trigger) for line in child.lines):
            reached += 1
        if not path.exists():
            assert not durable  # killed before anything was written
            continue

        checker = spawn(["--check", str(path)], Child())
        await wait_for(checker)
        assert checker.lines, checker.stderr.decode()[-3000:]
        report = json.loads(checker.lines[-1])
        assert report["integrity"] == "ok"
        assert report["unanswered"] == [], report["unanswered"]
        seen = "\n".join(str(t) for t in report["history"] + report["pending"])
        lost = [text for text in durable if text not in seen]
        assert not lost, lost
        # the assistant goes on: a full loop, history still valid
        assert report["tick"]["status"] == "ran", report["tick"]
        assert report["tick"]["reason"] == "terminal_tool", report["tick"]
        assert report["unanswered_after"] == []
    assert reached >= len(KILL_POINTS) - 2  # the kills really landed where intended
    assert len(durable) >= 3


if __name__ == "__main__":
    if sys.argv[1] == "--run":
        run_child(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--check":
        run_checker(sys.argv[2])
