"""Tests for ai_tools.service.scheduling: one timer, due times, no overlap, cap, fairness."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer, task
from twisted.logger import LogLevel, globalLogPublisher

from ai_tools.service.scheduling import TickScheduler


class Ticks:
    """A tick function recording starts; each tick waits until finished by the test."""

    def __init__(self, clock: task.Clock, sync: bool = False) -> None:
        self.clock = clock
        self.sync = sync
        self.started: list[tuple[float, str]] = []
        self.pending: dict[str, defer.Deferred[Any]] = {}
        self.overlaps = 0

    def __call__(self, name: str) -> Any:
        self.started.append((self.clock.seconds(), name))
        if self.sync:
            return name
        if name in self.pending:
            self.overlaps += 1
        d: defer.Deferred[Any] = defer.Deferred()
        self.pending[name] = d
        return d

    def finish(self, name: str, result: Any = "done") -> None:
        self.pending.pop(name).callback(result)

    def finish_all(self) -> None:
        for name in list(self.pending):
            self.finish(name)

    def names(self) -> list[str]:
        return [n for _, n in self.started]


def make(
    rates: dict[str, float] | None = None, sync: bool = False, **kw: Any
) -> tuple[task.Clock, Ticks, TickScheduler]:
    clock = task.Clock()
    ticks = Ticks(clock, sync=sync)
    rates = rates if rates is not None else {}
    kw.setdefault("stagger", False)
    sched = TickScheduler(clock=clock, tick=ticks, rate_of=lambda n: rates.get(n, 5.0), **kw)
    return clock, ticks, sched


@pytest.fixture
def errors() -> Any:
    """Collect critical/error log events emitted during the test."""
    seen: list[dict[str, Any]] = []

    def observer(event: dict[str, Any]) -> None:
        if event.get("log_level") in (LogLevel.error, LogLevel.critical):
            seen.append(event)

    globalLogPublisher.addObserver(observer)
    yield seen
    globalLogPublisher.removeObserver(observer)


def test_one_timer_for_many_assistants() -> None:
    """A thousand assistants cost one delayed call, not a thousand."""
    clock, _ticks, sched = make(sync=True)
    for i in range(1000):
        sched.add(f"a{i}")
    sched.start()
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(1)
    assert len(clock.getDelayedCalls()) == 1
    sched.stop()
    assert clock.getDelayedCalls() == []


def test_each_assistant_ticks_at_its_own_rate() -> None:
    """Due times follow each assistant's rate (5 s awake, 60 s asleep)."""
    clock, ticks, sched = make({"awake": 5.0, "asleep": 60.0}, sync=True)
    sched.add("awake", first_due=0)
    sched.add("asleep", first_due=0)
    sched.start()
    for _ in range(120):
        clock.advance(1)
    awake = [t for t, n in ticks.started if n == "awake"]
    asleep = [t for t, n in ticks.started if n == "asleep"]
    assert awake == [float(t) for t in range(0, 121, 5)]
    assert asleep == [0.0, 60.0, 120.0]


def test_period_counts_from_the_due_time_not_the_wake_up() -> None:
    """One late wake-up does not push every later tick back a whole interval."""
    clock, ticks, sched = make({"a": 5.0}, sync=True)
    sched.add("a", first_due=0.0)
    sched.start()
    clock.advance(4)
    clock.advance(1.3)  # the reactor was busy: the 5 s wake-up comes at 5.3
    clock.advance(0.7)
    for _ in range(10):
        clock.advance(1)
    assert [round(t, 3) for t, _ in ticks.started] == [0.0, 5.3, 10.0, 15.0]


def test_rate_change_applies_at_next_reschedule() -> None:
    """The rate is read when the next due time is computed."""
    rates = {"a": 5.0}
    clock, ticks, sched = make(rates, sync=True)
    sched.add("a", first_due=0)
    sched.start()
    rates["a"] = 60.0  # fell asleep during the first tick
    for _ in range(70):
        clock.advance(1)
    assert [t for t, _ in ticks.started] == [0.0, 5.0, 65.0]


def test_reschedule_moves_the_next_tick() -> None:
    """reschedule() applies a new rate at once (waking up from a 60 s sleep)."""
    rates = {"a": 60.0}
    clock, ticks, sched = make(rates, sync=True)
    sched.add("a", first_due=0)
    sched.start()
    clock.advance(1)
    rates["a"] = 5.0
    sched.reschedule("a")
    assert sched.due_at("a") == 6.0
    for _ in range(10):
        clock.advance(1)
    assert [t for t, _ in ticks.started] == [0.0, 6.0, 11.0]
    sched.reschedule("ghost")  # unknown: ignored


