"""What the client sends and what it makes of odd answers: assistant content never null,
the tool choice, the default max_tokens, empty answers, finish reasons, a stream that
breaks when tools are offered, and the attempts a call made.

In memory (treq.testing over the scripted model), time on a Clock.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.logger import formatEvent
from twisted.python.failure import Failure
from twisted.web.client import ResponseNeverReceived

from ai_tools.errors import (
    LLMConnectionError,
    LLMEmptyAnswer,
    LLMRequestError,
    LLMServerError,
    LLMUnavailable,
)
from ai_tools.llm.client import OpenAIChatClient, sendable_messages
from ai_tools.llm.events import ToolCall
from ai_tools.llm.messages import assistant_tool_calls_message
from ai_tools.llm.profile import ModelProfile, default_max_tokens
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, ServerKind, Turn
from tests.unit.test_llm_client import TOOLS, USER, Harness, logged  # noqa: F401  (a fixture)

CALL = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}


# -- assistant content -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_assistant_tool_call_messages_are_sent_with_empty_content(stream: bool) -> None:
    """llama-cpp-python answers 500 to ``"content": null``: what the client sends is
    ``""``, also for a history saved before (null inside), and what it builds or
    assembles for history is ``""`` already."""
    h = Harness([Turn(tool_calls=[("look", {})]), "done"], stream=stream)
    first = h.run(h.client.complete(USER, tools=TOOLS))
    assert first.message["content"] == ""
    built = assistant_tool_calls_message([ToolCall("c1", "look", {})])
    assert built["content"] == ""
    stored = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    h.run(h.client.complete([*USER, stored, {"role": "tool", "tool_call_id": "c1",
                                               "content": "ok"}], tools=TOOLS))
    sent = h.requests[1].body["messages"]
    assert sent[1] == {"role": "assistant", "content": "", "tool_calls": [CALL]}
    assert stored["content"] is None  # the caller's history is not changed


def test_sendable_messages_copies_only_what_it_changes() -> None:
    user = {"role": "user", "content": "hi"}
    tool = {"role": "tool", "tool_call_id": "c1", "content": None}
    assistant = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    sent = sendable_messages([user, assistant, tool])
    assert sent[0] is user and sent[2] is tool and sent[1]["content"] == ""


# -- tool choice -------------------------------------------------------------------------


def test_tool_choice_auto_is_sent_with_tools_by_default() -> None:
    h = Harness(["a", "b"])
    h.run(h.client.complete(USER, tools=TOOLS))
    h.run(h.client.complete(USER))
    assert h.requests[0].body["tool_choice"] == "auto"
    assert "tool_choice" not in h.requests[1].body  # no tools, no choice


@pytest.mark.parametrize(("setting", "sent"), [("required", "required"), ("none", "none"),
                                               (None, None)])
def test_tool_choice_per_profile(setting: str | None, sent: str | None) -> None:
    h = Harness(["a"], tool_choice=setting)
    h.run(h.client.complete(USER, tools=TOOLS))
    assert h.requests[0].body.get("tool_choice") == sent


def test_tool_choice_off_and_max_tokens_in_a_config_table() -> None:
    base = {"base_url": "http://h/v1", "model": "m"}
    profile = ModelProfile.from_mapping({**base, "tool_choice": "off", "max_tokens": 300})
    assert (profile.tool_choice, profile.max_tokens) == (None, 300)
    with pytest.raises(Exception, match="tool_choice"):
        ModelProfile.from_mapping({**base, "tool_choice": "sometimes"})
    with pytest.raises(Exception, match="max_tokens"):
        ModelProfile.from_mapping({**base, "max_tokens": -1})


def test_a_call_s_tool_choice_wins() -> None:
    h = Harness(["a"])
    h.run(h.client.complete(USER, tools=TOOLS, tool_choice="look"))
    assert h.requests[0].body["tool_choice"] == {"type": "function",
                                                  "function": {"name": "look"}}


# -- max_tokens ----------------------------------------------------------------------------


def test_default_max_tokens_is_a_quarter_of_the_window_at_most_4096() -> None:
    assert [default_max_tokens(w) for w in (256, 2048, 8192, 16384, 128_000, 2)] == [
        64, 512, 2048, 4096, 4096, 1]


@pytest.mark.parametrize(("profile", "extra", "sent"), [
    ({}, None, 2048),                                        # 8,192 by default: a quarter
    ({"context_window": 2048}, None, 512),
    ({"max_tokens": 300}, None, 300),                        # the profile's
    ({"max_tokens": 0}, None, None),                         # off
    ({"extra_body": {"max_tokens": 77}}, None, 77),          # the extra body's wins
    ({"max_tokens": 300}, {"max_tokens": 9}, 9),             # and the call's
])
def test_max_tokens_sent(profile: dict[str, Any], extra: dict[str, Any] | None,
                         sent: int | None) -> None:
    h = Harness(["a"], **profile)
    h.run(h.client.complete(USER, extra_body=extra))
    assert h.requests[0].body.get("max_tokens") == sent


# -- odd answers -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("finish", "why"), [("stop", "stopped at once"),
                                              ("length", "raise max_tokens"),
                                              ("content_filter", "content filter")])
def test_an_empty_answer_is_a_clear_error(stream: bool, finish: str, why: str,
                                          logged: list) -> None:  # noqa: F811
    """No text, no tool call: an error saying so (and what the finish reason means),
    not retried and not held against the server (the breaker stays closed)."""
    h = Harness([Turn(text="", finish_reason=finish)] * 6, stream=stream, breaker_threshold=1)
    with pytest.raises(LLMEmptyAnswer, match=f"empty answer.*finish_reason '{finish}'.*{why}"):
        h.run(h.client.complete(USER))
    assert len(h.requests) == 1
    with pytest.raises(LLMEmptyAnswer):  # not LLMUnavailable: the server is fine
        h.run(h.client.complete(USER))


@pytest.mark.parametrize("stream", [False, True])
def test_finish_reason_error_is_a_server_error(stream: bool) -> None:
    h = Harness([Turn(text="half an ans", finish_reason="error")] * 3, stream=stream)
    with pytest.raises(LLMServerError, match="finish_reason 'error'") as info:
        h.run(h.client.complete(USER))
    assert info.value.partial_text == "half an ans"


@pytest.mark.parametrize("stream", [False, True])
def test_an_unknown_finish_reason_is_logged_once_and_the_answer_used(
        stream: bool, logged: list) -> None:  # noqa: F811
    h = Harness([Turn(text="fine", finish_reason="eos_token")] * 2, stream=stream)
    assert h.run(h.client.complete(USER)).content == "fine"
    assert h.run(h.client.complete(USER)).finish_reason == "eos_token"
    warnings = [formatEvent(e) for e in logged if "finish_reason" in formatEvent(e)]
    assert len(warnings) == 1 and "'eos_token'" in warnings[0]


def test_an_error_body_in_a_200_is_a_server_error() -> None:
    body = '{"error": {"message": "model crashed", "type": "server_error"}}'
    h = Harness([Fault(kind="status", status=200, body=body)] * 3, stream=False)
    with pytest.raises(LLMServerError, match="carrying an error: model crashed"):
        h.run(h.client.complete(USER))


# -- a stream that breaks when tools are offered ------------------------------------------------


def test_a_stream_broken_by_tools_is_asked_again_whole_and_remembered(
        logged: list) -> None:  # noqa: F811
    """llama-cpp-python ends a streamed answer with tools under ``tool_choice: "auto"``
    before its first chunk: at that first refusal the client asks for whole answers
    whenever tools are offered, for every call of the profile (text answers still
    stream), and asks this one again whole at once.  (Here the server is not recognised:
    the client does not ask it what it is.)"""
    h = Harness([Turn(tool_calls=[("look", {})]), Turn(tool_calls=[("look", {})]), "text"],
                discover_window=False, server_slots=1)
    h.resource.server_kind = ServerKind("llama-cpp-python")
    first = h.client.complete(USER, tools=TOOLS)
    second = h.client.complete(USER, tools=TOOLS)  # queued behind: already whole when sent
    answers = h.run(defer.gatherResults([first, second]))
    assert [c.name for c in answers[0].tool_calls] == ["look"] and answers[0].attempts == 2
    assert answers[1].attempts == 1
    h.run(h.client.complete(USER))
    assert [r.body["stream"] for r in h.requests] == [True, False, False, True]
    warnings = [formatEvent(e) for e in logged if "first chunk" in formatEvent(e)]
    assert len(warnings) == 1 and "whole answers" in warnings[0]


def test_a_recognised_llama_cpp_python_never_gets_a_streamed_tool_request(
        logged: list) -> None:  # noqa: F811
    """Its ``/v1/models`` shows what the server is: requests offering tools are whole
    from the first (no prompt evaluated for a refusal), and it serves one at a time."""
    h = Harness([Turn(tool_calls=[("look", {})]), "text"])
    h.resource.server_kind = ServerKind("llama-cpp-python")
    assert h.run(h.client.complete(USER, tools=TOOLS)).attempts == 1
    h.run(h.client.complete(USER))
    assert [r.body["stream"] for r in h.requests] == [False, True]
    assert h.client.server.kind == "llama-cpp-python" and h.client.server.slots.capacity == 1
    assert any("cannot stream a tool call" in formatEvent(e) for e in logged)


class ClosingOnStreams:
    """An agent that closes every streamed request cleanly before any header (as
    llama-cpp-python may when it cannot stream), and passes the others on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def request(self, method: bytes, uri: bytes, headers: Any = None, body: Any = None) -> Any:
        accept = headers.getRawHeaders(b"accept", [b""])[0] if headers else b""
        if accept == b"text/event-stream":
            return defer.fail(ResponseNeverReceived([Failure(ConnectionDone())]))
        if self.inner is None:
            return defer.fail(ConnectionRefusedError("nobody home"))
        return self.inner.request(method, uri, headers, body)


