"""BodyReader (idle timer, abort, cancel), BytesProducer and decoded_response."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.client import GzipDecoder, ResponseDone, ResponseFailed
from twisted.web.http_headers import Headers

from ai_tools.errors import LLMTimeout
from ai_tools.llm.body import BodyReader, BytesProducer, decoded_response


class FakeTransport:
    """Counts aborts."""

    def __init__(self) -> None:
        self.stopped = 0

    def stopProducing(self) -> None:
        self.stopped += 1


def reader(idle: float | None = 5.0) -> tuple[Clock, BodyReader, list[bytes], FakeTransport]:
    clock = Clock()
    got: list[bytes] = []
    r = BodyReader(clock, got.append, idle, "test body")
    transport = FakeTransport()
    r.makeConnection(transport)
    return clock, r, got, transport


def outcome(d: defer.Deferred) -> Any:
    results: list = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    return results[0]


def test_delivers_chunks_and_finishes_on_response_done() -> None:
    """Chunks reach the sink; a clean end fires finished with None and stops the timer."""
    clock, r, got, _ = reader()
    r.dataReceived(b"a")
    r.dataReceived(b"b")
    r.connectionLost(Failure(ResponseDone()))
    assert got == [b"a", b"b"] and outcome(r.finished) is None
    assert clock.getDelayedCalls() == []


def test_idle_timer_counts_from_the_last_byte() -> None:
    """Bytes push the deadline back; silence longer than the timeout aborts."""
    clock, r, _, transport = reader(idle=5.0)
    clock.advance(4)
    r.dataReceived(b"x")
    clock.advance(4)  # 8s since start, 4s since the last byte
    assert not r.finished.called
    clock.advance(1.5)
    failure = outcome(r.finished)
    assert failure.check(LLMTimeout) and "stalled" in str(failure.value)
    assert transport.stopped == 1
    r.connectionLost(Failure(ResponseFailed([])))  # the abort's echo is ignored


def test_no_idle_timeout() -> None:
    """idle None: no timer at all."""
    clock, _r, _, _ = reader(idle=None)
    assert clock.getDelayedCalls() == []


def test_sink_error_aborts_and_fails() -> None:
    """An exception in the sink aborts the connection and fails finished with it."""
    clock = Clock()

    def sink(data: bytes) -> None:
        raise ValueError("bad chunk")

    r = BodyReader(clock, sink, 5.0)
    transport = FakeTransport()
    r.makeConnection(transport)
    r.dataReceived(b"x")
    assert outcome(r.finished).check(ValueError)
    assert transport.stopped == 1 and clock.getDelayedCalls() == []
    r.dataReceived(b"late")  # ignored


def test_cancel_aborts_the_connection() -> None:
    """Cancelling finished stops the transport (a real abort, not just a dropped Deferred)."""
    clock, r, _, transport = reader()
    r.finished.cancel()
    assert outcome(r.finished).check(defer.CancelledError)
    assert transport.stopped == 1 and clock.getDelayedCalls() == []


def test_stop_ends_reading_quietly() -> None:
    """stop(): abort, and finished fires with None."""
    _, r, _, transport = reader()
    r.stop()
    assert outcome(r.finished) is None and transport.stopped == 1


def test_lost_connection_fails_finished() -> None:
    """A cut body fails finished with the reason."""
    _, r, _, _ = reader()
    r.connectionLost(Failure(ResponseFailed([Failure(ConnectionError("reset"))])))
    assert outcome(r.finished).check(ResponseFailed)


def test_bytes_producer_writes_at_once() -> None:
    """The body is written in one go and its length is known."""
    written: list[bytes] = []

    class Consumer:
        def write(self, data: bytes) -> None:
            written.append(data)

    producer = BytesProducer(b"hello")
    assert producer.length == 5
    assert outcome(producer.startProducing(Consumer())) is None
    assert written == [b"hello"]
    producer.pauseProducing()
    producer.resumeProducing()
    producer.stopProducing()


@pytest.mark.parametrize("idle", [0.5, 3.0])
def test_idle_reschedules_without_failing_active_streams(idle: float) -> None:
    """A steady trickle of bytes never trips the idle timer."""
    clock, r, got, _ = reader(idle=idle)
    for _ in range(50):
        clock.advance(idle * 0.9)
        r.dataReceived(b".")
    assert not r.finished.called and len(got) == 50
    r.connectionLost(Failure(ResponseDone()))
    assert outcome(r.finished) is None


class FakeResponse:
    def __init__(self, encoding: list[bytes] | None) -> None:
        self.code = 200
        self.headers = Headers({b"content-encoding": encoding} if encoding else {})


def test_decoded_response_leaves_a_plain_answer_alone() -> None:
    plain = FakeResponse(None)
    assert decoded_response(plain) is plain


@pytest.mark.parametrize(
    ("encoding", "gzip_layers", "left"),
    [
        ([b"gzip"], 1, None),
        ([b"GZIP"], 1, None),
        ([b"br"], 0, [b"br"]),
        ([b"br, gzip"], 1, [b"br"]),
        ([b"gzip", b"br"], 0, [b"gzip,br"]),
    ],
)
def test_decoded_response_unwraps_gzip_from_the_outside(
    encoding: list[bytes], gzip_layers: int, left: list[bytes] | None
) -> None:
    """Like ContentDecoderAgent: the last-applied gzip layers are decoded, the rest stays."""
    response = FakeResponse(encoding)
    decoded = decoded_response(response)
    layers = 0
    while isinstance(decoded, GzipDecoder):
        layers += 1
        decoded = decoded.original
    assert layers == gzip_layers
    assert response.headers.getRawHeaders(b"content-encoding") == left


def test_armed_after_delivery_a_finished_body_sets_no_timer() -> None:
    """arm_on_connect=False: no timer until arm(), and none once the body has ended."""
    clock = Clock()
    got: list[bytes] = []
    r = BodyReader(clock, got.append, 5.0, "test body", arm_on_connect=False)
    r.makeConnection(FakeTransport())
    assert clock.getDelayedCalls() == []
    r.dataReceived(b"all")
    r.connectionLost(Failure(ResponseDone()))
    r.arm()
    assert clock.getDelayedCalls() == [] and outcome(r.finished) is None


def test_armed_after_delivery_still_times_out() -> None:
    """arm() on a body still arriving starts the idle timer; silence then aborts it."""
    clock = Clock()
    r = BodyReader(clock, lambda data: None, 5.0, "test body", arm_on_connect=False)
    transport = FakeTransport()
    r.makeConnection(transport)
    r.arm()
    r.arm()  # a second call adds no second timer
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(5.5)
    assert outcome(r.finished).check(LLMTimeout)
    assert transport.stopped == 1
