"""The service end to end: the real client against the scripted server, SQLite on disk.

Covers the happy path (an event answered through HTTP, the state on disk), a
model server answering garbage, a kill while the model streams, and a
SQLite store whose writes fail for a while — each time the assistant goes on
ticking, its guard is released, and what is on disk is a whole state.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer, task
from twisted.logger import LogLevel, globalLogPublisher

from ai_tools.llm.client import OpenAIChatClient
from ai_tools.retry import RetryPolicy
from ai_tools.service.service import AssistantService
from ai_tools.store.sqlite import SQLiteStore
from ai_tools.testing import Fault, Turn, start_test_server
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry


class Look(Tool):
    name = "look"
    description = "Look around."
    parameters = {"type": "object", "properties": {}}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True, "seen": "a quiet plaza"}


class Say(Tool):
    name = "say"
    description = "Say something."
    category = ToolCategory.TERMINAL
    parameters = {"type": "object", "properties": {"text": {"type": "string"}},
                  "required": ["text"]}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True, "said": params["text"]}


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class Harness:
    """A scripted server, a client, a SQLite store and a service; torn down by ``close``."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "state.sqlite"
        self.server: Any = None
        self.service: AssistantService | None = None

    async def start(self, script: Any, **profile: Any) -> AssistantService:
        r = reactor()
        self.server = await start_test_server(script, reactor=r)
        profile.setdefault("stream", False)
        client = OpenAIChatClient(self.server.profile(**profile), reactor=r,
                                  retry_policy=RetryPolicy(max_attempts=1))
        self.store = SQLiteStore(str(self.path), reactor=r, clock=r)
        self.service = AssistantService(llm=client, store=self.store,
                                        registry=ToolRegistry([Look, Say]), clock=r,
                                        tick_interval=0.05, stop_grace=2)
        self.service.startService()
        await self.service.when_ready()
        return self.service

    async def close(self) -> None:
        if self.service is not None and self.service.running:
            await self.service.stopService()
        if self.server is not None:
            await self.server.stop()

    def on_disk(self, name: str) -> dict[str, Any]:
        """The saved state read straight from the file by another connection."""
        conn = sqlite3.connect(str(self.path))
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
            table = next(t for t in tables if "assistant" in t and "fts" not in t)
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            state_col = next(c for c in columns if c in ("state", "data", "state_json"))
            row = conn.execute(f"SELECT {state_col} FROM {table} WHERE name = ?",
                               (name,)).fetchone()
            return json.loads(row[0])
        finally:
            conn.close()


async def tick_until(service: AssistantService, name: str, done: Any, limit: int = 1500) -> None:
    """Let the reactor run until ``done()`` (a bound of ``limit`` x 20 ms, not a timing)."""
    for _ in range(limit):
        if done():
            return
        await task.deferLater(reactor(), 0.02, lambda: None)
    raise AssertionError(f"{name}: condition not reached; status {service.status(name)}")


