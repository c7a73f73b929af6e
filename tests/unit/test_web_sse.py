"""The SSE event stream: order, filters, keep-alives, flow control, clean unsubscribe."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.internet.protocol import Protocol

from ai_tools.web.sse import EventStream, Frame, format_comment, format_event
from tests.unit.web_fakes import ApiHarness, FakeRequest, parse, result_of


class Reader(Protocol):
    """Collects a response body; ``transport.stopProducing()`` is how a client hangs up."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.done: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.chunks.append(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.done.callback(None)


class Stream:
    """An open /events response in the harness."""

    def __init__(self, api: ApiHarness, query: str = "",
                 headers: dict[str, str] | None = None) -> None:
        self.api = api
        d = api.start("GET", "/events" + query, unbuffered=True, headers=headers)
        api.pump()
        self.response = result_of(d)
        self.reader = Reader()
        self.response.deliverBody(self.reader)
        self.chunks = self.reader.chunks
        self.done = self.reader.done
        api.pump()

    def frames(self) -> list[dict[str, Any]]:
        self.api.pump()
        return parse(b"".join(self.chunks))

    def events(self) -> list[dict[str, Any]]:
        return [f for f in self.frames() if "event" in f]

    def close(self) -> None:
        """The client goes away."""
        transport: Any = self.reader.transport
        transport.stopProducing()
        self.api.pump()


@pytest.fixture(name="api")
def api_fixture() -> ApiHarness:
    """The harness, no token."""
    return ApiHarness()


def test_headers_and_opening_comment(api: ApiHarness) -> None:
    """The stream is text/event-stream, not cached, and starts with a comment."""
    stream = Stream(api)
    assert stream.response.code == 200
    content_type = stream.response.headers.getRawHeaders(b"content-type")[0]
    assert content_type.startswith(b"text/event-stream")
    assert stream.response.headers.getRawHeaders(b"cache-control") == [b"no-cache"]
    assert stream.frames()[0] == {"retry": "3000", "comment": "connected"}


