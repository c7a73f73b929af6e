"""The event streams as a whole: one encoding per event, caps, byte budgets, stalled readers."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import task

from ai_tools.web import event_hub
from ai_tools.web.errors import ApiError
from ai_tools.web.event_hub import EventHub
from ai_tools.web.limits import HttpLimits
from ai_tools.web.sse import format_event
from tests.unit.test_web_sse import Stream
from tests.unit.web_fakes import ApiHarness, FakeRequest


class Counting:
    """Wraps ``format_event`` and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any) -> bytes:
        self.calls += 1
        return format_event(*args)


def hub(**limits: Any) -> tuple[EventHub, task.Clock, ApiHarness]:
    api = ApiHarness()
    clock = task.Clock()
    events = EventHub(api.service, api.world, clock, HttpLimits(**limits), keepalive=15)
    events.start()
    return events, clock, api


def test_each_event_is_encoded_once_for_every_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """20 clients: one encoding per event, and every client gets the same events."""
    counting = Counting()
    monkeypatch.setattr(event_hub, "format_event", counting)
    api = ApiHarness()
    streams = [Stream(api) for _ in range(20)]
    for i in range(10):
        api.service.publish("pip", {"type": "iteration", "iteration": i})
    api.call("POST", "/messages", body={"character": "char:bob", "text": "one"})
    api.call("POST", "/messages", body={"character": "char:alice", "text": "two"})
    encodings = counting.calls
    received = [[(e["id"], e["event"]) for e in s.events()] for s in streams]
    kinds = [kind for _, kind in received[0]]
    assert kinds.count("iteration") == 10 and kinds.count("world_message") == 2
    assert all(r == received[0] for r in received)
    assert encodings == len(received[0])  # (Pip's tick after "one" adds its own events)
    ids = [int(i) for i, _ in received[0]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_every_event_is_encoded_once_even_with_no_stream(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Events are kept for replay whoever listens: one encoding each, none per stream."""
    counting = Counting()
    monkeypatch.setattr(event_hub, "format_event", counting)
    api = ApiHarness()
    for _ in range(50):
        api.service.publish("pip", {"type": "iteration"})
    assert counting.calls == 50
    streams = [Stream(api, "?types=termination") for _ in range(5)]
    api.service.publish("pip", {"type": "termination"})
    assert counting.calls == 51
    assert all([e["event"] for e in s.events()] == ["termination"] for s in streams)


def test_streams_are_capped_in_total() -> None:
    """Past max_streams a new stream gets 503 (JSON, Retry-After); a closed one frees a place."""
    api = ApiHarness(limits=HttpLimits(max_streams=3))
    streams = [Stream(api) for _ in range(3)]
    refused = api.call("GET", "/events")
    assert refused.code == 503
    assert "too many event streams" in refused.json["error"]
    assert refused.header("retry-after") == "10"
    assert len(api.resource.streams) == 3
    streams[0].close()
    assert Stream(api).response.code == 200


def test_streams_are_capped_per_address_beyond_loopback() -> None:
    """One remote address gets max_streams_per_address; loopback only counts in the total."""
    events, _, _ = hub(max_streams=100, max_streams_per_address=2)
    remote = [events.open(FakeRequest("10.0.0.7"), None, None) for _ in range(2)]
    with pytest.raises(ApiError) as refused:
        events.open(FakeRequest("10.0.0.7"), None, None)
    assert refused.value.status == 503 and "10.0.0.7" in refused.value.message
    events.open(FakeRequest("10.0.0.8"), None, None)  # another address
    for _ in range(5):
        events.open(FakeRequest("127.0.0.1"), None, None)
    remote[0].request.finish()  # a client leaves: its address has a place again
    events.open(FakeRequest("10.0.0.7"), None, None)
    assert len(events.streams) == 2 + 1 + 5


def test_a_paused_stream_holds_at_most_its_byte_budget() -> None:
    """300 clients that never read, 800 events of ~4 KB: each holds <= stream_buffer bytes,
    and learns how many it missed when it reads again."""
    budget = 64 * 1024
    events, _, api = hub(max_streams=300, stream_buffer=budget)
    requests = [FakeRequest() for _ in range(300)]
    streams = [events.open(r, None, None) for r in requests]
    for stream in streams:
        stream.pauseProducing()
    for i in range(800):
        api.service.publish("pip", {"type": "tool_result", "n": i, "result": "x" * 3900})
    assert all(s.buffered <= budget for s in streams)
    assert all(len(r.written) == 1 for r in requests)  # only the opening comment
    held = {id(f) for s in streams for f in s._queue}
    assert len(held) <= budget // 3900  # the same frames, shared, not 300 copies
    streams[0].resumeProducing()
    got = requests[0].events()
    assert got[0]["event"] == "dropped"
    assert got[0]["data"]["missed"] + len(got) - 1 == 800
    assert got[-1]["data"]["n"] == 799


def test_a_reader_that_stalls_is_cut_off_and_forgotten() -> None:
    """Paused past stream_stall_timeout: the connection is aborted, the stream dropped."""
    events, clock, api = hub(stream_stall_timeout=60)
    request, reading = FakeRequest(), FakeRequest()
    stalled = events.open(request, None, None)
    events.open(reading, None, None)
    stalled.pauseProducing()
    api.service.publish("pip", {"type": "iteration"})
    clock.advance(45)
    assert not request.transport.aborted
    clock.advance(15)
    assert request.transport.aborted and stalled.closed
    assert len(events.streams) == 1
    assert b"keep-alive" in b"".join(reading.written)  # the other one was kept alive


def test_an_oversized_event_is_sent_as_a_notice() -> None:
    """An event over max_event_bytes reaches clients as a short notice of its size."""
    events, _, api = hub(max_event_bytes=2000)
    request = FakeRequest()
    events.open(request, None, None)
    api.service.publish("pip", {"type": "tool_result", "result": "y" * 10_000})
    api.service.publish("pip", {"type": "tool_result", "result": "small"})
    big, small = request.events()
    assert big["data"]["omitted"] is True and big["data"]["bytes"] > 10_000
    assert big["data"]["assistant"] == "pip"
    assert small["data"]["result"] == "small"
    assert all(len(chunk) <= 2000 for chunk in request.written)


def test_stop_closes_every_stream_and_unsubscribes() -> None:
    """Stopping the hub ends the streams and removes its two observers."""
    events, clock, api = hub()
    observers = len(api.service._observers)
    requests = [FakeRequest() for _ in range(3)]
    for r in requests:
        events.open(r, None, None)
    events.stop()
    assert all(r.finished for r in requests)
    assert events.streams == set()
    assert len(api.service._observers) == observers - 1
    assert clock.getDelayedCalls() == []
