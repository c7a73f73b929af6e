"""OpenAIChatClient driven in memory: its treq transport over treq.testing's
RequestTraversalAgent and the scripted model, time on a task.Clock."""

from __future__ import annotations

import json
from typing import Any

import pytest
from treq.testing import RequestTraversalAgent
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import formatEvent, globalLogPublisher
from zope.interface.verify import verifyObject

from ai_tools.errors import (
    LLMConnectionError,
    LLMError,
    LLMProtocolError,
    LLMRequestError,
    LLMServerError,
    LLMTimeout,
    LLMUnavailable,
    RepeatedLineLoop,
)
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.breaker import BreakerState
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.events import AssistantMessageFinal, StreamDone, TextDelta, UsageUpdate
from ai_tools.llm.profile import ModelProfile, Timeouts
from ai_tools.llm.repetition import RepetitionConfig
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, ScriptedModel, ScriptedModelResource, Turn

USER = [{"role": "user", "content": "hello"}]
TOOLS = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]


class Harness:
    """A client talking to a scripted resource in memory, time on a Clock.

    Only the innermost agent differs from production: the client's treq
    transport runs over ``RequestTraversalAgent`` instead of a pooled ``Agent``.
    """

    def __init__(self, script: Any, resource: Any = None, **profile: Any) -> None:
        self.clock = Clock()
        self.resource = resource or ScriptedModelResource(ScriptedModel.build(script), self.clock)
        self.stub = RequestTraversalAgent(self.resource)
        values: dict[str, Any] = {"base_url": "http://model.test/v1", "model": "m"}
        values.update(profile)
        self.environ = {"TEST_KEY": "sk-secret-value"}
        self.client = OpenAIChatClient(
            ModelProfile(**values),
            reactor=self.clock,
            agent=self.stub,
            retry_policy=RetryPolicy(max_attempts=3, base_delay=1.0, jitter=False),
            environ=self.environ,
        )

    @property
    def requests(self) -> list:
        return self.resource.requests

    def pump(self, seconds: float = 0.0, step: float = 0.01) -> None:
        """Move bytes, then time, in small steps."""
        self.stub.flush()
        elapsed = 0.0
        while elapsed < seconds:
            self.clock.advance(step)
            self.stub.flush()
            elapsed += step

    def run(self, d: defer.Deferred, limit: float = 120.0, step: float = 0.05) -> Any:
        """Pump until ``d`` fires; return its result or raise its failure."""
        results: list = []
        d.addBoth(results.append)
        elapsed = 0.0
        self.stub.flush()
        while not results and elapsed < limit:
            self.clock.advance(step)
            self.stub.flush()
            elapsed += step
        assert results, f"no result within {limit}s of clock time"
        result = results[0]
        if hasattr(result, "raiseException"):
            result.raiseException()
        return result


@pytest.fixture
def logged() -> Any:
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def test_provides_the_interface() -> None:
    """OpenAIChatClient is an ILLMClient with model and context window."""
    h = Harness([], context_window=4096)
    assert verifyObject(ILLMClient, h.client)
    assert (h.client.model, h.client.context_window) == ("m", 4096)


def test_non_streaming_answer_and_events() -> None:
    """A plain answer: ChatResponse plus TextDelta, UsageUpdate, final message, StreamDone."""
    h = Harness([Turn(text="Hi there.")], stream=False)
    events: list = []
    response = h.run(h.client.complete(USER, on_event=events.append))
    assert response.content == "Hi there." and response.finish_reason == "stop"
    assert response.model == "scripted-model"
    assert [type(e) for e in events] == [TextDelta, UsageUpdate, AssistantMessageFinal, StreamDone]
    assert h.requests[0].body["stream"] is False


def test_request_body_tools_choice_extra_and_auth(logged: list) -> None:
    """tools, tool_choice (a name), extra body, the key from its variable; key never logged."""
    h = Harness(
        [Turn(text="ok")],
        api_key_env="TEST_KEY",
        extra_body={"temperature": 0.1},
        headers={"X-Conversation": "c1"},
    )
    h.run(h.client.complete(USER, tools=TOOLS, tool_choice="look", extra_body={"seed": 7}))
    request = h.requests[0]
    body = request.body
    assert body["model"] == "m" and body["messages"] == USER
    assert body["tools"] == TOOLS
    assert body["tool_choice"] == {"type": "function", "function": {"name": "look"}}
    assert (body["temperature"], body["seed"], body["stream"]) == (0.1, 7, True)
    assert body["stream_options"] == {"include_usage": True}
    assert request.headers["authorization"] == "Bearer sk-secret-value"
    assert request.conversation == "c1"
    assert logged and "sk-secret-value" not in repr(logged)


