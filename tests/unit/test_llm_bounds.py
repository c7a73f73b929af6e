"""The model client's bounds: answer size, decoded bytes, SSE lines, deadlines, slots.

Each runs the client's real transport in memory against a server that breaks a
bound, on a task.Clock; the bounds are checked by counts (bytes, characters,
requests answered), never by timing.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.web import server
from twisted.web.resource import Resource

from ai_tools.errors import LLMProtocolError, LLMServerError, LLMTimeout
from ai_tools.llm.breaker import CircuitBreaker
from ai_tools.llm.call import ModelCall
from ai_tools.llm.channel import ModelChannel
from ai_tools.llm.profile import AnswerLimits, ModelProfile, Timeouts
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, Turn
from tests.unit.test_llm_client import USER, Harness

MiB = 1024 * 1024


def _chunk(text: str) -> bytes:
    data = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class _Stream(Resource):
    """Answers every POST with a fixed SSE body (optionally gzip-encoded)."""

    isLeaf = True

    def __init__(self, body: bytes, encoding: bytes | None = None) -> None:
        super().__init__()
        self.body = body
        self.encoding = encoding
        self.requests: list[Any] = []

    def render_POST(self, request: Any) -> int:
        self.requests.append(request)
        request.setHeader(b"content-type", b"text/event-stream")
        if self.encoding:
            request.setHeader(b"content-encoding", self.encoding)
        for start in range(0, len(self.body), 64 * 1024):
            request.write(self.body[start:start + 64 * 1024])
        request.finish()
        return server.NOT_DONE_YET


def test_a_streamed_answer_longer_than_the_default_cap_is_refused() -> None:
    """2 MiB of streamed text (cap: 1 MiB characters) is a protocol error, not an answer;
    the partial text it carries stays within the cap."""
    piece = "x" * (64 * 1024)
    h = Harness([Turn(text=piece * 32, chunk_chars=len(piece))], context_window=65536)
    with pytest.raises(LLMProtocolError, match="longer than 1048576 characters") as info:
        h.run(h.client.complete(USER))
    assert len(info.value.partial_text) <= AnswerLimits().answer_chars
    assert len(h.requests) == 1  # not retried


@pytest.mark.parametrize("stream", [True, False])
def test_a_small_window_caps_the_answer_too(stream: bool) -> None:
    """2,048 tokens of window hold no answer of 262,144 characters (128 a token): a
    longer one is refused; the profile's cap still holds for a large window."""
    piece = "x" * (64 * 1024)
    h = Harness([Turn(text=piece * 5, chunk_chars=len(piece))], context_window=2048,
                stream=stream)
    with pytest.raises(LLMProtocolError, match="longer than 262144 characters"):
        h.run(h.client.complete(USER))
    h = Harness([Turn(text=piece * 5, chunk_chars=len(piece))], context_window=128_000,
                stream=stream)
    assert len(h.run(h.client.complete(USER)).content) == 5 * len(piece)


def test_a_plain_answer_over_the_answer_cap_is_refused_too() -> None:
    """The same cap holds for a whole (non-streamed) answer."""
    h = Harness([Turn(text="y" * 5000)], stream=False, limits=AnswerLimits(answer_chars=1000))
    with pytest.raises(LLMProtocolError, match="longer than 1000 characters"):
        h.run(h.client.complete(USER))


def test_tool_call_arguments_count_against_the_cap() -> None:
    """Streamed arguments are part of the answer: a huge one is refused."""
    h = Harness([Turn(tool_calls=[("look", {"x": "z" * 5000})], chunk_chars=500)],
                limits=AnswerLimits(answer_chars=1000))
    with pytest.raises(LLMProtocolError, match="longer than 1000 characters"):
        h.run(h.client.complete(USER))


def test_a_gzip_bomb_stream_stops_at_the_decoded_byte_cap() -> None:
    """40 MiB of SSE comments gzip-compressed to a few KiB: refused once 32 MiB are
    decoded (the default cap), the connection dropped."""
    line = b": " + b"a" * (64 * 1024 - 3) + b"\n"
    bomb = gzip.compress(line * 640, compresslevel=9)
    assert len(bomb) < 200 * 1024
    resource = _Stream(bomb, encoding=b"gzip")
    h = Harness([], resource=resource, discover_window=False)
    with pytest.raises(LLMProtocolError, match=f"larger than {32 * MiB} bytes"):
        h.run(h.client.complete(USER))
    assert len(resource.requests) == 1


