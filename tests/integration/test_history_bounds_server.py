"""No assistant disabled by its own history: the real client, the scripted server, SQLite
on disk, and restarts.

A model sends a megabyte of tool-call arguments its tool's schema refuses: the
history keeps them clipped, every later tick calls the model, also after the
service restarts on the same file.  A history saved at 130% of an 8,192-token
window comes back after a restart and is compacted (by clipping) at the next
tick, which then calls the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest_twisted

from ai_tools.llm.client import OpenAIChatClient
from ai_tools.retry import RetryPolicy
from ai_tools.service.service import AssistantService
from ai_tools.store.sqlite import SQLiteStore
from ai_tools.testing import Turn, start_test_server
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from tests.integration.test_service_server import Say, reactor, tick_until

WINDOW = 8192


class Note(Tool):
    name = "note"
    description = "Write a short note."
    parameters = {"type": "object",
                  "properties": {"text": {"type": "string", "maxLength": 200}},
                  "required": ["text"]}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True}


class Stack:
    """One scripted server for the whole test; services started and stopped on one file."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = str(tmp_path / "state.sqlite")
        self.server: Any = None
        self.service: AssistantService | None = None

    async def start_server(self, script: list[Any]) -> None:
        self.server = await start_test_server(script, reactor=reactor())

    async def start_service(self) -> Any:
        r = reactor()
        client = OpenAIChatClient(self.server.profile(stream=False, context_window=WINDOW),
                                  reactor=r, retry_policy=RetryPolicy(max_attempts=1))
        self.service = AssistantService(
            llm=client, store=SQLiteStore(self.path, reactor=r, clock=r),
            registry=ToolRegistry([Note, Say]), clock=r, tick_interval=0.05, stop_grace=2)
        self.service.startService()
        await self.service.when_ready()
        return await self.service.add_assistant({"name": "ada", "character_id": "char:ada"})

    async def stop_service(self) -> None:
        if self.service is not None and self.service.running:
            await self.service.stopService()

    async def turn(self, ada: Any, text: str) -> dict[str, Any]:
        """Send ``text``; fires with the tick that answered it."""
        assert self.service is not None
        before = ada.tick_number
        await self.service.send("ada", text)
        await tick_until(self.service, "ada",
                         lambda: ada.tick_number > before and not ada.ticking
                         and not ada.pending_events)
        return dict(ada.last_tick)


@pytest_twisted.ensureDeferred
async def test_a_megabyte_argument_and_restarts(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    await stack.start_server([
        Turn(tool_calls=[{"name": "note", "arguments": {"text": "x" * 1_000_000}}]),
        Turn(text="Sorry, that was too long."),
        Turn(text="Hello again."),
        Turn(text="Still here."),
    ])
    try:
        ada = await stack.start_service()
        first = await stack.turn(ada, "write it all down")
        assert first["reason"] == "completed" and first["iterations"] == 2, first
        second = await stack.turn(ada, "hello?")
        assert second["reason"] == "completed" and second["iterations"] == 1, second
        sent = json.dumps(stack.server.requests[-1].messages)
        assert len(sent) < 40_000 and "[CLIPPED" in sent
        await stack.stop_service()
        ada = await stack.start_service()
        third = await stack.turn(ada, "are you back?")
        assert third["reason"] == "completed" and third["iterations"] == 1, third
        assert len(stack.server.requests) == 4
    finally:
        await stack.stop_service()
        await stack.server.stop()


@pytest_twisted.ensureDeferred
async def test_a_few_huge_messages_saved_before_a_restart(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    await stack.start_server([Turn(text="Here I am.")])
    try:
        ada = await stack.start_service()
        ada.history.replace([
            {"role": "user", "content": "[EVENTS] bob says: tell me a story"},
            {"role": "assistant", "content": "Once upon a time " + "and then " * 4700},
            {"role": "user", "content": "[EVENTS] bob says: go on"},
            {"role": "assistant", "content": "ok"}])
        assert stack.service is not None
        await stack.service.save_state("ada")
        await stack.stop_service()
        ada = await stack.start_service()
        assert len(ada.history) == 4
        tick = await stack.turn(ada, "are you there?")
        assert tick["reason"] == "completed" and tick["iterations"] == 1, tick
        assert ada.counters["compactions"] == 1
        assert len(json.dumps(stack.server.requests[0].messages)) < 4 * WINDOW
    finally:
        await stack.stop_service()
        await stack.server.stop()
