"""BodyReader (byte cap, idle and progress deadlines, abort, cancel), BytesProducer and
BoundedGzipDecoder."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone, ResponseFailed

from ai_tools.errors import LLMTimeout
from ai_tools.llm.body import (
    INFLATE_PIECE,
    BodyReader,
    BodyTooLarge,
    BoundedGzipDecoder,
    BytesProducer,
    DeadlinePassed,
)


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


def test_byte_cap_fails_the_body_and_aborts() -> None:
    """Past max_bytes the reader aborts and fails with BodyTooLarge; the sink gets no more."""
    clock, got = Clock(), []
    r = BodyReader(clock, got.append, None, "answer", max_bytes=10)
    transport = FakeTransport()
    r.makeConnection(transport)
    r.dataReceived(b"12345")
    r.dataReceived(b"67890")
    r.dataReceived(b"x")
    failure = outcome(r.finished)
    assert failure.check(BodyTooLarge) and "larger than 10 bytes" in str(failure.value)
    assert got == [b"12345", b"67890"] and transport.stopped == 1


def test_byte_cap_with_truncate_keeps_the_head() -> None:
    """truncate=True: the first max_bytes are delivered, then reading stops quietly."""
    clock, got = Clock(), []
    r = BodyReader(clock, got.append, None, "error body", max_bytes=4, truncate=True)
    transport = FakeTransport()
    r.makeConnection(transport)
    r.dataReceived(b"abc")
    r.dataReceived(b"defg")
    assert outcome(r.finished) is None
    assert b"".join(got) == b"abcd" and transport.stopped == 1


def test_progress_deadline_ignores_bytes_without_progress() -> None:
    """Bytes that make no progress (keep-alives) keep the idle timer quiet, not the
    progress deadline."""
    clock, _, transport = Clock(), [], FakeTransport()
    r = BodyReader(clock, lambda data: None, 5.0, "answer stream", progress_timeout=12.0)
    r.makeConnection(transport)
    for _ in range(2):
        clock.advance(4)
        r.dataReceived(b": keep-alive\n\n")
    r.progressed()  # an event at t=8
    for _ in range(4):
        clock.advance(4)
        r.dataReceived(b": keep-alive\n\n")
    failure = outcome(r.finished)
    assert failure.check(LLMTimeout) and "no progress for 12.0s" in str(failure.value)
    assert clock.seconds() == 24 and transport.stopped == 1


class _Body:
    """A response whose body is delivered by hand, recording aborts."""

    def __init__(self) -> None:
        self.protocol: Any = None
        self.stopped = 0
        self.code = 200
        self.headers = None

    def deliverBody(self, protocol: Any) -> None:
        self.protocol = protocol
        protocol.makeConnection(self)

    def stopProducing(self) -> None:
        self.stopped += 1

    def pauseProducing(self) -> None:
        """Unused."""

    def resumeProducing(self) -> None:
        """Unused."""


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data, compresslevel=9)


def test_gzip_body_is_inflated_whole() -> None:
    """A gzip body comes out as it went in, whatever its chunking."""
    original = b"The plaza is quiet. " * 5000
    packed = _gzip(original)
    body = _Body()
    got: list[bytes] = []
    reader = BodyReader(Clock(), got.append, None)
    BoundedGzipDecoder(body).deliverBody(reader)
    for i in range(0, len(packed), 100):
        body.protocol.dataReceived(packed[i:i + 100])
    body.protocol.connectionLost(Failure(ResponseDone()))
    assert b"".join(got) == original and outcome(reader.finished) is None
    assert max(len(piece) for piece in got) <= INFLATE_PIECE


def test_gzip_bomb_inflates_no_further_than_the_cap() -> None:
    """A 64 MiB gzip bomb in one chunk: at most the cap (plus one piece) is ever inflated."""
    bomb = _gzip(b"\0" * (64 * 1024 * 1024))
    body = _Body()
    inflated = 0

    def sink(data: bytes) -> None:
        nonlocal inflated
        inflated += len(data)

    cap = 1024 * 1024
    reader = BodyReader(Clock(), sink, None, max_bytes=cap)
    BoundedGzipDecoder(body).deliverBody(reader)
    body.protocol.dataReceived(bomb)
    assert outcome(reader.finished).check(BodyTooLarge)
    assert inflated <= cap and reader.size <= cap + INFLATE_PIECE
    assert body.stopped == 1


def test_corrupt_gzip_fails_the_body() -> None:
    """Bytes that are not gzip fail the body (and abort), they do not raise into Twisted."""
    body = _Body()
    reader = BodyReader(Clock(), lambda data: None, None)
    BoundedGzipDecoder(body).deliverBody(reader)
    body.protocol.dataReceived(b"this is not gzip at all")
    failure = outcome(reader.finished)
    assert "gzip encoding is corrupt" in str(failure.value) and body.stopped == 1
    body.protocol.connectionLost(Failure(ResponseFailed([])))  # the abort's echo is ignored


def test_one_timer_also_keeps_the_deadline() -> None:
    """A deadline (a clock time) ends a body that keeps sending, with DeadlinePassed."""
    clock, transport = Clock(), FakeTransport()
    r = BodyReader(clock, lambda data: None, 5.0, "answer", deadline=12.0)
    r.makeConnection(transport)
    for _ in range(2):
        clock.advance(4)
        r.dataReceived(b"x")
        assert len(clock.getDelayedCalls()) == 1
    clock.advance(4)
    assert outcome(r.finished).check(DeadlinePassed) and clock.seconds() == 12
    assert transport.stopped == 1