def test_never_starts_one_still_running() -> None:
    """A tick that outlasts its period is not started again until it ends."""
    clock, ticks, sched = make()
    sched.add("slow", first_due=0)
    sched.start()
    for _ in range(30):
        clock.advance(1)
    assert ticks.names() == ["slow"]
    assert ticks.overlaps == 0
    assert sched.is_running("slow")
    assert sched.due_at("slow") is None
    ticks.finish("slow")
    # Overran its 5 s period: due at once, started at the next reactor turn.
    clock.advance(0)
    assert ticks.names() == ["slow", "slow"]
    assert ticks.started[1][0] == 30.0


def test_concurrency_cap_and_fill_on_finish() -> None:
    """At most max_concurrent ticks run; a freed slot is filled without waiting."""
    clock, ticks, sched = make(max_concurrent=3)
    for i in range(10):
        sched.add(f"a{i}", first_due=0)
    sched.start()
    assert len(ticks.pending) == 3
    assert len(sched.running()) == 3
    clock.advance(0.5)
    assert len(ticks.pending) == 3
    ticks.finish("a0")
    clock.advance(0)
    assert len(ticks.pending) == 3
    assert ticks.names() == ["a0", "a1", "a2", "a3"]


def test_round_robin_nobody_starves() -> None:
    """With a cap of 2 and 6 always-due assistants, everyone runs before anyone repeats."""
    clock, ticks, sched = make({f"a{i}": 0.1 for i in range(6)}, max_concurrent=2)
    for i in range(6):
        sched.add(f"a{i}", first_due=0)
    sched.start()
    for _ in range(12):
        ticks.finish_all()
        clock.advance(1)
    names = ticks.names()
    for start in range(0, 18, 6):
        assert sorted(names[start : start + 6]) == [f"a{i}" for i in range(6)]


def test_pending_events_go_first() -> None:
    """notify() puts an assistant ahead of others that were due earlier."""
    clock, ticks, sched = make(max_concurrent=1)
    for i in range(3):
        sched.add(f"a{i}", first_due=float(i))
    sched.add("talked_to", first_due=100)
    clock.advance(5)
    sched.notify("talked_to")
    sched.start()
    assert ticks.names() == ["talked_to"]
    ticks.finish("talked_to")
    clock.advance(0)
    assert ticks.names() == ["talked_to", "a0"]


def test_notify_starts_at_next_reactor_turn() -> None:
    """A pending event does not wait for the next timer wake-up."""
    clock, ticks, sched = make(interval=10.0)
    sched.add("a", first_due=1000)
    sched.start()
    clock.advance(3)
    assert ticks.names() == []
    sched.notify("a")
    clock.advance(0)
    assert ticks.started == [(3.0, "a")]
    sched.notify("unknown")  # ignored


def test_notify_while_running_restarts_after() -> None:
    """An event arriving during a tick makes the assistant run again right after."""
    clock, ticks, sched = make({"a": 60.0})
    sched.add("a", first_due=0)
    sched.start()
    clock.advance(1)
    sched.notify("a")
    clock.advance(1)
    assert ticks.names() == ["a"]
    ticks.finish("a")
    clock.advance(0)
    assert ticks.names() == ["a", "a"]
    assert ticks.overlaps == 0


def test_remove_while_running_is_not_rescheduled() -> None:
    """A removed assistant's tick may finish but it never starts again."""
    clock, ticks, sched = make()
    sched.add("a", first_due=0)
    sched.start()
    sched.remove("a")
    assert "a" not in sched
    ticks.finish("a")
    for _ in range(20):
        clock.advance(1)
    assert ticks.names() == ["a"]
    sched.remove("a")  # twice: harmless


def test_readd_after_remove_is_not_confused_by_stale_entries() -> None:
    """Removing and adding the same name leaves exactly one schedule."""
    clock, ticks, sched = make(sync=True)
    sched.add("a", first_due=0)
    sched.remove("a")
    sched.add("a", first_due=0)
    sched.start()
    for _ in range(10):
        clock.advance(1)
    assert [t for t, _ in ticks.started] == [0.0, 5.0, 10.0]


def test_add_twice_is_refused() -> None:
    _clock, _ticks, sched = make()
    sched.add("a")
    with pytest.raises(ValueError, match="already scheduled"):
        sched.add("a")


def test_bad_settings_are_refused() -> None:
    clock = task.Clock()
    with pytest.raises(ValueError, match="interval"):
        TickScheduler(clock=clock, tick=lambda n: None, rate_of=lambda n: 5, interval=0)
    with pytest.raises(ValueError, match="max_concurrent"):
        TickScheduler(clock=clock, tick=lambda n: None, rate_of=lambda n: 5, max_concurrent=0)


