"""Tests for ai_tools.service.tick: spec 004 §1 steps, with a fake loop and the real one."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from ai_tools.execution.cache import ToolCache
from ai_tools.llm.events import ChatResponse
from ai_tools.loop import LoopConfig, LoopContext
from ai_tools.service.assistant import AWAKE, SLEEP
from ai_tools.service.tick import IDLE, RAN, SKIPPED, SLEEPING, WOKE
from ai_tools.tools.base import ToolCategory
from tests.unit.react_fakes import ScriptedLLM, SlowTool, answer, call, make_registry, text
from tests.unit.service_fakes import FakeLLM, add, loop_result, make_service, settle

# -- 1. early exits ----------------------------------------------------------------------


def test_early_exits_in_order_and_never_hold_the_guard() -> None:
    clock, service, loop = make_service()
    ada = add(service, clock, name="ada")
    nochar = add(service, clock, name="nochar", character_id="")
    ada.ticking = True
    assert service.run_tick("ada").result.reason == "already_ticking"
    assert ada.ticking  # a skipped tick does not release someone else's guard
    ada.ticking = False
    ada.enabled = False
    ada.emergency_stopped = True
    assert service.run_tick("ada").result.reason == "disabled"
    ada.enabled = True
    assert service.run_tick("ada").result.reason == "emergency_stopped"
    ada.emergency_stopped = False
    assert service.run_tick("nochar").result.reason == "no_character"
    for result in (service.run_tick("nochar").result,):
        assert result.status == SKIPPED
    assert not nochar.ticking and nochar.tick_number == 0
    assert loop is not None and loop.calls == []


def test_idle_tick_is_synchronous_and_calls_no_model() -> None:
    llm = FakeLLM()
    clock, service, loop = make_service(llm=llm)
    ada = add(service, clock, name="ada")
    d = service.run_tick("ada")
    assert d.called and d.result.status == IDLE
    assert llm.requests == [] and loop is not None and loop.calls == []
    assert not ada.ticking
    assert ada.counters["idle_ticks"] == 1


def test_autonomous_assistant_runs_with_nothing_pending() -> None:
    clock, service, loop = make_service()
    add(service, clock, name="ada", autonomous=True)
    result = service.run_tick("ada")
    settle(clock)
    assert result.result.status == RAN
    assert loop is not None and loop.calls[0][0].pending_events == []


# -- 2. tick-cache reset -----------------------------------------------------------------


def test_tick_cache_is_reset_at_every_tick() -> None:
    clock, service, _ = make_service()
    cache = service.cache
    assert isinstance(cache, ToolCache)
    add(service, clock, name="ada")
    cache.put("ada", "tick", "k", {"success": True}, ttl=None)
    cache.put("ada", "session", "s", {"success": True}, ttl=None)
    service.run_tick("ada")
    got: list[Any] = []
    cache.get("ada", "tick", "k").addCallback(got.append)
    cache.get("ada", "session", "s").addCallback(got.append)
    assert got[0] is None and got[1] == {"success": True}


# -- 3. emergency compaction -----------------------------------------------------------------


def _fill_history(assistant: Any, messages: int, size: int) -> None:
    for i in range(messages):
        assistant.history.add_user(f"{i} " + "x" * size)
        assistant.history.add_assistant("ok")


def test_emergency_compaction_when_awake_at_80_percent() -> None:
    llm = FakeLLM(reply="They talked about x.", context_window=2000)
    clock, service, loop = make_service(llm=llm)
    ada = add(service, clock, name="ada")
    _fill_history(ada, 30, 200)  # well over 80% of 2000 tokens
    before = len(ada.history)
    service.send("ada", "hi")
    settle(clock)
    assert len(ada.history) < before
    assert ada.history.messages[0]["content"].startswith("[CONVERSATION SUMMARY]")
    assert ada.counters["compactions"] == 1
    assert ada.last_tick["status"] == RAN
    assert loop is not None and len(loop.calls) == 1  # the loop ran after compacting
    assert llm.requests  # the summary came from the model


def test_compaction_falls_back_to_truncation_and_reports_it() -> None:
    llm = FakeLLM(context_window=2000)
    llm.fail_with = RuntimeError("model down")
    clock, service, _ = make_service(llm=llm)
    ada = add(service, clock, name="ada")
    _fill_history(ada, 30, 200)
    service.send("ada", "hi")
    settle(clock)
    assert ada.history.messages[0]["content"].startswith("[EARLIER CONVERSATION REMOVED]")
    assert ada.history.unanswered_tool_calls() == []
    assert any("truncation" in e for e in ada.last_tick["errors"])


def test_no_compaction_below_threshold() -> None:
    llm = FakeLLM(context_window=100_000)
    clock, service, _ = make_service(llm=llm)
    ada = add(service, clock, name="ada")
    _fill_history(ada, 5, 10)
    service.send("ada", "hi")
    settle(clock)
    assert "compactions" not in ada.counters


# -- 4. sleep ----------------------------------------------------------------------------------


def test_sleep_tick_runs_maintenance_once_and_keeps_events() -> None:
    clock, service, loop = make_service()
    ada = add(service, clock, name="ada")
    ada.set_mode(SLEEP, force=True, duration=1000)
    ada.queue_event({"type": "say", "text": "nice weather"})  # not addressed to ada
    assert ada.has_addressed_event() is False
    first = service.run_tick("ada")
    settle(clock)
    assert first.result.status == SLEEPING
    assert first.result.maintenance is not None
    assert loop is not None and len(loop.calls) == 1
    ctx, _config = loop.calls[0]
    assert ctx.mode == SLEEP
    assert ctx.pending_events == []  # maintenance does not consume the events
    assert ctx.gate.allowed_categories == frozenset(
        {ToolCategory.SAFE_CHAIN, ToolCategory.ASYNC_REQUIRED})
    assert len(ada.pending_events) == 1
    second = service.run_tick("ada")
    settle(clock)
    assert second.result.status == SLEEPING and second.result.maintenance is None
    assert len(loop.calls) == 1  # once per sleep


def test_sleeping_assistant_ticks_at_the_sleep_rate_and_ignores_chatter() -> None:
    clock, service, _loop = make_service()
    ada = add(service, clock, name="ada", sleep_tick_rate=60, sleep_maintenance=False)
    ada.set_mode(SLEEP, force=True, duration=10_000)
    start = ada.tick_number
    service.send("ada", {"type": "say", "text": "chatter", "addressed": False})
    settle(clock)
    assert ada.tick_number == start  # chatter does not bring the tick forward
    for _ in range(121):
        clock.advance(1)
    assert ada.tick_number - start in (2, 3)
    assert ada.mode == SLEEP


def test_addressed_event_wakes_and_is_handled_at_once() -> None:
    clock, service, loop = make_service()
    ada = add(service, clock, name="ada", sleep_maintenance=False)
    ada.set_mode(SLEEP, force=True, duration=10_000)
    results: list[Any] = []
    service.add_observer(lambda e: results.append(e) if e["type"] == "tick" else None)
    service.send("ada", {"type": "whisper", "from": "bob", "text": "wake up"})
    settle(clock, 10)
    assert [(r["status"], r["reason"]) for r in results[:2]] == [
        (WOKE, "addressed"), (RAN, "completed")]
    assert ada.mode == AWAKE and ada.activity_since_wake == 0
    assert loop is not None and loop.calls[0][0].mode == AWAKE
    assert ada.pending_events == []


def test_schedule_end_wakes() -> None:
    clock, service, _ = make_service()
    ada = add(service, clock, name="ada", sleep_maintenance=False, sleep_tick_rate=60)
    ada.set_mode(SLEEP, force=True, duration=100)
    service.scheduler.reschedule("ada", due=1)
    for _ in range(200):
        clock.advance(1)
    assert ada.mode == AWAKE
    assert ada.mode_reason == "schedule"
    assert ada.counters["wakes"] == 1


def test_sleep_compaction_from_70_percent() -> None:
    llm = FakeLLM(reply="summary")
    clock, service, _ = make_service(llm=llm)
    ada = add(service, clock, name="ada", sleep_maintenance=False)
    _fill_history(ada, 20, 120)
    llm.context_window = 10**7
    assert service.run_tick("ada").result.status == IDLE  # (measured, far from full)
    assert ada.meter.last is not None
    tokens = ada.meter.last.tokens  # the one measure: prompt head, tool schemas, history
    llm.context_window = int(tokens / 0.75)  # 75%: under the awake threshold, over the sleep one
    assert service.run_tick("ada").result.status == IDLE  # awake: no compaction at 75%
    assert "compactions" not in ada.counters
    ada.set_mode(SLEEP, force=True, duration=1000)
    service.run_tick("ada")
    settle(clock)
    assert ada.counters.get("compactions") == 1


def test_go_to_sleep_tool_is_refused_right_after_waking() -> None:
    """The activity_since_wake safeguard as a tool sees it (SleepRefused → error result)."""
    from ai_tools.service.assistant import SleepRefused

    clock, service, _ = make_service()
    ada = add(service, clock, name="ada")
    try:
        ada.set_mode(SLEEP, "bored")
    except SleepRefused as e:
        assert "since waking" in str(e)
    else:  # pragma: no cover - the test fails here
        raise AssertionError("sleep was not refused")


# -- 5. reflection --------------------------------------------------------------------------


def test_reflection_every_n_active_ticks_without_touching_history() -> None:
    clock, service, loop = make_service()
    ada = add(service, clock, name="ada", reflection_interval=2)
    assert loop is not None
    for _ in range(2):
        service.send("ada", "hi")
        settle(clock)
    assert ada.ticks_since_reflection == 2
    history = ada.history.messages
    result = service.run_tick("ada")  # nothing pending: reflects, then idles
    settle(clock)
    assert result.result.status == IDLE and result.result.reason == "reflected"
    reflect_ctx, _ = loop.calls[-1]
    assert reflect_ctx.reflection is True
    assert reflect_ctx.checkpoint is None
    assert ada.history.messages == history  # nothing said in reflection is kept
    assert ada.ticks_since_reflection == 0
    assert ada.counters["reflections"] == 1


def test_reflection_off_by_default() -> None:
    clock, service, loop = make_service()
    ada = add(service, clock, name="ada")
    for _ in range(5):
        service.send("ada", "hi")
        settle(clock)
    assert loop is not None and not any(ctx.reflection for ctx, _ in loop.calls)
    assert "reflections" not in ada.counters


# -- 6-7. pattern selection ---------------------------------------------------------------


def test_three_layer_pattern_selection_reaches_the_loop() -> None:
    llm = FakeLLM(reply='{"complexity": "simple", "reasoning": "a greeting"}')
    clock, service, loop = make_service(llm=llm)
    add(service, clock, name="ada", execution_config={
        "max_iterations": 6,
        "contexts": {"event": {"max_iterations": 2},
                     "building": {"use_llm_assessment": True, "max_iterations": 8}},
    })
    assert loop is not None
    service.send("ada", {"type": "say", "text": "hello"})  # conversation: layer 1
    settle(clock)
    service.send("ada", {"type": "arrive", "text": "bob arrives"})  # event: layer 2
    settle(clock)
    service.send("ada", {"type": "say", "text": "build a hut", "context": "building"})
    settle(clock)
    configs: list[LoopConfig] = [c for _, c in loop.calls]
    assert [(c.pattern_mode, c.max_iterations) for c in configs] == [
        ("react_loop", 6), ("react_loop", 2), ("single_action", 1)]
    assert len(llm.requests) == 1  # the assessment (layer 3), only where enabled
    tick = service.get("ada").last_tick
    assert tick is not None and tick["status"] == RAN


def test_gate_of_the_context_reaches_the_loop() -> None:
    clock, service, loop = make_service()
    add(service, clock, name="ada", execution_config={
        "contexts": {"conversation": {"allowed_categories": ["terminal"],
                                      "allowed_tools": ["say"]}}})
    service.send("ada", {"type": "say", "text": "hello"})
    settle(clock)
    assert loop is not None
    gate = loop.calls[0][0].gate
    assert gate.allowed_names == frozenset({"say"})


# -- 8. the loop and its checkpoints --------------------------------------------------------


def test_every_iteration_is_durable_before_the_next() -> None:
    clock, service, loop = make_service()
    assert loop is not None
    loop.iterations = 3
    seen: list[int] = []

    def behaviour(ctx: LoopContext, config: LoopConfig) -> Any:
        @defer.inlineCallbacks
        def run() -> Any:
            ctx.history.add_user("events")
            del ctx.pending_events[:]
            for i in range(3):
                ctx.history.add_assistant(f"step {i}")
                d = ctx.checkpoint(None)  # type: ignore[misc]
                assert not d.called  # durable only once the write happened
                yield d
                saved = service.store.load_assistant("ada").result
                seen.append(len(saved["history"]))
            return loop_result(iterations=3)
        return run()

    loop.behaviour = behaviour
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock, 10)
    assert seen == [2, 3, 4]


def test_history_is_trimmed_to_max_history() -> None:
    clock, service, loop = make_service()
    assert loop is not None
    loop.iterations = 10
    ada = add(service, clock, name="ada", max_history=6)
    service.send("ada", "hi")
    settle(clock, 20)
    assert len(ada.history) <= 6
    assert ada.counters["history_truncations"] == 1


# -- with the real loop -------------------------------------------------------------------


def test_real_loop_event_to_answer_persisted() -> None:
    llm = ScriptedLLM([answer(call("look", {}, "c1")),
                       answer(call("say", {"text": "Hello Bob"}, "c2"))])
    clock, service, _ = make_service(llm=llm, registry=make_registry(), loop=False)
    ada = add(service, clock, name="ada", persona="You are Ada.")
    service.send("ada", {"type": "say", "from": "bob", "text": "hi Ada"})
    settle(clock, 10)
    assert ada.last_tick["reason"] == "terminal_tool"
    assert ada.last_tick["iterations"] == 2
    saved = service.store.load_assistant("ada").result
    roles = [m["role"] for m in saved["history"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]
    assert saved["pending_events"] == []
    assert "You are Ada." in llm.system_prompts()[0]
    assert ada.activity_since_wake == 2


def test_real_loop_kill_mid_tool_leaves_valid_history() -> None:
    registry = make_registry()
    slow = registry.get_tool("slow")
    assert isinstance(slow, SlowTool)
    llm = ScriptedLLM([answer(call("slow", {}, "c1"))])
    clock, service, _ = make_service(llm=llm, registry=registry, loop=False)
    ada = add(service, clock, name="ada")
    service.send("ada", "do the slow thing")
    settle(clock)
    assert ada.ticking and slow.pending
    assert service.stop_assistant("ada") is True
    settle(clock)
    assert slow.cancelled == 1
    assert not ada.ticking
    assert ada.last_tick["reason"] == "stopped_by_user"
    assert ada.history.unanswered_tool_calls() == []
    # and it goes on ticking afterwards
    llm.script.append(text("I am back."))
    service.send("ada", "still there?")
    settle(clock)
    assert ada.last_tick["reason"] == "completed"


def test_real_loop_reflection_keeps_history() -> None:
    llm = ScriptedLLM([text("one"), text("two"), text("I learned a lot.")])
    clock, service, _ = make_service(llm=llm, registry=make_registry(), loop=False)
    ada = add(service, clock, name="ada", reflection_interval=2)
    for _ in range(2):
        service.send("ada", "hi")
        settle(clock)
    before = ada.history.messages
    service.run_tick("ada")
    settle(clock)
    assert ada.history.messages == before
    assert "reflection" in llm.system_prompts()[-1].lower()


def test_chat_response_fake_is_compatible() -> None:
    """FakeLLM answers with ChatResponse, like the real client."""
    d = FakeLLM("hi").complete([])
    assert isinstance(d.result, ChatResponse)