def test_loop_and_world_events_arrive_in_order(api: ApiHarness) -> None:
    """A world message then the loop steps, in the order they happened, with rising ids."""
    stream = Stream(api)
    api.call("POST", "/assistants/pip/disable")
    api.call("POST", "/messages", body={"character": "char:bob", "text": "hello Pip"})
    steps: list[dict[str, Any]] = [
        {"type": "iteration", "iteration": 1},
        {"type": "tool_call", "tool": "say", "iteration": 1},
        {"type": "tool_result", "tool": "say", "duration_ms": 1.5, "from_cache": False},
        {"type": "signal", "tool_name": "done", "arguments": {}},
        {"type": "termination", "reason": "terminal_tool", "iterations": 1},
    ]
    for step in steps:
        api.service.publish("pip", dict(step))
    events = stream.events()
    kinds = [e["event"] for e in events]
    assert kinds == ["disabled", "world_message", "iteration", "tool_call", "tool_result",
                     "signal", "termination"]
    ids = [int(e["id"]) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    world = events[1]["data"]
    assert world["text"] == "hello Pip" and world["assistants"] == ["pip"]
    assert world["line"] == 'Bob says, "hello Pip"'
    result = events[4]["data"]
    assert result["assistant"] == "pip"
    assert result["duration_ms"] == 1.5 and result["from_cache"] is False


def test_filter_by_assistant(api: ApiHarness) -> None:
    """?assistant= keeps that assistant's loop events and the world messages it hears or says."""
    stream = Stream(api, "?assistant=mason")
    api.service.publish("pip", {"type": "iteration"})
    api.service.publish("mason", {"type": "iteration"})
    api.call("POST", "/messages", body={"character": "char:bob", "text": "for pip"})
    api.call("POST", "/messages", body={"character": "char:alice", "text": "shed?",
                                        "kind": "page", "target": "mason"})
    assert api.world is not None  # Mason answers through the world, as its tools do
    api.world.message_character("char:mason", "char:alice", "on my way", kind="page")
    events = [e for e in stream.events() if e["event"] in ("iteration", "world_message")]
    assert [(e["event"], e["data"].get("text")) for e in events] == [
        ("iteration", None), ("world_message", "shed?"), ("world_message", "on my way")]
    assert all(e["data"].get("assistant", "mason") == "mason" for e in events)
    assert events[2]["data"]["from_assistant"] == "mason"


def test_filter_by_types(api: ApiHarness) -> None:
    """?types= keeps only the listed event types (world messages are 'world_message')."""
    stream = Stream(api, "?types=termination,world_message")
    api.service.publish("pip", {"type": "iteration"})
    api.service.publish("pip", {"type": "termination", "reason": "noop"})
    api.call("POST", "/messages", body={"character": "char:bob", "text": "hi"})
    assert [e["event"] for e in stream.events()] == ["termination", "world_message"]
    only_loop = Stream(api, "?types=iteration")
    api.call("POST", "/messages", body={"character": "char:bob", "text": "hi"})
    api.service.publish("pip", {"type": "iteration"})
    assert [e["event"] for e in only_loop.events()] == ["iteration"]


def test_keep_alive_comments(api: ApiHarness) -> None:
    """A comment every 15 s of the clock keeps the connection alive."""
    stream = Stream(api)
    api.clock.advance(15)
    api.clock.advance(15)
    comments = [f["comment"] for f in stream.frames() if "comment" in f]
    assert comments == ["connected", "keep-alive", "keep-alive"]


def test_disconnect_unsubscribes_everything(api: ApiHarness) -> None:
    """A client that leaves is forgotten; the last one to leave stops the streams' timer."""
    observers = len(api.service._observers)
    assert api.world is not None
    world_observers = len(api.world._observers)
    calls = len(api.clock.getDelayedCalls())
    stream, other = Stream(api), Stream(api)
    # one observer of the service and of the world for every stream, one timer
    assert len(api.service._observers) == observers
    assert len(api.world._observers) == world_observers
    assert len(api.resource.streams) == 2
    assert len(api.clock.getDelayedCalls()) == calls + 1
    stream.close()
    assert len(api.resource.streams) == 1
    other.close()
    assert api.resource.streams == set()
    assert len(api.clock.getDelayedCalls()) == calls
    api.service.publish("pip", {"type": "iteration"})  # nothing to deliver to: no error
    api.clock.advance(30)
    assert api.call("GET", "/").code == 200


def test_shutdown_ends_open_streams(api: ApiHarness) -> None:
    """Stopping the API finishes every stream: clients see the end of the response."""
    stream = Stream(api)
    assert not stream.done.called
    api.resource.shutdown()
    api.pump()
    assert stream.done.called
    assert api.resource.streams == set()
    assert len(api.service._observers) == 0
    assert api.world is not None and len(api.world._observers) == 0


# -- EventStream alone -------------------------------------------------------------------


def frame(n: int, size: int = 0, kind: str = "tick") -> Frame:
    """An encoded event ``{"n": n}`` (padded to about ``size`` bytes)."""
    data = {"n": n, "pad": "x" * size} if size else {"n": n}
    return Frame(kind, frozenset({"pip"}), format_event(n, kind, data))


def test_a_slow_client_gets_queued_frames_then_a_drop_count() -> None:
    """Paused: frames wait within the byte budget (the oldest dropped past it); resumed:
    'dropped' with the count, then the frames that waited."""
    request = FakeRequest()
    frames = [frame(i, 100) for i in range(5)]
    budget = 2 * len(frames[0].data) + 10  # two frames fit, not three
    stream = EventStream(request, task.Clock(), buffer_limit=budget)
    stream.start()
    assert request.producer is stream
    stream.pauseProducing()
    for f in frames:
        stream.send(f)
        assert stream.buffered <= budget
    assert request.events() == []
    stream.resumeProducing()
    events = request.events()
    assert [e["event"] for e in events] == ["dropped", "tick", "tick"]
    assert events[0]["data"] == {"missed": 3} and "id" not in events[0]
    assert [e["data"]["n"] for e in events[1:]] == [3, 4]
    assert stream.dropped == 3 and stream.buffered == 0


def test_one_huge_frame_is_dropped_not_kept() -> None:
    """A frame larger than the whole budget never stays queued."""
    request = FakeRequest()
    stream = EventStream(request, task.Clock(), buffer_limit=50)
    stream.start()
    stream.pauseProducing()
    stream.send(frame(1, 500))
    assert stream.buffered == 0 and stream.dropped == 1


def test_keep_alive_waits_while_paused() -> None:
    """No keep-alive is pushed into a paused connection."""
    request = FakeRequest()
    stream = EventStream(request, task.Clock())
    stream.start()
    stream.pauseProducing()
    stream.keep_alive()
    assert b"keep-alive" not in b"".join(request.written)
    stream.resumeProducing()
    stream.keep_alive()
    assert b"keep-alive" in b"".join(request.written)


def test_stalled_counts_from_the_pause() -> None:
    """A stream is stalled once paused for the limit; reading again resets it."""
    clock = task.Clock()
    stream = EventStream(FakeRequest(), clock)
    stream.start()
    assert not stream.stalled(clock.seconds(), 60)
    stream.pauseProducing()
    clock.advance(59)
    stream.pauseProducing()  # a second pause does not restart the count
    assert not stream.stalled(clock.seconds(), 60)
    clock.advance(1)
    assert stream.stalled(clock.seconds(), 60)
    stream.resumeProducing()
    assert not stream.stalled(clock.seconds(), 60)


def test_close_runs_callbacks_once_and_stops_sending() -> None:
    """close() finishes the request, runs on_close once; later sends are ignored."""
    request = FakeRequest()
    stream = EventStream(request, task.Clock())
    calls: list[str] = []
    stream.on_close(lambda: calls.append("a"))
    stream.start()
    stream.close()
    stream.close()
    stream.stopProducing()
    assert request.finished and calls == ["a"]
    stream.send(frame(1))
    assert request.events() == []
    stream.on_close(lambda: calls.append("late"))  # already closed: runs at once
    assert calls == ["a", "late"]


def test_a_failing_write_closes_the_stream() -> None:
    """A write that raises ends the stream instead of raising into the publisher."""
    request = FakeRequest()
    stream = EventStream(request, task.Clock())
    stream.start()

    def broken(data: bytes) -> None:
        raise RuntimeError("gone")

    request.write = broken  # type: ignore[method-assign]
    stream.send(frame(1))
    assert stream.closed


def test_frames_are_well_formed() -> None:
    """Event names lose newlines; odd values still encode; comments stay one line."""
    encoded = format_event(3, "bad\nname", {"when": {1, 2}, "obj": object()})
    text = encoded.decode()
    assert text.startswith("id: 3\nevent: badname\ndata: {")
    assert text.endswith("\n\n") and text.count("\n") == 4
    assert format_event(None, "dropped", {}).startswith(b"event: dropped\n")
    assert format_comment("a\nb") == b": a b\n\n"