class TickLog:
    """Collects the warn/error events of the tick module."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        if (str(event.get("log_namespace", "")).startswith("ai_tools.service.tick")
                and event.get("log_level") in (LogLevel.warn, LogLevel.error)):
            self.events.append(event)

    def __enter__(self) -> TickLog:
        globalLogPublisher.addObserver(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        globalLogPublisher.removeObserver(self)


@pytest_twisted.ensureDeferred
async def test_an_event_is_answered_over_http_and_saved(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        service = await h.start([
            Turn(tool_calls=[{"name": "look", "arguments": {}}]),
            Turn(tool_calls=[{"name": "say", "arguments": {"text": "Hello Bob"}}]),
        ])
        ada = await service.add_assistant({"name": "ada", "character_id": "char:ada",
                                           "persona": "You are Ada."})
        events: list[dict[str, Any]] = []
        service.add_observer(events.append)
        await service.send("ada", {"type": "say", "from": "bob", "text": "hi Ada"})
        await tick_until(service, "ada", lambda: ada.last_tick is not None)
        assert ada.last_tick["reason"] == "terminal_tool"
        durations = [e["duration_ms"] for e in events if e["type"] == "tool_result"]
        assert len(durations) == 2
        assert h.server.requests[0].messages[0]["content"].startswith("You are Ada.")
        assert "hi Ada" in json.dumps(h.server.requests[0].messages)
        await service.writer.flush()
        saved = h.on_disk("ada")
        assert [m["role"] for m in saved["history"]] == [
            "user", "assistant", "tool", "assistant", "tool"]
    finally:
        await h.close()
    assert h.server.open_connections == 0


@pytest_twisted.ensureDeferred
async def test_a_model_server_answering_garbage(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        service = await h.start([
            Fault.malformed_json(),
            Fault.html_error(),
            Turn(text="[[[ not what anyone expected"),
            Turn(tool_calls=[{"name": "say", "arguments": "{broken json"}]),
            Turn(tool_calls=[{"name": "say", "arguments": {"text": "Sorry, I am back."}}]),
        ])
        ada = await service.add_assistant({"name": "ada", "character_id": "char:ada"})
        reasons = []
        with TickLog() as log:
            for i in range(5):
                before = ada.tick_number
                await service.send("ada", f"message {i}")
                await tick_until(service, "ada",
                                 lambda b=before: ada.tick_number > b and not ada.ticking)
                reasons.append(ada.last_tick["reason"])
        assert reasons[:2] == ["llm_error", "llm_error"]
        assert reasons[3] == "parse_error"
        assert reasons[4] == "terminal_tool"  # and it goes on once the server behaves
        failing = [r for r in reasons if r in ("llm_error", "parse_error")]
        assert len(log.events) == len(failing)  # one log line per failing tick
        assert all(e["assistant"] == "ada" for e in log.events)
        assert ada.history.unanswered_tool_calls() == []
        await service.writer.flush()
        assert h.on_disk("ada")["pending_events"] == []
    finally:
        await h.close()


@pytest_twisted.ensureDeferred
async def test_kill_while_the_model_streams(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        service = await h.start([Turn(text="I was about to say something long",
                                      fault=Fault.stall(after_chunks=1))], stream=True)
        ada = await service.add_assistant({"name": "ada", "character_id": "char:ada"})
        await service.send("ada", "talk to me")
        await h.server.wait_for_requests(1)
        await tick_until(service, "ada", lambda: ada.control is not None)
        assert service.stop_assistant("ada", "enough") is True
        await tick_until(service, "ada", lambda: not ada.ticking)
        assert ada.last_tick["reason"] == "stopped_by_user"
        finished = await h.server.requests[0].finished
        assert finished is False  # the server saw the connection dropped
        assert ada.history.unanswered_tool_calls() == []
    finally:
        await h.close()


@pytest_twisted.ensureDeferred
async def test_sqlite_writes_failing_for_a_while(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    try:
        script = [Turn(tool_calls=[{"name": "look", "arguments": {}}]),
                  Turn(tool_calls=[{"name": "say", "arguments": {"text": "one"}}])] * 3
        service = await h.start(script)
        ada = await service.add_assistant({"name": "ada", "character_id": "char:ada"})
        await service.send("ada", "first")
        await tick_until(service, "ada", lambda: ada.tick_number >= 1 and not ada.ticking)
        await service.writer.flush()
        good = h.on_disk("ada")

        def read_only(cursor: Any, on: bool) -> None:
            cursor.execute(f"PRAGMA query_only = {'ON' if on else 'OFF'}")

        await h.store.run_in_transaction(read_only, True)
        requests = len(h.server.requests)
        with TickLog() as log:
            sent = service.send("ada", "second")
            sent.addErrback(lambda f: None)  # not durable: the write was refused
            before = ada.tick_number
            await tick_until(service, "ada", lambda: ada.tick_number > before
                             and not ada.ticking)
        assert ada.last_tick["reason"] == "stopped_by_user"
        assert any("state could not be saved" in e for e in ada.last_tick["errors"])
        assert len(h.server.requests) == requests + 1  # no model call after the failed write
        assert len(log.events) == 1
        assert h.on_disk("ada") == good  # nothing half-written
        # (a read-only connection cannot BEGIN IMMEDIATE: switch back outside a transaction)
        await h.store._query(read_only, False)
        await service.send("ada", "third")
        await tick_until(service, "ada", lambda: ada.last_tick["reason"] == "terminal_tool")
        await service.writer.flush()
        saved = json.dumps(h.on_disk("ada")["history"])
        assert "second" in saved and "third" in saved
    finally:
        await h.close()


@pytest_twisted.ensureDeferred
async def test_stop_service_closes_pool_and_store(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    service = await h.start([Turn(text="hi", latency=5.0)])
    await service.add_assistant({"name": "ada", "character_id": "char:ada"})
    await service.send("ada", "hello")
    await h.server.wait_for_requests(1)
    started = reactor().seconds()
    await service.stopService()
    assert reactor().seconds() - started < 4.9  # grace 2 s, then cancelled
    assert not h.store.is_open
    await h.server.stop()
    h.server = None
    await defer.succeed(None)


@pytest_twisted.ensureDeferred
async def test_send_then_run_tick_gives_the_tick_that_took_the_event(tmp_path: Path) -> None:
    """The documented library pattern, three times: ``await send()`` (durable only after a
    real SQLite write, by which time the timer has started the tick) then ``run_tick()``
    fires with the tick that answered, never ``skipped``/``already_ticking``."""
    h = Harness(tmp_path)
    try:
        service = await h.start([
            Turn(tool_calls=[{"name": "say", "arguments": {"text": f"Answer {i}"}}])
            for i in range(3)])
        await service.add_assistant({"name": "ada", "character_id": "char:ada",
                                     "persona": "You are Ada."})
        for i in range(3):
            await service.send("ada", {"type": "say", "from": "bob", "text": f"question {i}"})
            result = await service.run_tick("ada")
            assert (result.status, result.reason) == ("ran", "terminal_tool"), result
            assert result.loop is not None and result.loop.results[0]["tool"] == "say"
        assert len(h.server.requests) == 3
    finally:
        await h.close()
