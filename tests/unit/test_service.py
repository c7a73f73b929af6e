"""Tests for ai_tools.service.service: the control API, scheduling, observers, hearing, shutdown."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.application.service import MultiService
from twisted.internet import defer, task

from ai_tools.errors import ConfigError, NotFound, ServiceNotRunning
from ai_tools.loop import LoopConfig, LoopContext
from ai_tools.service.assistant import SLEEP, Assistant
from ai_tools.service.service import (
    MAX_ASSISTANTS,
    MIN_TICK_RATE,
    AssistantService,
    world_message_to_event,
)
from ai_tools.service.tick import IDLE, RAN, TickResult
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.registry import ToolRegistry
from tests.unit.service_fakes import (
    FakeLLM,
    FakeLoop,
    LogCapture,
    add,
    loop_result,
    make_service,
    settle,
)

# -- service basics ------------------------------------------------------------------


def test_is_a_multiservice_comparing_by_identity() -> None:
    """Two services are never equal, so MultiService.removeService finds the right one."""
    _, a, _ = make_service()
    _, b, _ = make_service()
    parent = MultiService()
    a.setServiceParent(parent)
    b.setServiceParent(parent)
    assert a != b
    a.disownServiceParent()
    assert list(parent) == [b]


def test_start_opens_store_and_stop_closes_everything() -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    llm, other = FakeLLM(), FakeLLM()
    service = AssistantService(llm=llm, llms={"big": other, "alias": llm}, store=store,
                               clock=clock, loop_runner=FakeLoop())
    service.startService()
    assert store._open
    assert service.when_ready().called
    add(service, clock, name="ada")
    stopped: list[Any] = []
    service.stopService().addCallback(stopped.append)
    settle(clock)
    assert stopped
    assert not store._open
    assert (llm.closed, other.closed) == (1, 1)  # each client closed once
    assert clock.getDelayedCalls() == []


def test_timer_ticks_everyone_with_one_delayed_call() -> None:
    clock, service, _ = make_service()
    for i in range(200):
        add(service, clock, name=f"a{i}")
    timers = [c for c in clock.getDelayedCalls() if "LoopingCall" in repr(c)]
    assert len(timers) == 1
    for _ in range(10):
        clock.advance(1)
    assert all(service.get(f"a{i}").tick_number >= 1 for i in range(200))


def test_idle_ticks_follow_the_awake_and_sleep_rates() -> None:
    clock, service, loop = make_service()
    ada = add(service, clock, name="ada", tick_rate=5, sleep_tick_rate=60)
    service.scheduler.reschedule("ada", due=0)
    for _ in range(60):
        clock.advance(1)
    assert ada.counters["idle_ticks"] in (12, 13)
    assert loop is not None and loop.calls == []
    ada.set_mode(SLEEP, force=True, duration=10_000)
    ticks = ada.tick_number
    for _ in range(120):
        clock.advance(1)
    assert ada.tick_number - ticks in (2, 3)


# -- adding and removing ----------------------------------------------------------------


def test_add_assistant_checks_config() -> None:
    clock, service, _ = make_service()
    add(service, clock, name="ada")
    failures: list[Any] = []
    service.add_assistant({"name": "ada"}).addErrback(failures.append)
    service.add_assistant({"name": "bob", "model": "gpt-9"}).addErrback(failures.append)
    service.add_assistant({"name": "b c"}).addErrback(failures.append)
    settle(clock)
    assert [f.check(ConfigError) for f in failures] == [ConfigError] * 3
    assert "already exists" in str(failures[0].value)
    assert "unknown model 'gpt-9' (known: default)" in str(failures[1].value)
    assert service.names() == ["ada"]


def test_tick_rates_have_a_floor_and_assistants_a_bound() -> None:
    """``min_tick_rate`` (default MIN_TICK_RATE) refuses a faster tick_rate or
    sleep_tick_rate on add and reconfigure; ``max_assistants`` refuses one more."""
    clock, service, _ = make_service(max_assistants=2)
    assert service.min_tick_rate == MIN_TICK_RATE and MAX_ASSISTANTS >= 100
    failures: list[Any] = []
    service.add_assistant({"name": "fast", "tick_rate": 1e-9}).addErrback(failures.append)
    service.add_assistant({"name": "dozy", "sleep_tick_rate": 0.5}).addErrback(failures.append)
    add(service, clock, name="ada")
    add(service, clock, name="bob", tick_rate=MIN_TICK_RATE)
    service.add_assistant({"name": "cy"}).addErrback(failures.append)
    service.reconfigure("ada", {"name": "ada", "tick_rate": 0.01}).addErrback(failures.append)
    settle(clock)
    assert [f.check(ConfigError) for f in failures] == [ConfigError] * 4
    assert "assistant.tick_rate must be at least 1 seconds" in str(failures[0].value)
    assert "sleep_tick_rate" in str(failures[1].value)
    assert "maximum of 2 assistants (max_assistants)" in str(failures[2].value)
    assert "tick_rate" in str(failures[3].value)
    assert service.names() == ["ada", "bob"]
    assert service.get("ada").config.tick_rate == 5.0


def test_add_restores_saved_state() -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    _, first, _ = make_service(clock, store=store)
    ada = add(first, clock, name="ada")
    ada.history.add_user("remember me")
    first.disable("ada")
    first.send("ada", "are you there?")
    settle(clock)
    first.stopService()
    settle(clock)

    _, second, loop = make_service(clock, store=store)  # a new service on the same data
    restored = add(second, clock, name="ada")
    assert restored.history.messages[0] == {"role": "user", "content": "remember me"}
    assert restored.pending_events[0]["text"] == "are you there?"
    assert not restored.enabled
    # once enabled, the restored pending event is handled at once
    second.enable("ada")
    settle(clock)
    assert loop is not None and len(loop.calls) == 1


def test_add_without_restore_starts_fresh() -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    store.save_assistant("ada", {"history": [{"role": "user", "content": "old"}]})
    _, service, _ = make_service(clock, store=store)
    d = service.add_assistant({"name": "ada", "character_id": "c"}, restore=False)
    settle(clock)
    assert len(d.result.history) == 0


def test_restore_saved_assistants_on_start() -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    _, first, _ = make_service(clock, store=store)
    add(first, clock, name="ada", persona="I am Ada")
    add(first, clock, name="bob")
    store.save_assistant("broken", {"config": {"name": "broken", "model": "nope"}})
    first.stopService()
    settle(clock)
    with LogCapture() as logs:
        _, second, _ = make_service(clock, store=store, restore_saved=True)
        settle(clock)
    assert second.names() == ["ada", "bob"]
    assert second.get("ada").persona == "I am Ada"
    assert any("broken" in str(e.get("assistant")) for e in logs.events)


def test_remove_assistant_keeps_or_forgets_state() -> None:
    clock, service, _ = make_service()
    add(service, clock, name="ada")
    add(service, clock, name="bob")
    d = service.remove_assistant("ada")
    settle(clock)
    assert d.called and "ada" not in service
    assert service.store.load_assistant("ada").result is not None
    d = service.remove_assistant("bob", forget=True)
    settle(clock)
    assert service.store.load_assistant("bob").result is None
    with pytest.raises(NotFound):
        service.remove_assistant("nobody")


def test_remove_kills_a_running_tick() -> None:
    clock, service, loop = make_service()
    assert loop is not None
    loop.hang()
    ada = add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)
    assert ada.ticking
    d = service.remove_assistant("ada")
    settle(clock)
    assert d.called
    assert not ada.ticking
    assert ada.host is None


# -- control ------------------------------------------------------------------------------


def test_send_queues_a_durable_event_and_ticks_soon() -> None:
    clock, service, loop = make_service()
    add(service, clock, name="ada")
    d = service.send("ada", {"type": "say", "from": "bob", "text": "hi"})
    assert service.get("ada").pending_events[0]["addressed"] is True
    assert not d.called  # durable only after the write
    clock.advance(0)
    assert d.called
    saved = service.store.load_assistant("ada").result
    # the tick ran in the same turn: the event is durable in the history now
    assert saved["history"][0] == {"role": "user", "content": "events: 1"}
    assert saved["pending_events"] == []
    settle(clock)
    assert loop is not None and len(loop.calls) == 1
    _ctx, config = loop.calls[0]
    assert isinstance(config, LoopConfig)
    assert service.get("ada").pending_events == []
    assert service.history("ada")[0] == {"role": "user", "content": "events: 1"}


def test_send_rejects_bad_input() -> None:
    clock, service, _ = make_service()
    add(service, clock, name="ada")
    with pytest.raises(NotFound, match="no assistant named 'bob'"):
        service.send("bob", "hi")
    with pytest.raises(TypeError):
        service.send("ada", 42)
    event = {"type": "say", "text": "x", "addressed": False}
    service.send("ada", event)
    assert service.get("ada").pending_events[-1]["addressed"] is False


def test_run_tick_returns_the_result() -> None:
    clock, service, _ = make_service()
    add(service, clock, name="ada")
    d = service.run_tick("ada")
    assert isinstance(d.result, TickResult)
    assert d.result.status == IDLE
    service.send("ada", "hi")
    d = service.run_tick("ada")
    settle(clock)
    assert d.result.status == RAN and d.result.reason == "completed"
    with pytest.raises(NotFound):
        service.run_tick("nobody")


def test_run_tick_never_overlaps_it_joins_the_tick_in_flight() -> None:
    """send() then run_tick(): the timer may start the tick first; run_tick then fires
    with that tick's result (the one that took the event), never "already ticking"."""
    clock, service, loop = make_service()
    assert loop is not None
    loop.hang()
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)  # the timer started the tick
    second = service.run_tick("ada")
    assert not second.called and len(loop.calls) == 1
    loop.pending[0].callback(loop_result("completed", 1))
    settle(clock)
    assert second.result.status == RAN and second.result.reason == "completed"
    assert len(loop.calls) == 1