def test_an_sse_line_longer_than_the_limit_is_refused() -> None:
    """A 2 MiB line (default limit 1 MiB) fails the stream instead of being buffered."""
    body = b": " + b"b" * (2 * MiB) + b"\n\n" + _chunk("hi") + b"data: [DONE]\n\n"
    resource = _Stream(body)
    h = Harness([], resource=resource, discover_window=False)
    with pytest.raises(LLMProtocolError, match=f"longer than {MiB} bytes"):
        h.run(h.client.complete(USER))


def test_keep_alives_do_not_count_as_progress() -> None:
    """A stream sending only ': keep-alive' comments ends at the progress deadline,
    although bytes keep arriving well within the idle timeout."""
    h = Harness([Turn(text="Once upon", chunk_chars=3, fault=Fault.keep_alive(2, 5.0))],
                timeouts=Timeouts(idle=10.0, progress=60.0))
    with pytest.raises(LLMTimeout, match="no progress") as info:
        h.run(h.client.complete(USER), limit=200.0, step=1.0)
    assert info.value.partial_text == "Onc"
    assert len(h.requests) == 1 and h.requests[0].disconnected  # text came: no retry


def test_a_stream_that_never_ends_meets_the_default_total_deadline() -> None:
    """By default a call has a total deadline: a stream still making progress after it
    (a chunk every 10 s for 1,000 s) ends with LLMTimeout and the text so far."""
    h = Harness([Turn(text="w" * 100, chunk_chars=1, chunk_latency=10.0)])
    total = Timeouts().total
    assert total is not None
    with pytest.raises(LLMTimeout, match=f"within {total:g}s") as info:
        h.run(h.client.complete(USER), limit=2000.0, step=1.0)
    assert 0 < len(info.value.partial_text) < 100
    assert h.clock.seconds() <= total + 2


def test_a_stalled_stream_does_not_keep_its_slot() -> None:
    """One slot; the first call's stream makes no progress for ever, the second call is
    healthy: the second is answered (after the first's progress deadline), and the
    first ends with LLMTimeout without starving it."""
    h = Harness(
        [Turn(text="a", fault=Fault.keep_alive(2, 5.0)), Turn(text="healthy")],
        max_concurrency=1, timeouts=Timeouts(progress=60.0, idle=30.0),
    )
    stalled = h.client.complete(USER)
    healthy = h.client.complete(USER)
    assert h.run(healthy, limit=200.0, step=1.0).content == "healthy"
    with pytest.raises(LLMTimeout):
        h.run(stalled, limit=2000.0, step=1.0)
    assert [r.disconnected for r in h.requests[:2]] == [True, False]


def test_slots_are_all_given_back() -> None:
    """Calls that stall, time out and fail leave every slot free: the next call goes."""
    h = Harness([Turn(text="abc", chunk_chars=1, fault=Fault.keep_alive(2, 5.0))] * 3
                + [Fault.server_error(500)] * 3 + [Turn(text="free")], max_concurrency=2,
                timeouts=Timeouts(progress=60.0, idle=30.0), breaker_threshold=100)
    calls = [h.client.complete(USER) for _ in range(4)]
    for call in calls:
        with pytest.raises((LLMTimeout, LLMServerError)):
            h.run(call, limit=2000.0, step=1.0)
    before = len(h.requests)
    assert h.run(h.client.complete(USER), limit=10.0).content == "free"
    assert len(h.requests) == before + 1


def test_waiting_for_a_slot_ends_at_the_queue_deadline() -> None:
    """A call whose every slot stays busy fails at its queue deadline (its total deadline
    has not started: nothing was sent), naming the cause, and leaves no waiter behind."""
    clock = Clock()
    profile = ModelProfile(base_url="http://model.test/v1", model="m", max_concurrency=1,
                           timeouts=Timeouts(total=10.0, queue=30.0))
    channel = ModelChannel(profile, clock, None, breaker=CircuitBreaker(clock),
                           retry_policy=RetryPolicy(), environ={}, rand=lambda: 0.5,
                           wall_clock=clock.seconds)
    channel.server.slots.acquire()  # the only slot, busy
    call = ModelCall(channel, b"{}", False, None)
    call.start()
    failures: list[Any] = []
    call.result.addErrback(failures.append)
    clock.advance(29.5)
    assert not failures
    clock.advance(0.5)
    assert failures and failures[0].check(LLMTimeout)
    assert "in the queue for one of the server's 1 slot(s)" in str(failures[0].value)
    assert failures[0].value.attempts == 0
    assert channel.calls == set() and clock.getDelayedCalls() == []
    channel.server.slots.release()
    assert channel.server.slots.in_use == 0 and not channel.server.slots.waiting
