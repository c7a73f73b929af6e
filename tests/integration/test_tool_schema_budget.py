"""The default tools fit a small model: prompt + tool schemas ≤ 40% of an 8,192 window.

A local model served under a name nobody knows gets the default window of
8,192 tokens.  Whatever a request carries besides the conversation — the system
prompt and the ``tools=`` schemas — is paid again on every model call, so it
has a budget: at most 40% of that window, counted by the estimate that runs
where tiktoken's encoding files are not available (about four characters per
token).  These tests take the requests a real client sends to the scripted
server over 127.0.0.1 — the default assistant of a service with the default
tools, and a loop in each mode — and count them, so a description that grows
fails here rather than filling a small model's context.

Measure it by hand: ``python -m tests.integration.test_tool_schema_budget``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import task

from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.tokens import DEFAULT_CONTEXT_WINDOW, TokenCounter
from ai_tools.loop import GatePolicy, LoopConfig, LoopContext, execute_react_loop
from ai_tools.retry import RetryPolicy
from ai_tools.service.service import AssistantService
from ai_tools.service.tick import QUIET_CATEGORIES
from ai_tools.store.memory import MemoryStore
from ai_tools.testing import RecordedRequest, TestServer, Turn, start_test_server
from ai_tools.tools import ToolRegistry, register_default_tools
from ai_tools.tools.base import Actor

BUDGET_PERCENT = 40
"""The most of the window the prompt and the tool schemas may take."""

WINDOW = DEFAULT_CONTEXT_WINDOW
UNKNOWN_MODEL = "local"
"""A model name no table knows: the client falls back to the 8,192-token window."""


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


def _no_tiktoken(name: str) -> Any:
    raise ImportError("counting by the estimate")


ESTIMATE = TokenCounter(loader=_no_tiktoken)
"""The characters-per-token estimate, whether or not tiktoken could load here."""


def offer_cost(body: Mapping[str, Any]) -> tuple[int, int]:
    """(characters, estimated tokens) of a request's system prompt and tool schemas."""
    system = [m for m in body["messages"] if m["role"] == "system"]
    tools: Sequence[Mapping[str, Any]] = body.get("tools") or []
    chars = sum(len(m["content"]) for m in system)
    if tools:
        chars += len(json.dumps(list(tools), ensure_ascii=False))
    return chars, ESTIMATE.count_messages(system, tools)


def _first_request(server: TestServer, outcome: str) -> RecordedRequest:
    """The first request the server saw; none means the model was never called."""
    if not server.requests:
        raise AssertionError(f"the model was never called (prompt and tools too big?): "
                             f"{outcome}"[:2000])
    return server.requests[0]


async def _server() -> tuple[TestServer, OpenAIChatClient]:
    server = await start_test_server([Turn(text="All quiet.")] * 4, reactor=reactor())
    client = OpenAIChatClient(server.profile(model=UNKNOWN_MODEL, stream=False),
                              reactor=reactor(), retry_policy=RetryPolicy(max_attempts=1))
    return server, client


async def measure_default_assistant() -> tuple[int, int, int]:
    """The first request of a service's default assistant: (tools offered, chars, tokens)."""
    server, client = await _server()
    service = AssistantService(llm=client, store=MemoryStore(),
                               registry=register_default_tools(ToolRegistry()),
                               clock=reactor(), tick_interval=0.05, stop_grace=2)
    service.startService()
    try:
        await service.when_ready()
        assert client.context_window == WINDOW
        ada = await service.add_assistant({"name": "ada", "character_id": "char:ada"})
        await service.send("ada", "Hello, Ada")
        for _ in range(500):  # a bound of 500 x 20 ms on the first tick, not a timing
            if ada.last_tick and not ada.ticking:
                break
            await task.deferLater(reactor(), 0.02, lambda: None)
    finally:
        await service.stopService()
        await client.close()
        await server.stop()
    request = _first_request(server, f"tick {ada.last_tick}")
    return (len(request.tools), *offer_cost(request.body))


MODES: dict[str, dict[str, Any]] = {
    "awake": {},
    "awake, fallback tool calling": {"native": False},
    "sleep": {"mode": "sleep", "gate": GatePolicy(allowed_categories=QUIET_CATEGORIES)},
    "reflection": {"reflection": True,
                   "gate": GatePolicy(allowed_categories=QUIET_CATEGORIES)},
    "awake, 11 allowed tools": {"gate": GatePolicy(allowed_names=frozenset({
        "inspect_location", "search_object", "get_attributes", "recall_memories",
        "store_memory", "say", "pose", "whisper", "wait", "noop", "go_to_sleep"}))},
}
"""Each prompt variant with the tools the service offers in it (sleep and reflection:
the quiet categories only; the last: a context's ``allowed_tools``, those of the
example configuration's conversation context)."""


async def measure_loop(mode: str = "awake", reflection: bool = False,
                       gate: GatePolicy | None = None, native: bool = True) -> tuple[int, int]:
    """The first request of a loop over the default tools: (chars, tokens)."""
    server, client = await _server()
    try:
        ctx = LoopContext(
            assistant_name="ada", actor=Actor("char:ada"),
            registry=register_default_tools(ToolRegistry()), llm=client,
            history=ConversationHistory(), clock=reactor(), mode=mode, reflection=reflection,
            gate=gate or GatePolicy(), pending_events=[{"type": "say", "text": "Hello"}])
        result = await execute_react_loop(ctx, LoopConfig(native_tools=native,
                                                          max_iterations=1))
    finally:
        await client.close()
        await server.stop()
    return offer_cost(_first_request(server, f"loop {result.as_dict()}").body)


@pytest_twisted.ensureDeferred
async def test_the_default_assistant_fits_a_small_window() -> None:
    """The default assistant with all the default tools: ≤ 40% of 8,192 tokens."""
    offered, chars, tokens = await measure_default_assistant()
    assert offered == len(register_default_tools(ToolRegistry()))  # every tool, no gate
    assert 100 * tokens / WINDOW <= BUDGET_PERCENT, (chars, tokens)


@pytest.mark.parametrize("variant", list(MODES))
@pytest_twisted.ensureDeferred
async def test_every_mode_fits_a_small_window(variant: str) -> None:
    """Awake (native and fallback), sleep and reflection: each ≤ 40% of 8,192 tokens."""
    chars, tokens = await measure_loop(**MODES[variant])
    assert 100 * tokens / WINDOW <= BUDGET_PERCENT, (variant, chars, tokens)


def main() -> None:  # pragma: no cover - the documented measuring command
    """Print the figures of each variant, the way docs/writing-tools.md shows them."""
    from twisted.internet import defer

    async def measure_all() -> None:
        offered, chars, tokens = await measure_default_assistant()
        rows = [(f"default assistant ({offered} tools)", chars, tokens)]
        for variant, kwargs in MODES.items():
            rows.append((variant, *await measure_loop(**kwargs)))
        for name, chars, tokens in rows:
            print(f"{name:32} {chars:6,} chars  ~{tokens:5,} tokens  "
                  f"{100 * tokens / WINDOW:5.1f}% of {WINDOW:,}")

    task.react(lambda _reactor: defer.ensureDeferred(measure_all()))


if __name__ == "__main__":  # pragma: no cover
    main()