def test_using_the_service_before_it_starts_is_a_clear_error() -> None:
    """Nothing ticks before startService(): waiting for an answer would wait forever."""
    clock = task.Clock()
    service = AssistantService(llm=FakeLLM(), registry=ToolRegistry(), clock=clock,
                               loop_runner=FakeLoop())
    add(service, clock, name="ada")  # adding opens the store: allowed before the start
    for call in (lambda: service.send("ada", "hi"), lambda: service.run_tick("ada")):
        with pytest.raises(ServiceNotRunning, match=r"call startService\(\) first"):
            call()
    service.startService()
    service.send("ada", "hi")
    service.stopService()
    clock.advance(20)
    with pytest.raises(ServiceNotRunning):
        service.run_tick("ada")


def test_disable_and_enable() -> None:
    clock, service, loop = make_service()
    add(service, clock, name="ada")
    service.disable("ada")
    service.send("ada", "hi")
    settle(clock)
    assert service.run_tick("ada").result.reason == "disabled"
    assert loop is not None and loop.calls == []
    assert service.store.load_assistant("ada").result["enabled"] is False
    service.enable("ada")
    clock.advance(1)
    settle(clock)
    assert len(loop.calls) == 1


def test_stop_assistant_kills_the_loop_in_flight() -> None:
    clock, service, loop = make_service()
    assert loop is not None
    loop.hang()
    add(service, clock, name="ada")
    assert service.stop_assistant("ada") is False  # nothing running
    service.send("ada", "hi")
    settle(clock)
    running = service.scheduler.running()["ada"]
    results: list[Any] = []
    running.addCallback(results.append)
    assert service.stop_assistant("ada", "enough") is True
    assert results[0].status == RAN
    assert results[0].reason == "stopped_by_user"
    assert not service.get("ada").ticking


