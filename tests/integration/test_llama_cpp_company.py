"""Assistants in company on one real single-slot server: llama-cpp-python's.

The interoperability test of ``test_llama_cpp_server.py`` sends one request at
a time.  Here several go at once, as a service's assistants send them, to the
server with its defaults (``interrupt_requests`` on: a running stream is ended
with ``[DONE]`` and a closed connection when a second request waits).  The
client learns that this server serves one request at a time (it knows it by
its ``/v1/models``), keeps the others in its own queue, in turns between
assistants, and sends each request once: the server's access log counts them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from ai_tools.errors import LLMInterrupted
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.profile import ModelProfile, Timeouts
from ai_tools.llm.server import ModelServers
from ai_tools.retry import RetryPolicy
from tests.integration.llama_server import (
    MODEL_ALIAS,
    LlamaServer,
    reactor,
    require_prepared,
    start_servers,
)
from tests.integration.test_llama_cpp_server import END_OF_TURN, FORCE_LOOK, LOOK, chats

ANSWER_BOUND = 120.0
"""Seconds every answer of a test here must come within: SmolLM2-135M on one thread
reads ~100 prompt tokens a second and writes ~50 (measured on the 2-core test machine,
idle); the longest prompt here, 40 tools, is ~1,500 tokens, the three requests in turn
then take ~30 s; four times that for a busy machine."""

MANY_TOOLS = [{"type": "function", "function": {
    "name": f"act_{i}", "description": f"Do the {i}th thing.",
    "parameters": {"type": "object", "properties": {}}}} for i in range(39)] + [LOOK]
"""The 40-tool prompt of an assistant with the default tools (short ones)."""


@pytest.fixture(scope="module")
def prepared() -> tuple[Path, Path]:
    return require_prepared()


@pytest_twisted.async_yield_fixture(scope="module")
async def server(prepared: tuple[Path, Path]) -> AsyncIterator[LlamaServer]:
    started, stop = await start_servers(prepared, {
        "company": (4096, ["--chat_format", "chatml-function-calling"])})
    yield started["company"]
    await stop()


def profile(server: LlamaServer, **overrides: Any) -> ModelProfile:
    values: dict[str, Any] = {
        "base_url": server.url, "model": MODEL_ALIAS,
        "extra_body": {"temperature": 0, "logit_bias": END_OF_TURN}, "max_tokens": 24,
        "timeouts": Timeouts(headers=ANSWER_BOUND, total=ANSWER_BOUND),
        "breaker_threshold": 1000}
    values.update(overrides)
    return ModelProfile.from_mapping(values)


@pytest_twisted.async_yield_fixture
async def clients() -> AsyncIterator[Any]:
    made: list[OpenAIChatClient] = []
    servers = ModelServers(reactor())

    def make(server: LlamaServer, **overrides: Any) -> OpenAIChatClient:
        chosen = profile(server, **overrides)
        client = OpenAIChatClient(chosen, reactor=reactor(),
                                  server=servers.for_profile(chosen),
                                  retry_policy=RetryPolicy(max_attempts=3, base_delay=0.2))
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest_twisted.ensureDeferred
async def test_streams_in_company_are_not_interrupted(server: LlamaServer,
                                                      clients: Any) -> None:
    """Three assistants stream at once: the client sends one at a time (the server
    would interrupt the first for the second), each once; all three are answered."""
    client = clients(server)
    await client.learn_context_window()
    assert client.server.kind == "llama-cpp-python" and client.server.slots.capacity == 1
    assert client.status_at_end_default  # its chat formats take the status at the end
    before = len(server.requests())
    calls = [client.for_assistant(name).complete(ask(f"Greet {name}."), stream=True)
             for name in ("ada", "bob", "cy")]
    answers = await defer.gatherResults(calls, consumeErrors=True)
    assert all(a.content and a.attempts == 1 for a in answers)
    assert answers[0].queued == 0 and answers[1].queued > 0 and answers[2].queued > 0
    assert chats(server, before) == [("POST", "/v1/chat/completions", 200)] * 3


@pytest_twisted.ensureDeferred
async def test_an_interruption_by_the_server_is_recognised(server: LlamaServer,
                                                           clients: Any) -> None:
    """Told the server has two slots (``server_slots = 2``, as every client sent before),
    two streams go at once and the server interrupts one (``[DONE]``, then the
    connection closed): the client says so (not "lost mid-stream"), sends one at a
    time from then on, and resends nothing the model had begun to answer."""
    client = clients(server, server_slots=2, max_tokens=48)
    await client.learn_context_window()
    client.server.configured_slots = None  # as if learned: what it learns may change it
    before = len(server.requests())
    calls = [client.complete(ask(f"Tell story {i}."), stream=True) for i in (1, 2)]
    results = await defer.DeferredList(calls, consumeErrors=True)
    errors = [r.value for ok, r in results if not ok]
    for error in errors:
        assert isinstance(error, LLMInterrupted), repr(error)
    interrupted = errors or [r for ok, r in results if ok and r.attempts > 1]
    if not interrupted:
        pytest.skip("the server finished the first stream before the second arrived")
    assert client.server.slots.capacity == 1
    posts = chats(server, before)
    assert len(posts) <= 3 and all(p == ("POST", "/v1/chat/completions", 200) for p in posts)


@pytest_twisted.ensureDeferred
async def test_three_assistants_native_and_fallback_on_one_server(server: LlamaServer,
                                                                   clients: Any) -> None:
    """One with the 40-tool prompt (native, whole: this server refuses such a stream),
    one streaming text, one in fallback mode (another profile, the same server): each
    gets its answer within the bound, each request is sent once, in turns."""
    native = clients(server)
    fallback = clients(server, tool_calling="fallback")
    assert native.server is fallback.server
    await native.learn_context_window()
    await fallback.learn_context_window()
    before = len(server.requests())
    started = reactor().seconds()
    calls = [
        native.for_assistant("smith").complete(ask("Look around."), tools=MANY_TOOLS,
                                               tool_choice=FORCE_LOOK, stream=True),
        native.for_assistant("bard").complete(ask("Sing a line."), stream=True),
        fallback.for_assistant("sage").complete(ask("Say a proverb."), tools=[LOOK],
                                                stream=True),
    ]
    answers = await defer.gatherResults(calls, consumeErrors=True)
    elapsed = reactor().seconds() - started
    assert [c.name for c in answers[0].tool_calls] == ["look"]
    assert answers[1].content and answers[2].content
    assert all(a.attempts == 1 for a in answers) and elapsed < ANSWER_BOUND
    assert chats(server, before) == [("POST", "/v1/chat/completions", 200)] * 3
    assert native.status()["waiting"] == 0 and native.status()["in_flight"] == 0