def test_stagger_spreads_first_ticks_over_one_period() -> None:
    """Assistants added together fall due spread over their period, not all at once."""
    clock = task.Clock()
    sched = TickScheduler(clock=clock, tick=lambda n: None, rate_of=lambda n: 5.0)
    for i in range(100):
        sched.add(f"a{i}")
    dues = sorted(d for i in range(100) if (d := sched.due_at(f"a{i}")) is not None)
    assert dues[0] >= 0 and dues[-1] < 5.0
    per_second = [sum(1 for d in dues if s <= d < s + 1) for s in range(5)]
    assert all(15 <= n <= 25 for n in per_second), per_second


def test_a_raising_tick_function_does_not_kill_the_timer(errors: list[Any]) -> None:
    """An exception from the tick function is logged; the timer and the assistant go on."""
    clock = task.Clock()
    calls: list[float] = []

    def tick(name: str) -> None:
        calls.append(clock.seconds())
        raise RuntimeError("boom")

    sched = TickScheduler(clock=clock, tick=tick, rate_of=lambda n: 5.0, stagger=False)
    sched.add("a", first_due=0)
    sched.start()
    for _ in range(10):
        clock.advance(1)
    assert calls == [0.0, 5.0, 10.0]
    assert sched.started
    assert len(errors) == 3
    assert "boom" in str(errors[0].get("log_failure"))


def test_a_failing_tick_deferred_is_logged_and_rescheduled(errors: list[Any]) -> None:
    """An asynchronous failure is logged and the assistant is rescheduled."""
    clock, ticks, sched = make()
    sched.add("a", first_due=0)
    sched.start()
    ticks.pending.pop("a").errback(RuntimeError("async boom"))
    assert len(errors) == 1
    clock.advance(5)
    assert ticks.names() == ["a", "a"]


def test_a_failing_rate_function_falls_back(errors: list[Any]) -> None:
    """A broken rate_of is logged and a safe 60 s period used."""
    clock = task.Clock()

    def rate(name: str) -> float:
        raise KeyError(name)

    calls: list[float] = []
    sched = TickScheduler(
        clock=clock, tick=lambda n: calls.append(clock.seconds()), rate_of=rate, stagger=False
    )
    sched.add("a", first_due=0)
    sched.start()
    for _ in range(61):
        clock.advance(1)
    assert calls == [0.0, 60.0]
    assert errors


def test_run_now_returns_the_tick_result() -> None:
    """run_now runs at once (outside the timer) and reschedules from there."""
    _clock, ticks, sched = make()
    sched.add("a", first_due=100)
    d = sched.run_now("a")
    assert not d.called
    assert sched.is_running("a")
    ticks.finish("a", {"status": "ok"})
    assert d.result == {"status": "ok"}
    assert sched.due_at("a") == 5.0


def test_run_now_while_running_joins_the_tick_in_flight() -> None:
    """A second run_now while a tick runs starts nothing: it fires with that tick's outcome
    (failures too); a caller who cancels its wait leaves the tick alone."""
    clock = task.Clock()
    calls: list[defer.Deferred[str]] = []

    def tick(name: str) -> defer.Deferred[str]:
        calls.append(defer.Deferred())
        return calls[-1]

    sched = TickScheduler(clock=clock, tick=tick, rate_of=lambda n: 5.0)
    sched.add("a", first_due=100)
    d1 = sched.run_now("a")
    d2, d3 = sched.run_now("a"), sched.run_now("a")
    assert len(calls) == 1 and not d2.called
    d3.cancel()
    d3.addErrback(lambda f: f.trap(defer.CancelledError))
    assert sched.is_running("a")
    calls[0].callback("first")
    assert d1.result == "first" and d2.result == "first"
    assert not sched.is_running("a") and len(calls) == 1
    d4 = sched.run_now("a")  # the next one starts a tick of its own
    d5 = sched.run_now("a")
    calls[1].errback(RuntimeError("boom"))
    for d in (d4, d5):
        failures: list[Any] = []
        d.addErrback(failures.append)
        assert failures[0].check(RuntimeError)


def test_run_now_joins_a_tick_the_timer_started() -> None:
    """The timer started the tick (an event arrived): run_now gives that tick's outcome."""
    _clock, ticks, sched = make()
    sched.add("a", first_due=0)
    sched.start()
    assert sched.is_running("a")
    joined = sched.run_now("a")
    ticks.finish("a", {"status": "ran"})
    assert joined.result == {"status": "ran"}
    sched.stop()


def test_a_tick_re_added_while_running_hands_its_outcome_to_who_joined() -> None:
    _clock, ticks, sched = make()
    sched.add("a", first_due=100)
    sched.run_now("a")
    sched.remove("a")
    sched.add("a", first_due=100)  # its old tick still runs: the new entry waits for it
    joined = sched.run_now("a")
    ticks.finish("a", "old tick")
    assert joined.result == "old tick"