def test_emergency_stop_all_and_clear() -> None:
    clock, service, loop = make_service()
    assert loop is not None
    loop.hang()
    add(service, clock, name="ada")
    add(service, clock, name="bob")
    service.send("ada", "hi")
    settle(clock)
    assert service.emergency_stop(reason="runaway") == ["ada", "bob"]
    assert not service.get("ada").ticking
    assert service.run_tick("bob").result.reason == "emergency_stopped"
    settle(clock)
    assert service.store.load_assistant("bob").result["emergency_stopped"] is True
    assert service.clear_emergency_stop() == ["ada", "bob"]
    assert service.clear_emergency_stop() == []
    loop.behaviour = None
    service.send("bob", "hi")
    settle(clock)
    assert loop.calls[-1][0].assistant_name == "bob"


def test_emergency_stop_one() -> None:
    clock, service, _ = make_service()
    add(service, clock, name="ada")
    add(service, clock, name="bob")
    assert service.emergency_stop("ada") == ["ada"]
    assert service.get("bob").emergency_stopped is False
    with pytest.raises(NotFound):
        service.emergency_stop("zed")


def test_status_counters_history_stats() -> None:
    clock, service, _ = make_service()
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)
    status = service.status("ada")
    assert status["tick_number"] == 1
    assert status["next_tick_at"] is not None
    assert status["counters"]["loops"] == 1
    assert service.counters("ada")["events_received"] == 1
    everything = service.status()
    assert set(everything["assistants"]) == {"ada"}
    assert everything["service"]["assistants"] == 1
    assert everything["service"]["state_transactions"] >= 1
    assert service.history("ada")[-1]["content"] == "iteration 1"
    with pytest.raises(NotFound):
        service.status("nobody")


# -- observers ------------------------------------------------------------------------------


