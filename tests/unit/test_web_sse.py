"""The SSE event stream: order, filters, keep-alives, flow control, clean unsubscribe."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.internet.protocol import Protocol

from ai_tools.web.sse import EventStream, format_comment, format_event
from tests.unit.web_fakes import ApiHarness, result_of


def parse(raw: bytes) -> list[dict[str, Any]]:
    """SSE frames as dicts (``comment`` for ``:`` lines)."""
    frames = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        frame: dict[str, Any] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "":
                frame["comment"] = value
            elif key == "data":
                frame["data"] = json.loads(value)
            else:
                frame[key] = value
        frames.append(frame)
    return frames


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

    def __init__(self, api: ApiHarness, query: str = "") -> None:
        self.api = api
        d = api.start("GET", "/events" + query, unbuffered=True)
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
    api.call("POST", "/messages", body={"character": "char:mason", "text": "on my way",
                                        "kind": "page", "target": "char:alice"})
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
    """A client that leaves removes its observers and its timer."""
    observers = len(api.service._observers)
    assert api.world is not None
    world_observers = len(api.world._observers)
    calls = len(api.clock.getDelayedCalls())
    stream = Stream(api)
    assert len(api.service._observers) == observers + 1
    assert len(api.world._observers) == world_observers + 1
    assert len(api.resource.streams) == 1
    assert len(api.clock.getDelayedCalls()) == calls + 1
    stream.close()
    assert len(api.service._observers) == observers
    assert len(api.world._observers) == world_observers
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


# -- EventStream alone -------------------------------------------------------------------


class FakeRequest:
    """Just what EventStream uses of a request."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.code: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.producer: Any = None
        self.finished = False
        self._finish: defer.Deferred[None] = defer.Deferred()

    def setResponseCode(self, code: int) -> None:
        self.code = code

    def setHeader(self, name: bytes, value: bytes) -> None:
        self.headers[name] = value

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def notifyFinish(self) -> defer.Deferred[None]:
        return self._finish

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def finish(self) -> None:
        self.finished = True
        self._finish.callback(None)

    def events(self) -> list[dict[str, Any]]:
        return [f for f in parse(b"".join(self.written)) if "event" in f]


def test_a_slow_client_gets_queued_frames_then_a_drop_count() -> None:
    """Paused: frames wait (the oldest dropped past max_queue); resumed: 'dropped', then them."""
    request = FakeRequest()
    stream = EventStream(request, task.Clock(), keepalive=0, max_queue=2)
    stream.start()
    assert request.producer is stream
    stream.pauseProducing()
    for i in range(5):
        stream.send("tick", {"n": i})
    assert request.events() == []
    stream.resumeProducing()
    events = request.events()
    assert [e["event"] for e in events] == ["dropped", "tick", "tick"]
    assert events[0]["data"] == {"missed": 3}
    assert [e["data"]["n"] for e in events[1:]] == [3, 4]
    assert stream.dropped == 3


def test_keep_alive_waits_while_paused() -> None:
    """No keep-alive is pushed into a paused connection."""
    request = FakeRequest()
    clock = task.Clock()
    stream = EventStream(request, clock, keepalive=5)
    stream.start()
    stream.pauseProducing()
    clock.advance(5)
    assert b"keep-alive" not in b"".join(request.written)
    stream.resumeProducing()
    clock.advance(5)
    assert b"keep-alive" in b"".join(request.written)


def test_close_runs_callbacks_once_and_stops_sending() -> None:
    """close() finishes the request, runs on_close once; later sends are ignored."""
    request = FakeRequest()
    clock = task.Clock()
    stream = EventStream(request, clock)
    calls: list[str] = []
    stream.on_close(lambda: calls.append("a"))
    stream.start()
    stream.close()
    stream.close()
    stream.stopProducing()
    assert request.finished and calls == ["a"]
    stream.send("tick", {})
    assert request.events() == []
    assert clock.getDelayedCalls() == []
    stream.on_close(lambda: calls.append("late"))  # already closed: runs at once
    assert calls == ["a", "late"]


def test_a_failing_write_closes_the_stream() -> None:
    """A write that raises ends the stream instead of raising into the publisher."""
    request = FakeRequest()
    stream = EventStream(request, task.Clock(), keepalive=0)
    stream.start()

    def broken(data: bytes) -> None:
        raise RuntimeError("gone")

    request.write = broken  # type: ignore[method-assign]
    stream.send("tick", {})
    assert stream.closed


def test_frames_are_well_formed() -> None:
    """Event names lose newlines; odd values still encode; comments stay one line."""
    frame = format_event(3, "bad\nname", {"when": {1, 2}, "obj": object()})
    text = frame.decode()
    assert text.startswith("id: 3\nevent: badname\ndata: {")
    assert text.endswith("\n\n") and text.count("\n") == 4
    assert format_comment("a\nb") == b": a b\n\n"
