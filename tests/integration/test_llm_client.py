"""OpenAIChatClient against the scripted server over real sockets on 127.0.0.1."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, task

from ai_tools.errors import (
    LLMConnectionError,
    LLMProtocolError,
    LLMRequestError,
    LLMServerError,
    LLMTimeout,
    LLMUnavailable,
)
from ai_tools.llm.breaker import BreakerState
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.events import AssistantMessageFinal, StreamDone, TextDelta, UsageUpdate
from ai_tools.llm.parsing import parse_tool_calls
from ai_tools.llm.profile import Timeouts
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, Script, TestServer, Turn, start_test_server

USER = [{"role": "user", "content": "Describe the plaza."}]
FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05)


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class Running:
    """A scripted server and a client for it, both torn down by ``stop``."""

    def __init__(self, server: TestServer, client: OpenAIChatClient) -> None:
        self.server = server
        self.client = client

    async def stop(self) -> None:
        await self.client.close()
        await self.server.stop()


async def running(script: Any, *, server_kw: dict | None = None, **profile: Any) -> Running:
    server = await start_test_server(script, reactor=reactor(), **(server_kw or {}))
    environ = profile.pop("environ", {})
    retry_policy = profile.pop("retry_policy", FAST_RETRY)
    client = OpenAIChatClient(
        server.profile(**profile), reactor=reactor(), retry_policy=retry_policy, environ=environ
    )
    return Running(server, client)


@pytest_twisted.ensureDeferred
async def test_non_streaming_answer() -> None:
    """A whole JSON answer, with usage, model name and the events."""
    r = await running([Turn(text="The plaza is quiet.")], stream=False)
    try:
        events: list = []
        response = await r.client.complete(USER, on_event=events.append)
        assert response.content == "The plaza is quiet."
        assert response.model == "scripted-model" and response.usage
        assert [type(e) for e in events] == [
            TextDelta,
            UsageUpdate,
            AssistantMessageFinal,
            StreamDone,
        ]
        assert r.server.requests[0].body["stream"] is False
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_streaming_answer_with_multibyte_text() -> None:
    """A streamed answer arrives as many TextDeltas that add up to the text."""
    text = "Fountains splash — café lights glow 🌙.\nA bard sings."
    r = await running([Turn(text=text, chunk_chars=3, chunk_latency=0.001)])
    try:
        deltas: list[str] = []
        response = await r.client.complete(
            USER, on_event=lambda e: deltas.append(e.text) if isinstance(e, TextDelta) else None
        )
        assert response.content == text and "".join(deltas) == text and len(deltas) > 5
        assert response.usage and response.finish_reason == "stop"
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_parallel_tool_calls_assembled_from_deltas() -> None:
    """Several streamed calls come back whole, in order, and parse as normal calls."""
    calls = [
        ("look", {"detail": "full"}),
        ("say", {"text": "Bonjour à tous"}),
        ("report_mood", {"mood": "curious"}),
    ]
    r = await running([Turn(text="Let me see.", tool_calls=calls, chunk_chars=4)])
    try:
        response = await r.client.complete(
            USER, tools=[{"type": "function", "function": {"name": "look"}}]
        )
        assert [(c.name, dict(c.arguments)) for c in response.tool_calls] == calls
        parsed = parse_tool_calls(response, ["look", "say"], ["report_mood"])
        assert [c.name for c in parsed.normal] == ["look", "say"]
        assert [c.name for c in parsed.exit] == ["report_mood"]
        assert r.server.requests[0].tools[0]["function"]["name"] == "look"
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_429_with_retry_after_retried_to_success() -> None:
    """Rate limited (seconds, then an HTTP date), then an answer."""
    date = email.utils.formatdate(time.time() + 1, usegmt=True)
    r = await running(
        [Fault.rate_limited(retry_after=1), Fault.rate_limited(retry_after=date), Turn(text="ok")],
        retry_after_cap=0.05,
    )
    try:
        assert (await r.client.complete(USER)).content == "ok"
        assert len(r.server.requests) == 3
    finally:
        await r.stop()


@pytest.mark.parametrize(
    "fault",
    [
        Fault.server_error(500),
        Fault.server_error(503),
        Fault.html_error(502),
        Fault.reset(),
        Fault.truncated_stream(after_chunks=1),
        Fault.stream_error("overloaded", after_chunks=1),
    ],
    ids=["500", "503", "html-502", "reset", "truncated-before-text", "stream-error"],
)
@pytest_twisted.ensureDeferred
async def test_transient_faults_retried_to_success(fault: Fault) -> None:
    """Each transient fault, once, then the answer: the client gets the answer."""
    r = await running([fault, Turn(text="recovered")])
    try:
        assert (await r.client.complete(USER)).content == "recovered"
        assert len(r.server.requests) == 2
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_persistent_5xx_ends_in_a_clear_error() -> None:
    """Retries run out: LLMServerError naming the status and the URL."""
    r = await running([Fault.html_error(502)] * 4)
    try:
        with pytest.raises(LLMServerError) as info:
            await r.client.complete(USER)
        assert str(info.value).startswith(f"502 from {r.server.url}/chat/completions")
        assert "non-JSON body" in str(info.value)
        assert len(r.server.requests) == 4
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_malformed_json_is_a_clear_error() -> None:
    """Broken JSON in a 200: LLMProtocolError, not retried."""
    r = await running([Fault.malformed_json(), Turn(text="never")], stream=False)
    try:
        with pytest.raises(LLMProtocolError, match="not JSON"):
            await r.client.complete(USER)
        assert len(r.server.requests) == 1
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_truncated_after_text_keeps_the_partial_output() -> None:
    """The stream is cut after some text: a connection error carrying that text."""
    r = await running(
        [Turn(text="Half a sentence", chunk_chars=5, fault=Fault.truncated_stream(3))]
    )
    try:
        with pytest.raises(LLMConnectionError, match=r"mid-stream|truncated") as info:
            await r.client.complete(USER)
        assert info.value.partial_text == "Half a sen"
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_stall_hits_the_idle_timeout_and_drops_the_connection() -> None:
    """A silent stream is aborted after the idle timeout; the server sees the drop."""
    r = await running(
        [Turn(text="Hello world", chunk_chars=3, fault=Fault.stall(after_chunks=2))],
        timeouts=Timeouts(idle=0.2),
        stream=True,
        retry_policy=RetryPolicy(max_attempts=1),
    )
    try:
        with pytest.raises(LLMTimeout, match="stalled") as info:
            await r.client.complete(USER)
        assert info.value.partial_text == "Hel"
        assert await r.server.requests[0].finished is False
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_slow_headers_time_out() -> None:
    """No headers within timeouts.headers: retried, then LLMTimeout."""
    r = await running([Turn(text="late", latency=5)] * 2, timeouts=Timeouts(headers=0.1),
                      retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01))
    try:
        with pytest.raises(LLMTimeout, match="no response"):
            await r.client.complete(USER)
        assert all([await req.finished is False for req in r.server.requests])
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_api_key_sent_and_401_is_clear() -> None:
    """The key comes from the named variable; a wrong one gives an actionable 401."""
    r = await running(
        ["welcome", "never"],
        server_kw={"api_key": "sk-right"},
        api_key_env="MY_KEY",
        environ={"MY_KEY": "sk-right"},
    )
    wrong = OpenAIChatClient(
        r.server.profile(api_key_env="MY_KEY"), reactor=reactor(), environ={"MY_KEY": "sk-wrong"}
    )
    try:
        assert (await r.client.complete(USER)).content == "welcome"
        with pytest.raises(LLMRequestError, match=r"^401 from .*check the API key in \$MY_KEY"):
            await wrong.complete(USER)
        assert len(r.server.requests) == 2
    finally:
        await wrong.close()
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_cancel_mid_stream_closes_the_connection() -> None:
    """Cancelling after the first text delta aborts the request; the server sees the drop."""
    r = await running([Turn(text="word " * 200, chunk_chars=5, chunk_latency=0.01)])
    try:
        holder: dict[str, defer.Deferred] = {}

        def on_event(event: Any) -> None:
            if isinstance(event, TextDelta) and not holder["d"].called:
                holder["d"].cancel()

        holder["d"] = r.client.complete(USER, on_event=on_event)
        with pytest.raises(defer.CancelledError):
            await holder["d"]
        assert await r.server.requests[0].finished is False
        assert r.server.requests[0].disconnected
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_close_closes_the_pool() -> None:
    """After close() every connection of the client's pool is gone (no dirty reactor)."""
    r = await running(["a", "b", "c"])
    try:
        await defer.gatherResults([r.client.complete(USER) for _ in range(3)])
        assert r.server.open_connections > 0  # kept alive in the pool
        await r.client.close()
        await r.server.wait_for_no_connections()
        assert r.server.open_connections == 0
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_close_aborts_a_stalled_request() -> None:
    """close() while a stream is stalled cancels it and drops the connection."""
    r = await running([Fault.stall(after_chunks=1)])
    try:
        d = r.client.complete(USER)
        request = await r.server.wait_for_requests(1)
        await r.client.close()
        with pytest.raises(defer.CancelledError):
            await d
        assert await request.finished is False
        await r.server.wait_for_no_connections()
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_circuit_opens_and_recovers() -> None:
    """Repeated failures open the circuit (fail fast, no request); after the cooldown it closes."""
    r = await running(
        [Fault.server_error(500)] * 2 + [Turn(text="back again")],
        breaker_threshold=2,
        breaker_cooldown=0.2,
        retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.01),
    )
    try:
        with pytest.raises(LLMServerError):
            await r.client.complete(USER)
        assert r.client.breaker is not None and r.client.breaker.state is BreakerState.OPEN
        with pytest.raises(LLMUnavailable):
            await r.client.complete(USER)
        assert len(r.server.requests) == 2
        await task.deferLater(reactor(), 0.25, lambda: None)
        assert (await r.client.complete(USER)).content == "back again"
        assert r.client.breaker.state is BreakerState.CLOSED
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_many_concurrent_requests_under_a_cap() -> None:
    """More requests than slots: all answered, none lost, never more than the cap at once.

    Each answer takes a quarter of a second, so the three requests sent at once are all
    still in flight when the last of them arrives, however loaded the machine is (with a
    short latency the first could be answered before the third was read)."""
    r = await running(Script(default=Turn(text="ok", latency=0.25)), max_concurrency=3)
    try:
        results = await defer.gatherResults([r.client.complete(USER) for _ in range(12)])
        assert len(results) == 12
        assert len(r.server.requests) == 12
        assert r.server.resource.max_in_flight == 3
    finally:
        await r.stop()