def test_observers_receive_loop_and_tick_events() -> None:
    clock, service, loop = make_service()
    add(service, clock, name="ada")
    add(service, clock, name="bob")
    seen: list[dict[str, Any]] = []
    only_bob: list[dict[str, Any]] = []
    assert not service.observed("ada")  # nobody subscribed: loops build no event
    remove = service.add_observer(seen.append)
    remove_bob = service.add_observer(only_bob.append, assistant="bob")
    assert service.observed("ada") and service.observed("bob")

    def behaviour(ctx: LoopContext, config: LoopConfig) -> Any:
        assert ctx.on_event is not None and ctx.observed is not None and ctx.observed()
        ctx.on_event({"type": "tool_result", "tool": "look", "duration_ms": 3.0,
                      "from_cache": True, "success": True})
        return loop_result()

    assert loop is not None
    loop.behaviour = behaviour
    service.send("ada", "hi")
    settle(clock)
    kinds = [(e["type"], e["assistant"]) for e in seen]
    assert ("tool_result", "ada") in kinds and ("tick", "ada") in kinds
    assert all("time" in e for e in seen)
    assert only_bob == []
    remove()
    remove()  # twice is harmless
    service.send("bob", "hi")
    settle(clock)
    assert not any(e["assistant"] == "bob" for e in seen)
    assert any(e["type"] == "tick" for e in only_bob)
    assert not service.observed("ada") and service.observed("bob")
    remove_bob()
    assert not service.observed("bob")


def test_a_failing_observer_is_logged_and_ticking_goes_on() -> None:
    clock, service, loop = make_service()
    add(service, clock, name="ada")

    def bad(event: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    service.add_observer(bad)
    with LogCapture() as logs:
        service.send("ada", "hi")
        settle(clock)
    assert loop is not None and len(loop.calls) == 1
    assert service.get("ada").last_tick is not None
    assert any("observer bug" in str(e.get("log_failure")) for e in logs.events)


# -- hearing ------------------------------------------------------------------------------------


class FakeWorld:
    """Just enough IWorld for hearing."""

    def __init__(self, fail: bool = False) -> None:
        self.listeners: dict[str, Any] = {}
        self.fail = fail

    def subscribe(self, char_id: str, listener: Any) -> Any:
        if self.fail:
            raise RuntimeError("no such character")
        self.listeners[char_id] = listener
        return lambda: self.listeners.pop(char_id, None)


class Message:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def test_hearing_turns_what_the_character_hears_into_events() -> None:
    world = FakeWorld()
    clock, service, _ = make_service(world=world)
    ada = add(service, clock, name="ada", character_id="char:ada")
    hear = world.listeners["char:ada"]
    hear(Message(kind="say", sender_id="char:bob", text="hello there"))
    hear({"type": "say", "sender_id": "char:ada", "text": "my own words"})
    hear("a plain string")
    texts = [e.get("text") for e in ada.pending_events]
    assert texts == ["hello there", "a plain string"]
    assert ada.pending_events[0]["type"] == "say"
    assert service.hear("ada") is False  # already subscribed
    service.remove_assistant("ada")
    settle(clock)
    assert world.listeners == {}


def test_hearing_can_be_off_or_fail() -> None:
    world = FakeWorld()
    clock, service, _ = make_service(world=world)
    add(service, clock, name="ada", hearing=False)
    assert world.listeners == {}
    _, other, _ = make_service(world=FakeWorld(fail=True))
    with LogCapture() as logs:
        add(other, other.clock, name="bob")
    assert any("subscribe" in e.get("log_format", "") for e in logs.events)


def test_world_message_to_event() -> None:
    import attrs

    @attrs.frozen
    class WorldMessage:
        kind: str
        text: str

    assert world_message_to_event(WorldMessage("pose", "waves")) == {
        "kind": "pose", "text": "waves", "type": "pose"}
    assert world_message_to_event({"sender_key": "Bob", "text": "x"})["from"] == "Bob"
    assert world_message_to_event({"text": "x"})["type"] == "message"
    assert world_message_to_event(3) == {"text": "3", "type": "message"}


# -- shutdown ------------------------------------------------------------------------------------


def test_stop_waits_for_a_tick_within_the_grace_period() -> None:
    clock, service, loop = make_service(stop_grace=10)
    assert loop is not None
    release: defer.Deferred[Any] = defer.Deferred()
    loop.behaviour = lambda ctx, config: release.addCallback(lambda _: loop_result())
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)
    stopped: list[Any] = []
    service.stopService().addCallback(stopped.append)
    clock.advance(3)
    assert not stopped
    release.callback(None)
    settle(clock)
    assert stopped
    assert service.get("ada").last_tick["reason"] == "completed"