def test_a_connection_closed_without_answer_to_a_streamed_request_with_tools() -> None:
    """The server may instead close the connection cleanly before any header: the
    request is asked again whole, and once that is answered, whole from then on."""
    h = Harness([Turn(tool_calls=[("look", {})]), Turn(tool_calls=[("look", {})])])
    client = OpenAIChatClient(h.client.profile, reactor=h.clock,
                              agent=ClosingOnStreams(h.stub),
                              retry_policy=RetryPolicy(max_attempts=1))
    answer = h.run(client.complete(USER, tools=TOOLS))
    assert answer.tool_calls and answer.attempts == 2
    assert h.run(client.complete(USER, tools=TOOLS)).attempts == 1
    assert [r.body["stream"] for r in h.requests] == [False, False]


def test_a_server_that_answers_nothing_keeps_streaming() -> None:
    """When the whole request fails too (nothing answers), nothing is learned: the next
    request offering tools is streamed again."""
    closing, clock = ClosingOnStreams(None), Clock()
    client = OpenAIChatClient(ModelProfile(base_url="http://h/v1", model="m",
                                           discover_window=False),
                              reactor=clock, agent=closing,
                              retry_policy=RetryPolicy(max_attempts=1))
    failures: list = []
    client.complete(USER, tools=TOOLS).addErrback(failures.append)
    clock.advance(0)
    assert failures and failures[0].check(LLMConnectionError)
    assert client._channel.stream_tools


# -- attempts ----------------------------------------------------------------------------------


def test_a_call_reports_its_attempts() -> None:
    """Every HTTP attempt is counted: answers carry theirs, errors too (0 when the
    breaker refused the call before sending anything)."""
    h = Harness([Fault.server_error(500), "ok", *[Fault.server_error(503)] * 3],
                breaker_threshold=3)
    assert h.run(h.client.complete(USER)).attempts == 2
    with pytest.raises(LLMServerError) as info:
        h.run(h.client.complete(USER))
    assert info.value.attempts == 3
    with pytest.raises(LLMUnavailable) as refused:
        h.run(h.client.complete(USER))
    assert refused.value.attempts == 0
    once = Harness([Fault.http_error(400)])
    with pytest.raises(LLMRequestError) as bad:
        once.run(once.client.complete(USER))
    assert bad.value.attempts == 1
