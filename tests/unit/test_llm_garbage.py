"""A finished model request leaves no reference cycle behind.

A service keeps a thousand requests in flight; whatever a finished request
leaves in a reference cycle waits for the garbage collector (surviving into
older generations and making every collection walk more) instead of being
freed by reference counting at once.  Each test runs requests with the
collector disabled, drops them, and asks the collector (``DEBUG_SAVEALL``)
what it would have had to free: none of it may be ours.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.errors import LLMProtocolError, LLMServerError, LLMTimeout
from ai_tools.llm.body import BodyReader, BytesProducer
from ai_tools.llm.profile import Timeouts
from ai_tools.testing import Fault, Turn
from tests.unit.garbage import cyclic_garbage
from tests.unit.test_llm_client import USER, Harness


class _Listener:
    """An on_event callback owner (it must not be kept alive by a finished request)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_event(self, event: Any) -> None:
        self.events.append(event)


def ours(garbage: list[Any]) -> list[str]:
    """The garbage objects of our own types (and our test listener), by type name.

    twisted.web's own request objects form cycles that hold the request body's
    producer (a :class:`~ai_tools.llm.body.BytesProducer`): that one is not ours
    to free.
    """
    return sorted(
        f"{type(o).__module__}.{type(o).__qualname__}"
        for o in garbage
        if (type(o).__module__.startswith("ai_tools.") and not isinstance(o, BytesProducer))
        or isinstance(o, _Listener)
    )


def drive(h: Harness, d: defer.Deferred[Any], limit: float = 120.0) -> Any:
    """Pump until ``d`` fires; its result or Failure (never raised: a raised failure's
    traceback would itself make a cycle through this frame)."""
    results: list[Any] = []
    d.addBoth(results.append)
    elapsed = 0.0
    h.stub.flush()
    while not results and elapsed < limit:
        h.clock.advance(0.05)
        h.stub.flush()
        elapsed += 0.05
    assert results, f"no result within {limit}s of clock time"
    return results.pop()


def _outcome(h: Harness, **complete_kw: Any) -> str:
    """Run one request with a listener; a short description of its outcome."""
    listener = _Listener()
    result = drive(h, h.client.complete(USER, on_event=listener.on_event, **complete_kw))
    if isinstance(result, Failure):
        outcome = f"failed {type(result.value).__name__}"
    else:
        outcome = f"answered {result.content!r} with {len(listener.events)} events"
    # A raised error's traceback holds this frame: what it still held would be a cycle
    # of the test's making.
    del result, listener
    return outcome


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_leaves_no_cycle(stream: bool) -> None:
    """A plain or streamed answer: the call, its exchange and reader are freed at once."""
    h = Harness([Turn(text="Hi there.", chunk_chars=3)] * 3, stream=stream)
    with cyclic_garbage() as garbage:
        for _ in range(3):
            assert _outcome(h).startswith("answered 'Hi there.'")
    assert ours(garbage) == []
    assert len(h.requests) == 3


def test_a_tool_call_answer_leaves_no_cycle() -> None:
    """A streamed tool call (the benchmark's answer) leaves nothing of ours behind."""
    h = Harness([Turn(tool_calls=[{"name": "look", "arguments": {}}])], stream=True)
    with cyclic_garbage() as garbage:
        listener = _Listener()
        response = drive(h, h.client.complete(USER, on_event=listener.on_event))
        assert response.tool_calls[0].name == "look"
        del response, listener
    assert ours(garbage) == []


def test_retries_leave_no_cycle() -> None:
    """Two failed attempts then an answer: no attempt of the call lives on."""
    h = Harness([Fault.server_error(503), Fault.rate_limited(retry_after=1), Turn(text="ok")],
                stream=False)
    with cyclic_garbage() as garbage:
        assert _outcome(h).startswith("answered 'ok'")
    assert ours(garbage) == []
    assert len(h.requests) == 3


@pytest.mark.parametrize(
    ("script", "profile", "error"),
    [
        ([Fault.http_error(400)], {}, "LLMRequestError"),
        ([Fault.malformed_json()], {"stream": False}, LLMProtocolError.__name__),
        ([Fault.malformed_json()], {"stream": True}, LLMProtocolError.__name__),
        ([Turn(text="Once upon a time", chunk_chars=5,
               fault=Fault.stream_error("boom", 3))], {}, LLMServerError.__name__),
        ([Turn(text="abcdef", chunk_chars=2, fault=Fault.stall(after_chunks=2))],
         {"timeouts": Timeouts(idle=1.0)}, LLMTimeout.__name__),
    ],
)
def test_a_failed_request_leaves_no_cycle(script: list[Any], profile: dict[str, Any],
                                           error: str) -> None:
    """Errors raised while reading (with tracebacks) leave nothing of ours in a cycle."""
    h = Harness(script, **profile)
    with cyclic_garbage() as garbage:
        assert _outcome(h) == f"failed {error}"
    assert ours(garbage) == []


def test_a_cancelled_stream_leaves_no_cycle() -> None:
    """Cancelling mid-stream aborts the connection and frees the request at once."""
    h = Harness([Turn(text="word " * 40, chunk_chars=5, chunk_latency=0.5)])
    with cyclic_garbage() as garbage:
        listener = _Listener()
        d = h.client.complete(USER, on_event=listener.on_event)
        h.pump(2)
        assert listener.events and not d.called
        d.cancel()
        assert isinstance(drive(h, d).value, defer.CancelledError)
        h.pump(1)
        del d, listener
    assert h.requests[0].disconnected
    assert ours(garbage) == []


def test_the_probe_sees_a_cycle() -> None:
    """The check can fail: a reader whose sink is its owner's method, left undone, is found."""

    class Owner:
        def __init__(self) -> None:
            self.reader = BodyReader(Harness([]).clock, self.sink, None)

        def sink(self, data: bytes) -> None:
            """Never called."""

    with cyclic_garbage() as garbage:
        Owner()
    assert "ai_tools.llm.body.BodyReader" in ours(garbage)


def test_a_finished_reader_drops_its_sink() -> None:
    """Once done (whichever way), the reader no longer holds its owner's sink."""
    for end in ("connectionLost", "stop", "fail", "cancel"):
        seen: list[bytes] = []
        reader = BodyReader(Harness([]).clock, seen.append, None)
        reader.dataReceived(b"a")
        if end == "connectionLost":
            from twisted.web.client import ResponseDone

            reader.connectionLost(Failure(ResponseDone()))
        elif end == "stop":
            reader.stop()
        elif end == "fail":
            reader.fail(ValueError("x"))
            reader.finished.addErrback(lambda f: None)
        else:
            reader.finished.cancel()
            reader.finished.addErrback(lambda f: None)
        reader.dataReceived(b"b")
        assert seen == [b"a"], end
        assert getattr(reader._sink, "__self__", None) is not seen, end