def test_tool_objects_with_schema_are_accepted() -> None:
    """Tool objects (with schema()) are sent as their schema."""

    class ToolLike:
        def schema(self) -> dict:
            return TOOLS[0]

    h = Harness([Turn(text="ok")])
    h.run(h.client.complete(USER, tools=[ToolLike()], tool_choice="auto"))
    assert h.requests[0].body["tools"] == TOOLS and h.requests[0].body["tool_choice"] == "auto"


def test_fallback_profile_does_not_send_tools() -> None:
    """tool_calling='fallback': tools stay out of the request (they live in the prompt)."""
    h = Harness([Turn(text="ok")], tool_calling="fallback")
    h.run(h.client.complete(USER, tools=TOOLS, tool_choice="auto"))
    assert "tools" not in h.requests[0].body and "tool_choice" not in h.requests[0].body


def test_streamed_tool_calls() -> None:
    """Streamed tool-call deltas arrive as complete calls."""
    h = Harness(
        [Turn(tool_calls=[("look", {"detail": "full"}), ("say", {"text": "hé"})], chunk_chars=4)]
    )
    events: list = []
    response = h.run(h.client.complete(USER, tools=TOOLS, on_event=events.append))
    assert [(c.name, dict(c.arguments)) for c in response.tool_calls] == [
        ("look", {"detail": "full"}),
        ("say", {"text": "hé"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert isinstance(events[-1], StreamDone)
    final = next(e for e in events if isinstance(e, AssistantMessageFinal))
    assert final.message["tool_calls"][1]["function"]["name"] == "say"


def test_stream_requested_but_json_answer_is_understood() -> None:
    """A server ignoring stream=true (JSON answer) still works."""
    h = Harness([Turn(text="whole", stream=False)])
    assert h.run(h.client.complete(USER, stream=True)).content == "whole"


def test_429_waits_for_retry_after() -> None:
    """429 + Retry-After: no new request before the wait is over, then success."""
    h = Harness([Fault.rate_limited(retry_after=5), Turn(text="ok")])
    d = h.client.complete(USER)
    h.pump(4.5)
    assert len(h.requests) == 1 and not d.called
    assert h.run(d).content == "ok"
    assert len(h.requests) == 2


def test_retry_after_is_capped() -> None:
    """A huge Retry-After is capped by retry_after_cap."""
    h = Harness([Fault.rate_limited(retry_after=3600), Turn(text="ok")], retry_after_cap=2.0)
    d = h.client.complete(USER)
    h.pump(2.5)
    assert d.called and len(h.requests) == 2


def test_5xx_retried_then_clear_error() -> None:
    """Server errors are retried max_attempts times, then reported with the status."""
    h = Harness([Fault.server_error(503, "overloaded")] * 5)
    with pytest.raises(LLMServerError, match=r"503 from http://model\.test/v1/chat/completions"):
        h.run(h.client.complete(USER))
    assert len(h.requests) == 3


def test_html_error_page_is_clear() -> None:
    """A proxy's HTML page is summarised in the error."""
    h = Harness([Fault.html_error(502)] * 3)
    with pytest.raises(LLMServerError, match="non-JSON body: 502 Bad Gateway nginx"):
        h.run(h.client.complete(USER))


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_fail_at_once(status: int) -> None:
    """400/401/403/404 are not retried and do not count against the breaker."""
    h = Harness([Fault.http_error(status)] * 3, api_key_env="OPENAI_API_KEY")
    with pytest.raises(LLMRequestError, match=f"^{status} from http://model.test"):
        h.run(h.client.complete(USER))
    assert len(h.requests) == 1
    assert h.client.breaker is not None and h.client.breaker.consecutive_failures == 0


def test_a_refused_max_tokens_is_sent_as_max_completion_tokens(logged: list) -> None:
    """OpenAI's reasoning models refuse ``max_tokens``: the call is sent again at once
    with ``max_completion_tokens``, and every later request uses that field (logged once)."""
    refusal = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
               "Use 'max_completion_tokens' instead.")
    h = Harness([Fault.http_error(400, refusal), Turn(text="one"), Turn(text="two")],
                context_window=8192)
    assert h.run(h.client.complete(USER)).content == "one"
    assert h.run(h.client.complete(USER)).content == "two"
    first, *later = [r.body for r in h.requests]
    assert first["max_tokens"] == 2048 and "max_completion_tokens" not in first
    assert [(b.get("max_tokens"), b["max_completion_tokens"]) for b in later] == [
        (None, 2048), (None, 2048)]
    assert h.client.reply_cap_field == "max_completion_tokens"
    assert sum("max_completion_tokens from now on" in formatEvent(e) for e in logged) == 1


def test_401_message_names_the_variable() -> None:
    """The 401 message points at the variable holding the key."""
    h = Harness([Fault.http_error(401)], api_key_env="OPENAI_API_KEY")
    with pytest.raises(LLMRequestError, match=r"check the API key in \$OPENAI_API_KEY"):
        h.run(h.client.complete(USER))


def test_malformed_json_is_a_protocol_error_not_retried() -> None:
    """200 with broken JSON: LLMProtocolError at once."""
    h = Harness([Fault.malformed_json(), Turn(text="never")], stream=False)
    with pytest.raises(LLMProtocolError, match="not JSON"):
        h.run(h.client.complete(USER))
    assert len(h.requests) == 1


def test_malformed_stream_chunk_is_a_protocol_error() -> None:
    """A stream chunk that is not JSON: LLMProtocolError."""
    h = Harness([Fault.malformed_json()])
    with pytest.raises(LLMProtocolError, match="not JSON"):
        h.run(h.client.complete(USER))


def test_stream_error_after_text_keeps_partial_output() -> None:
    """An error inside the stream after some text: not retried, text preserved."""
    h = Harness([Turn(text="Once upon a time", chunk_chars=5, fault=Fault.stream_error("boom", 3))])
    with pytest.raises(LLMServerError, match="boom") as info:
        h.run(h.client.complete(USER))
    assert info.value.partial_text == "Once upon "
    assert len(h.requests) == 1


def test_stalled_stream_hits_the_idle_timeout() -> None:
    """No bytes for longer than the idle timeout: LLMTimeout with the partial text."""
    h = Harness(
        [Turn(text="abcdef", chunk_chars=2, fault=Fault.stall(after_chunks=3))],
        timeouts=Timeouts(idle=2.0),
    )
    d = h.client.complete(USER)
    h.pump(1.5)
    assert not d.called
    with pytest.raises(LLMTimeout, match="stalled") as info:
        h.run(d)
    assert info.value.partial_text == "abcd"


def test_headers_timeout_then_retry() -> None:
    """No headers in time: retried; all attempts slow → LLMTimeout."""
    h = Harness([Turn(text="slow", latency=10)] * 3, timeouts=Timeouts(headers=1.0))
    with pytest.raises(LLMTimeout, match="no response"):
        h.run(h.client.complete(USER))
    assert len(h.requests) == 3


def test_total_timeout() -> None:
    """timeouts.total bounds one attempt end to end."""
    h = Harness(
        [Turn(text="x" * 40, chunk_chars=1, chunk_latency=0.5)] * 3,
        timeouts=Timeouts(total=3.0, idle=10.0),
    )
    with pytest.raises(LLMTimeout, match="within 3s"):
        h.run(h.client.complete(USER))


def test_repeated_lines_end_generation() -> None:
    """A looping stream is cut off with RepeatedLineLoop carrying the text so far."""
    h = Harness(
        [Turn(text="I wait.\n" * 50, chunk_chars=8, chunk_latency=0.1)],
        repetition=RepetitionConfig(max_repeats=4),
    )
    d = h.client.complete(USER)
    with pytest.raises(RepeatedLineLoop) as info:
        h.run(d)
    assert info.value.partial_text.count("I wait.") == 4
    assert info.value.reason == "repeated_line_loop"
    assert h.requests[0].disconnected


def test_repeated_lines_in_a_whole_answer() -> None:
    """Non-streamed answers are checked too."""
    h = Harness([Turn(text="la\n" * 20)], stream=False)
    with pytest.raises(RepeatedLineLoop):
        h.run(h.client.complete(USER))


def test_breaker_opens_then_recovers() -> None:
    """After N failed attempts calls fail fast; after the cooldown a probe closes it."""
    h = Harness(
        [Fault.server_error(500)] * 2 + [Turn(text="back")],
        breaker_threshold=2,
        breaker_cooldown=30.0,
    )
    with pytest.raises((LLMServerError, LLMUnavailable)):
        h.run(h.client.complete(USER))
    assert h.client.breaker is not None and h.client.breaker.state is BreakerState.OPEN
    before = len(h.requests)
    with pytest.raises(LLMUnavailable, match="unavailable"):
        h.run(h.client.complete(USER))
    assert len(h.requests) == before
    h.clock.advance(30)
    assert h.run(h.client.complete(USER)).content == "back"
    assert h.client.breaker.state is BreakerState.CLOSED


def test_cancel_during_backoff_leaves_no_timer() -> None:
    """Cancelling while waiting to retry cancels the wait: no stray delayed call."""
    h = Harness([Fault.rate_limited(retry_after=50), Turn(text="never")])
    d = h.client.complete(USER)
    h.pump(1)
    assert h.clock.getDelayedCalls()
    d.cancel()
    with pytest.raises(defer.CancelledError):
        h.run(d)
    assert h.clock.getDelayedCalls() == []
    assert h.client.breaker is not None
    h.client.breaker.before_attempt()


def test_cancel_mid_stream_disconnects() -> None:
    """Cancelling while text is streaming aborts the connection."""
    h = Harness([Turn(text="word " * 40, chunk_chars=5, chunk_latency=0.5)])
    seen: list = []
    d = h.client.complete(USER, on_event=seen.append)
    h.pump(2)
    assert seen and not d.called
    d.cancel()
    with pytest.raises(defer.CancelledError):
        h.run(d)
    h.pump(1)
    assert h.requests[0].disconnected


def test_concurrency_cap() -> None:
    """Only max_concurrency requests are in flight; the rest wait for a slot."""
    h = Harness([Turn(text="a", latency=5)] * 3, max_concurrency=2)
    ds = [h.client.complete(USER) for _ in range(3)]
    h.pump(1)
    assert len(h.requests) == 2
    h.pump(5)
    assert len(h.requests) == 3
    for d in ds:
        assert h.run(d).content == "a"


def test_cancel_while_waiting_for_a_slot() -> None:
    """A request cancelled before it got a slot never reaches the server."""
    h = Harness([Turn(text="a", latency=5)] * 2, max_concurrency=1)
    first = h.client.complete(USER)
    second = h.client.complete(USER)
    h.pump(0.5)
    second.cancel()
    with pytest.raises(defer.CancelledError):
        h.run(second)
    assert h.run(first).content == "a"
    assert len(h.requests) == 1


def test_on_event_errors_are_logged_not_fatal(logged: list) -> None:
    """A failing on_event callback is logged; the request completes."""

    def boom(event: Any) -> None:
        raise RuntimeError("observer bug")

    h = Harness([Turn(text="fine")])
    assert h.run(h.client.complete(USER, on_event=boom)).content == "fine"
    assert any("on_event" in e.get("log_format", "") for e in logged)


def test_close_cancels_in_flight_and_refuses_new_requests() -> None:
    """close() cancels what is in flight; later calls fail with LLMError."""
    h = Harness([Turn(text="a", latency=50)])
    d = h.client.complete(USER)
    h.pump(0.5)
    h.run(h.client.close())
    with pytest.raises(defer.CancelledError):
        h.run(d)
    with pytest.raises(LLMError, match="closed"):
        h.run(h.client.complete(USER))


def test_unencodable_messages_fail_clearly() -> None:
    """Messages that cannot be JSON-encoded fail as a request error."""
    h = Harness([])
    with pytest.raises(LLMRequestError, match="encode"):
        h.run(
            h.client.complete([{"role": "user", "content": float("nan")}], extra_body={"x": {1, 2}})
        )


def test_connection_refused_is_a_connection_error() -> None:
    """A transport failure before any response is retried, then LLMConnectionError."""

    class Refusing:
        calls = 0

        def request(self, *args: Any, **kwargs: Any) -> defer.Deferred:
            Refusing.calls += 1
            from twisted.internet.error import ConnectionRefusedError

            return defer.fail(ConnectionRefusedError("nobody home"))

    clock = Clock()
    client = OpenAIChatClient(
        ModelProfile(base_url="http://127.0.0.1:9", model="m", discover_window=False),
        reactor=clock,
        agent=Refusing(),
        retry_policy=RetryPolicy(max_attempts=2, base_delay=1.0, jitter=False),
    )
    d = client.complete(USER)
    clock.advance(1)
    failure = []
    d.addErrback(failure.append)
    assert failure and failure[0].check(LLMConnectionError)
    assert "could not reach http://127.0.0.1:9/v1/chat/completions" in str(failure[0].value)
    assert Refusing.calls == 2
    json.dumps(str(failure[0].value))


def test_log_requests_redacts_the_key(logged: list) -> None:
    """log_requests=True logs each request with Authorization redacted."""
    from twisted.logger import formatEvent

    h = Harness([Turn(text="ok")], api_key_env="TEST_KEY", log_requests=True)
    h.run(h.client.complete(USER))
    lines = [formatEvent(e) for e in logged if "Model request" in e.get("log_format", "")]
    assert lines and "<redacted>" in lines[0]
    assert "sk-secret-value" not in " ".join(lines)
    assert "sk-secret-value" not in repr(h.client)


def test_key_rotation_is_picked_up() -> None:
    """The key is read per request, so a rotated key is used at once."""
    h = Harness(["a", "b"], api_key_env="TEST_KEY")
    h.run(h.client.complete(USER))
    h.environ["TEST_KEY"] = "sk-new"
    h.run(h.client.complete(USER))
    assert [r.headers["authorization"] for r in h.requests] == [
        "Bearer sk-secret-value",
        "Bearer sk-new",
    ]
