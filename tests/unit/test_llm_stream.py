"""Assembling streamed chat-completion chunks into semantic events."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.llm.events import (
    AssistantMessageFinal,
    ServerError,
    StreamDone,
    TextDelta,
    UsageUpdate,
)
from ai_tools.llm.sse import SSEEvent, SSEParser
from ai_tools.llm.stream import ChatStreamAssembler, StreamProtocolError


def chunk(delta: dict, finish: str | None = None, **extra: object) -> SSEEvent:
    data = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return SSEEvent(json.dumps(data))


def feed_all(assembler: ChatStreamAssembler, events: list[SSEEvent]) -> list:
    out: list = []
    for ev in events:
        out.extend(assembler.feed(ev))
    return out


def test_text_deltas_then_final_and_done() -> None:
    """Each content fragment is a TextDelta; [DONE] yields the message then StreamDone."""
    a = ChatStreamAssembler()
    out = feed_all(
        a,
        [
            chunk({"role": "assistant", "content": ""}, model="m1"),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
            SSEEvent("[DONE]"),
        ],
    )
    assert out == [
        TextDelta("Hel"),
        TextDelta("lo"),
        AssistantMessageFinal({"role": "assistant", "content": "Hello"}),
        StreamDone(),
    ]
    response = a.response()
    assert (response.content, response.finish_reason, response.model) == ("Hello", "stop", "m1")
    assert a.finished
    assert a.feed(SSEEvent("[DONE]")) == []


def test_parallel_tool_calls_assembled_by_index_even_interleaved() -> None:
    """Fragments of two calls, interleaved, are joined per index into complete calls."""
    a = ChatStreamAssembler()
    frags = [
        {"index": 0, "id": "c0", "type": "function", "function": {"name": "look", "arguments": ""}},
        {
            "index": 1,
            "id": "c1",
            "type": "function",
            "function": {"name": "say", "arguments": '{"te'},
        },
        {"index": 0, "function": {"arguments": '{"detail": '}},
        {"index": 1, "function": {"arguments": 'xt": "hi"}'}},
        {"index": 0, "function": {"arguments": '"full"}'}},
    ]
    feed_all(a, [chunk({"tool_calls": [f]}) for f in frags] + [chunk({}, "tool_calls")])
    out = a.finish()
    assert isinstance(out[0], AssistantMessageFinal)
    calls = a.response().tool_calls
    assert [(c.id, c.name, dict(c.arguments)) for c in calls] == [
        ("c0", "look", {"detail": "full"}),
        ("c1", "say", {"text": "hi"}),
    ]
    assert a.response().finish_reason == "tool_calls"


def test_whole_calls_without_index_and_object_arguments() -> None:
    """Servers sending each call whole (no index, arguments as an object) are understood."""
    a = ChatStreamAssembler()
    feed_all(
        a,
        [
            chunk(
                {
                    "tool_calls": [
                        {"id": "a", "function": {"name": "look", "arguments": {"x": 1}}},
                        {"id": "b", "function": {"name": "say", "arguments": {"text": "yo"}}},
                    ]
                }
            )
        ],
    )
    calls = a.response().tool_calls
    assert [(c.name, dict(c.arguments)) for c in calls] == [
        ("look", {"x": 1}),
        ("say", {"text": "yo"}),
    ]


def test_missing_call_id_gets_one() -> None:
    """A call without an id still gets a stable id, so history can answer it."""
    a = ChatStreamAssembler()
    feed_all(
        a, [chunk({"tool_calls": [{"index": 0, "function": {"name": "n", "arguments": "{}"}}]})]
    )
    assert a.response().tool_calls[0].id == "call_0"


def test_usage_chunk_with_empty_choices() -> None:
    """OpenAI's final usage chunk (choices: []) becomes a UsageUpdate."""
    a = ChatStreamAssembler()
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    out = feed_all(a, [SSEEvent(json.dumps({"choices": [], "usage": usage}))])
    assert out == [UsageUpdate(usage)]
    assert a.response().usage == usage


def test_error_object_and_error_event_become_server_errors() -> None:
    """An error payload inside the stream is surfaced, not swallowed."""
    a = ChatStreamAssembler()
    out = feed_all(
        a,
        [
            SSEEvent(json.dumps({"error": {"message": "overloaded"}})),
            SSEEvent('{"error": {"message": "again"}}', event="error"),
            SSEEvent("plain text", event="error"),
        ],
    )
    assert out == [
        ServerError({"message": "overloaded"}),
        ServerError({"message": "again"}),
        ServerError("plain text"),
    ]