def test_run_now_unknown_assistant_still_calls_the_tick_function() -> None:
    """The tick function decides what an unknown name means (the service raises)."""
    clock = task.Clock()
    sched = TickScheduler(clock=clock, tick=lambda n: f"ran {n}", rate_of=lambda n: 5.0)
    assert sched.run_now("x").result == "ran x"


def test_cancel_running_and_when_idle() -> None:
    """Ticks in flight can be awaited and cancelled (service shutdown)."""
    _clock, ticks, sched = make()
    sched.add("a", first_due=0)
    sched.add("b", first_due=0)
    sched.start()
    idle = sched.when_idle()
    assert not idle.called
    ticks.finish("a")
    assert not idle.called
    assert sched.cancel_running() == 1
    assert idle.called
    assert sched.when_idle().called
    assert ticks.pending["b"].called  # cancelled, failure consumed by the scheduler


def test_cancel_through_run_now_result_cancels_the_tick() -> None:
    """Cancelling run_now's Deferred cancels the tick itself."""
    _clock, ticks, sched = make()
    sched.add("a", first_due=100)
    d = sched.run_now("a")
    d.addErrback(lambda f: f.trap(defer.CancelledError))
    d.cancel()
    assert ticks.pending["a"].called
    assert not sched.is_running("a")


def test_stop_stops_the_timer_and_fill() -> None:
    """After stop() nothing is scheduled on the clock."""
    clock, ticks, sched = make()
    sched.add("a", first_due=1000)
    sched.start()
    sched.start()  # idempotent
    sched.notify("a")
    sched.stop()
    assert clock.getDelayedCalls() == []
    assert not sched.started
    clock.advance(2000)
    assert ticks.names() == []


def test_idle_wakeup_touches_only_due_entries() -> None:
    """With 10,000 assistants and none due, a wake-up starts nothing and the heap stays bounded."""
    _clock, ticks, sched = make(sync=True)
    for i in range(10_000):
        sched.add(f"a{i}", first_due=1000.0 + i)
    for i in range(0, 10_000, 2):
        sched.reschedule(f"a{i}", due=2000.0 + i)
    assert len(sched._heap) <= 2 * len(sched) + 64
    assert sched.start_due() == 0
    assert ticks.names() == []


def test_readd_while_the_old_tick_runs_never_overlaps() -> None:
    """Removed and re-added during a tick: the new schedule waits for the old tick."""
    clock, ticks, sched = make()
    sched.add("a", first_due=0)
    sched.start()
    sched.remove("a")
    sched.add("a", first_due=0)
    for _ in range(10):
        clock.advance(1)
    assert ticks.names() == ["a"] and ticks.overlaps == 0
    ticks.finish("a")
    clock.advance(0)
    assert ticks.names() == ["a", "a"]


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "remove", "notify", "advance", "finish", "run_now"]),
            st.integers(0, 5),
        ),
        max_size=60,
    ),
    cap=st.integers(1, 4),
)
def test_invariants_under_random_operations(ops: list[tuple[str, int]], cap: int) -> None:
    """Never an overlap, never more than the cap from the timer, nothing lost."""
    clock, ticks, sched = make({f"a{i}": float(i + 1) for i in range(6)}, max_concurrent=cap)
    sched.start()
    present: set[str] = set()
    for op, i in ops:
        name = f"a{i}"
        if op == "add" and name not in present:
            sched.add(name)
            present.add(name)
        elif op == "remove":
            sched.remove(name)
            present.discard(name)
        elif op == "notify":
            sched.notify(name)
        elif op == "advance":
            clock.advance(i * 0.7)
        elif op == "finish" and name in ticks.pending:
            ticks.finish(name)
        elif op == "run_now" and name in present and not sched.is_running(name):
            sched.run_now(name).addErrback(lambda f: None)
        assert ticks.overlaps == 0
        assert len(sched.running()) <= cap + 6
    # Drain: every present assistant eventually runs again.
    ticks.finish_all()
    before = len(ticks.started)
    for _ in range(20):
        ticks.finish_all()
        clock.advance(1)
    again = {n for _, n in ticks.started[before:]}
    assert present <= again


def test_ticks_that_finish_at_once_do_not_use_up_the_cap() -> None:
    """Idle ticks end synchronously: thousands start in one wake-up despite a cap of 10."""
    clock, ticks, sched = make(sync=True, max_concurrent=10)
    for i in range(5000):
        sched.add(f"a{i}", first_due=0)
    sched.start()
    assert len(ticks.started) == 5000
    for _ in range(5):
        clock.advance(1)
    assert len(ticks.started) == 10_000
