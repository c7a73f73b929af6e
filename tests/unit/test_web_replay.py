"""Replaying what a client missed: ``Last-Event-ID`` after a reload or a dropped connection."""

from __future__ import annotations

from typing import Any

from twisted.internet import task

from ai_tools.web.event_hub import EventHub
from ai_tools.web.limits import HttpLimits
from ai_tools.web.replay import ReplayBuffer, first_event_id
from ai_tools.web.sse import Frame, format_event
from tests.unit.test_web_sse import Stream
from tests.unit.web_fakes import ApiHarness, FakeRequest


def frame(event_id: int, size: int = 10) -> Frame:
    return Frame("iteration", frozenset({"pip"}), format_event(event_id, "iteration",
                                                               {"x": "y" * size}), event_id)


def test_ids_of_a_new_run_start_above_the_previous_runs() -> None:
    """A run that started at t and sent fewer than 1000 events per ms since: the next run,
    started later, begins above its last id."""
    first = first_event_id(1_764_000_000.0)
    after_an_hour = first + 1000 * 3600 * 1000 - 1  # a million events a second for an hour
    assert first_event_id(1_764_000_000.0 + 3600.001) > after_an_hour
    assert first_event_id(7_000_000_000.0) < 2**53  # exact in JavaScript until 2191+


def test_the_buffer_keeps_the_newest_within_its_count_and_bytes() -> None:
    buffer = ReplayBuffer(max_events=5, max_bytes=10_000, start_id=100)
    for i in range(101, 111):
        buffer.add(frame(i))
    assert len(buffer) == 5 and buffer.newest_id == 110
    small = ReplayBuffer(max_events=1000, max_bytes=1000, start_id=0)
    for i in range(1, 101):
        small.add(frame(i, size=100))
    assert small.bytes <= 1000 and len(small) < 10
    assert small.after(100).frames == ()


def test_after_an_id_still_kept_replays_exactly_what_followed() -> None:
    buffer = ReplayBuffer(max_events=50, max_bytes=100_000, start_id=1000)
    for i in range(1001, 1031):
        buffer.add(frame(i))
    catchup = buffer.after(1020)
    assert [f.id for f in catchup.frames] == list(range(1021, 1031))
    assert catchup.gap is None and catchup.notice(1020) is None
    assert buffer.after(1030).frames == () and buffer.after(1030).gap is None
    assert buffer.after(1000).gap is None  # saw none of this run's events, all are kept


def test_a_gap_larger_than_the_buffer_is_said() -> None:
    buffer = ReplayBuffer(max_events=10, max_bytes=100_000, start_id=1000)
    for i in range(1001, 1031):
        buffer.add(frame(i))
    catchup = buffer.after(1005)
    assert catchup.gap == "too_old"
    assert [f.id for f in catchup.frames] == list(range(1021, 1031))
    assert catchup.notice(1005) == {"last_event_id": 1005, "oldest_kept": 1021,
                                    "reason": "too_old"}


def test_an_id_of_a_previous_run_is_a_restart() -> None:
    buffer = ReplayBuffer(max_events=10, max_bytes=100_000, start_id=5000)
    buffer.add(frame(5001))
    assert buffer.after(4000).gap == "restarted"
    assert [f.id for f in buffer.after(4000).frames] == [5001]
    assert buffer.after(9999).gap == "restarted"  # an id this run never gave


def hub_with(limits: HttpLimits) -> tuple[EventHub, ApiHarness]:
    api = ApiHarness()
    clock = task.Clock()
    clock.advance(1_764_000_000)
    events = EventHub(api.service, api.world, clock, limits, keepalive=15)
    events.start()
    return events, api


def ids(request: FakeRequest) -> list[Any]:
    return [e.get("id") for e in request.events()]


def test_a_client_that_reconnects_gets_what_it_missed_through_its_filters() -> None:
    """Events published while nobody listened come back after Last-Event-ID, filtered."""
    events, api = hub_with(HttpLimits())
    first = FakeRequest()
    events.open(first, None, None)
    api.service.publish("pip", {"type": "iteration", "n": 1})
    seen = int(first.events()[-1]["id"])
    first.finish()  # the connection drops
    api.service.publish("pip", {"type": "tool_call", "n": 2})
    api.service.publish("mason", {"type": "tool_call", "n": 3})
    api.service.publish("pip", {"type": "termination", "n": 4})
    back = FakeRequest()
    events.open(back, "pip", None, last_id=seen)
    assert [e["data"]["n"] for e in back.events()] == [2, 4]
    assert [int(i) for i in ids(back)] == [seen + 1, seen + 3]
    api.service.publish("pip", {"type": "tick", "n": 5})  # then live
    assert back.events()[-1]["data"]["n"] == 5


def test_a_client_further_behind_than_the_buffer_is_told_first() -> None:
    events, api = hub_with(HttpLimits(replay_events=20))
    start = events.last_id
    for n in range(100):
        api.service.publish("pip", {"type": "iteration", "n": n})
    back = FakeRequest()
    events.open(back, None, None, last_id=start + 10)
    got = back.events()
    assert got[0]["event"] == "gap" and "id" not in got[0]
    assert got[0]["data"] == {"last_event_id": start + 10, "oldest_kept": start + 81,
                              "reason": "too_old"}
    assert [e["data"]["n"] for e in got[1:]] == list(range(80, 100))


def test_a_client_of_a_previous_run_is_told_the_service_restarted() -> None:
    events, api = hub_with(HttpLimits())
    api.service.publish("pip", {"type": "iteration"})
    back = FakeRequest()
    events.open(back, None, None, last_id=first_event_id(1_763_000_000) + 5)
    got = back.events()
    assert got[0]["event"] == "gap" and got[0]["data"]["reason"] == "restarted"
    assert got[1]["event"] == "iteration"


def test_last_event_id_over_http() -> None:
    """The header (what EventSource sends) and the query parameter; junk is a 400."""
    api = ApiHarness()
    api.service.publish("pip", {"type": "iteration", "n": 1})
    api.service.publish("pip", {"type": "iteration", "n": 2})
    newest = api.resource.hub.last_id
    by_query = Stream(api, f"?last_event_id={newest - 1}")
    assert [e["data"]["n"] for e in by_query.events()] == [2]
    by_header = Stream(api, headers={"Last-Event-ID": str(newest - 2)})
    assert [e["data"]["n"] for e in by_header.events()] == [1, 2]
    bad = api.call("GET", "/events", headers={"Last-Event-ID": "abc"})
    assert bad.code == 400 and bad.json["field"] == "Last-Event-ID"
    assert api.call("GET", "/events?last_event_id=-3").code == 400