@pytest.mark.parametrize("data", ["{not json", "[1, 2]", '"text"'])
def test_malformed_chunk_is_a_protocol_error(data: str) -> None:
    """A data line that is not a JSON object raises StreamProtocolError naming it."""
    with pytest.raises(StreamProtocolError):
        ChatStreamAssembler().feed(SSEEvent(data))


def test_reasoning_content_is_kept_apart_from_text() -> None:
    """reasoning_content (thinking models) goes to the message, not to TextDelta."""
    a = ChatStreamAssembler()
    out = feed_all(a, [chunk({"reasoning_content": "hmm"}), chunk({"content": "ok"})])
    assert out == [TextDelta("ok")]
    assert a.message()["reasoning_content"] == "hmm"


def test_other_choices_are_ignored() -> None:
    """Only choice 0 is assembled."""
    a = ChatStreamAssembler()
    data = {
        "choices": [
            {"index": 1, "delta": {"content": "no"}},
            {"index": 0, "delta": {"content": "yes"}},
        ]
    }
    assert feed_all(a, [SSEEvent(json.dumps(data))]) == [TextDelta("yes")]


@given(st.text(max_size=60), st.lists(st.integers(min_value=0, max_value=400), max_size=10))
def test_text_survives_any_byte_chunking(text: str, cuts: list[int]) -> None:
    """Text streamed in SSE chunks comes back identical however the bytes are cut."""
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    raw = (
        b"".join(
            b"data: "
            + json.dumps({"choices": [{"index": 0, "delta": {"content": p}}]}).encode()
            + b"\r\n\r\n"
            for p in pieces
        )
        + b"data: [DONE]\r\n\r\n"
    )
    positions = sorted({c % (len(raw) + 1) for c in cuts})
    parser, a = SSEParser(), ChatStreamAssembler()
    events: list = []
    for lo, hi in zip([0, *positions], [*positions, len(raw)], strict=True):
        for sse in parser.events(raw[lo:hi]):
            events.extend(a.feed(sse))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    assert events[-1] == StreamDone()


def _full_parse(data: str) -> tuple[list, str, str | None]:
    """Events and text when the fast path is off (every chunk fully decoded)."""
    a = ChatStreamAssembler()
    events = a.feed_chunk(json.loads(data))
    return events, a.text, a.finish_reason


@given(
    content=st.text(max_size=30),
    compact=st.booleans(),
    logprobs=st.booleans(),
    finish=st.sampled_from([None, "stop"]),
    usage=st.sampled_from([None, "null", "object"]),
)
def test_text_fast_path_agrees_with_the_full_parse(
    content: str, compact: bool, logprobs: bool, finish: str | None, usage: str | None
) -> None:
    """Text-only chunks read through the fast path give exactly what json.loads gives."""
    choice: dict = {"index": 0, "delta": {"content": content}}
    if logprobs:
        choice["logprobs"] = None
    choice["finish_reason"] = finish
    chunk: dict = {"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    if usage == "null":
        chunk["usage"] = None
    elif usage == "object":
        chunk["usage"] = {"total_tokens": 3}
    separators = (",", ":") if compact else (", ", ": ")
    data = json.dumps(chunk, separators=separators, ensure_ascii=compact)
    warm = ChatStreamAssembler()
    warm.feed(SSEEvent(json.dumps({"model": "m", "choices": []})))  # enables the fast path
    events = warm.feed(SSEEvent(data))
    expected, text, finish_reason = _full_parse(data)
    assert events == expected
    assert (warm.text, warm.finish_reason) == (text, finish_reason)


@pytest.mark.parametrize(
    "data",
    [
        '{"choices":[{"index":0,"delta":{"content":"a\nb"},"finish_reason":null}]}',
        '{"choices":[{"index":0,"delta":{"content":"abc},"finish_reason":null}]}',
        '{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]} junk',
        '{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}],}',
    ],
)
def test_text_fast_path_does_not_accept_broken_json(data: str) -> None:
    """Malformed text chunks still fail as protocol errors."""
    a = ChatStreamAssembler()
    a.feed(SSEEvent('{"model": "m", "choices": []}'))
    with pytest.raises(StreamProtocolError):
        a.feed(SSEEvent(data))