def test_stop_cancels_ticks_after_the_grace_period() -> None:
    clock, service, loop = make_service(stop_grace=5)
    assert loop is not None
    loop.hang()
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)
    with LogCapture() as logs:
        stopped: list[Any] = []
        service.stopService().addCallback(stopped.append)
        clock.advance(4.9)
        assert not stopped
        clock.advance(0.2)
        settle(clock)
    assert stopped
    assert not service.get("ada").ticking
    assert service.get("ada").last_tick["reason"] == "stopped_by_user"
    assert any("still running" in e.get("log_format", "") for e in logs.events)
    assert clock.getDelayedCalls() == []


def test_a_tick_ignoring_cancellation_does_not_block_shutdown_forever() -> None:
    """Even a loop that swallows its cancellation lets stopService finish (two grace periods)."""
    clock, service, loop = make_service(stop_grace=1)
    assert loop is not None
    never: defer.Deferred[Any] = defer.Deferred(lambda d: None)
    loop.behaviour = lambda ctx, config: never.addErrback(lambda f: defer.Deferred())
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)
    stopped: list[Any] = []
    service.stopService().addCallback(stopped.append)
    clock.advance(1)
    assert not stopped
    clock.advance(1)
    settle(clock)
    assert stopped


# -- sub-agents ------------------------------------------------------------------------------------


def test_subagent_runs_in_the_background_and_reports_back() -> None:
    clock, service, loop = make_service()
    assert loop is not None
    ada = add(service, clock, name="ada")
    release: defer.Deferred[Any] = defer.Deferred()
    loop.behaviour = lambda ctx, config: release.addCallback(
        lambda _: loop_result("completed", 2, text="found 3 lamps", tool_budget_remaining=1))
    task_id = ada.start_subagent("Find every lamp in the plaza please", ["look", "say",
                                                                        "delegate_task"], 3)
    assert task_id == "sub-1"
    ctx, config = loop.calls[0]
    assert ctx.gate.allowed_names == frozenset({"look", "say"})  # never delegate_task
    assert config.tool_budget == 3
    assert ctx.pending_events[0]["text"].startswith("Find every lamp")
    assert ada.subagent_status("sub-1")["status"] == "running"
    loop.behaviour = None
    release.callback(None)
    settle(clock)
    status = ada.subagent_status("sub-1")
    assert status["status"] == "done" and status["result"] == "found 3 lamps"
    assert status["tool_calls"] == 2
    # the report came back as an event and was handled by a tick
    assert service.history("ada")[0] == {"role": "user", "content": "events: 1"}


def test_subagent_bad_arguments() -> None:
    clock, service, _ = make_service()
    ada = add(service, clock, name="ada")
    with pytest.raises(ValueError, match="budget"):
        ada.start_subagent("task", ["look"], 0)
    with pytest.raises(ValueError, match="task"):
        ada.start_subagent(" ", ["look"], 2)


def test_assistant_runtime_is_what_tools_see() -> None:
    clock, service, loop = make_service()
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)
    assert loop is not None
    ctx, _ = loop.calls[0]
    assert isinstance(ctx.actor.assistant, Assistant)
    assert ctx.actor.assistant.llm is service.llm_for("default")
    assert ctx.actor.character_id == "char:ada"
    assert ctx.cache_namespace == "ada"


def test_hearing_in_the_sandbox_world() -> None:
    """The real world: Bob's say in the inn reaches Pip; Pip's own words do not."""
    from ai_tools.world.sandbox import SandboxWorld
    from tests.unit.sandbox_world_fixtures import EXAMPLE

    clock = task.Clock()
    world = SandboxWorld.from_file(EXAMPLE, clock=clock)
    _, service, loop = make_service(clock, world=world)
    pip = add(service, clock, name="pip", character_id="char:pip")
    pip.set_mode(SLEEP, force=True, duration=1000)
    world.message_location("char:bob", "lovely weather", kind="say")
    world.message_location("char:pip", "indeed", kind="say")
    assert [e["text"] for e in pip.pending_events] == ["lovely weather"]
    assert pip.pending_events[0]["from"] == "Bob"
    assert pip.mode == SLEEP and not pip.has_addressed_event()
    world.message_character("char:bob", "char:pip", "a pint please", kind="whisper")
    settle(clock, 10)
    assert pip.mode == "awake"  # the whisper woke Pip and the events were handled
    assert loop is not None and loop.calls and pip.pending_events == []
