"""The loop's cheaper paths give what the general ones give, and leave nothing behind."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.tokens import default_counter
from ai_tools.loop import run as react
from ai_tools.loop.run import LoopConfig, LoopResult, execute_react_loop
from ai_tools.tools.base import ToolCategory
from tests.unit.react_fakes import ScriptedLLM, answer, call, make_ctx, text


def test_a_finished_loop_leaves_no_reference_cycle() -> None:
    """Everything a loop built is freed when the caller lets go of it, without the
    garbage collector (a cycle would keep every loop's objects until a collection)."""
    llm = ScriptedLLM([answer(call("look", {"at": "x"}, "c1")),
                       answer(call("broken", {}, "c2")), text("done")])
    ctx = make_ctx(llm)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        d = execute_react_loop(ctx, LoopConfig(max_iterations=5))
        result = d.result
        assert isinstance(result, LoopResult) and result.iterations == 3
        alive = weakref.ref(ctx.control)
        history = weakref.ref(ctx.history)
        del ctx, d, result
        assert alive() is None
        assert history() is None
    finally:
        if enabled:
            gc.enable()


def _full_count(run: Any) -> int:
    counter = default_counter()
    return int(run._fixed_tokens + run._system_tokens
               + sum(counter.count_message(m) for m in run.history.messages))


@pytest.mark.parametrize("greeting", [True, False])
@pytest.mark.parametrize("native", [True, False])
def test_usage_counted_from_exchanges_equals_a_full_count(native: bool, greeting: bool
                                                          ) -> None:
    """After every iteration the context usage equals counting every message again,
    whether the exchanges were counted from their lengths or message by message."""
    llm = ScriptedLLM([answer(call("look", {"at": "x" * 37}, "c1"), content="Let me look."),
                       answer(call("look", {"at": "é☃"}, "c2"), call("broken", {}, "c3")),
                       answer(call("nosuch", {"a": [1, 2]}, "c4")),
                       answer(call("look", {}, "c5"), content=""),
                       text("done")])
    history = ConversationHistory()
    if greeting:
        history.add_user("hello " * 11)
    ctx = make_ctx(llm, history=history, system_prompt="You are Ada.")
    run = react._LoopRun(ctx, LoopConfig(max_iterations=6, native_tools=native))
    checked: list[int] = []

    def checkpoint(progress: Any) -> None:
        if progress.iteration < 5:  # (the last answer's text is recorded after the count)
            assert run.usage["context_tokens"] == _full_count(run)
        checked.append(progress.iteration)

    ctx.checkpoint = checkpoint
    result = react._run_loop(run).result
    assert result.termination_reason == react.COMPLETED
    assert checked == [1, 2, 3, 4, 5]
    counter = default_counter()
    if native and counter.exact is False:
        assert run._estimating is counter  # the exchanges were counted from their lengths


def test_a_gate_allowing_everything_is_not_checked_per_call() -> None:
    """The engine gets no gate for a policy without restrictions (the same answers:
    every tool allowed, every name listed); any restriction or other policy is kept."""
    from ai_tools.loop.run import GatePolicy, _engine_gate
    from ai_tools.tools.base import ToolCategory

    assert _engine_gate(GatePolicy()) is None
    by_name = GatePolicy(allowed_names=frozenset({"look"}))
    by_category = GatePolicy(allowed_categories=frozenset({ToolCategory.SAFE_CHAIN}))
    assert _engine_gate(by_name) is by_name
    assert _engine_gate(by_category) is by_category

    class Strict(GatePolicy):
        def allows(self, name: str, category: ToolCategory) -> bool:
            return False

    strict = Strict()
    assert _engine_gate(strict) is strict
    llm = ScriptedLLM([answer(call("look", {"at": "x"}, "c1")), text("done")])
    ctx = make_ctx(llm, gate=strict)
    result = execute_react_loop(ctx, LoopConfig()).result
    assert result.results[0]["status"] == "blocked_by_tool_mode"


@given(kind=st.sampled_from(["history", "abort", "restart"]), attempts=st.integers(0, 2),
       from_cache=st.booleans(), category=st.none() | st.sampled_from(list(ToolCategory)),
       success=st.none() | st.booleans())
def test_ends_loop_is_the_outcomes_own(kind: Any, attempts: int, from_cache: bool,
                                       category: Any, success: bool | None) -> None:
    """What the loop works out from an outcome's fields is the outcome's ends_loop."""
    from ai_tools.execution.engine import ToolCallOutcome
    from ai_tools.loop.run import _ends_loop

    result: dict[str, Any] = {} if success is None else {"success": success}
    outcome = ToolCallOutcome(kind, "s", result, None, category, attempts, 0.0, from_cache)
    dispatched = attempts > 0 or from_cache
    assert dispatched == outcome.dispatched
    if kind != "abort":
        assert (result.get("success") is not False) == outcome.success
    assert _ends_loop(kind, dispatched, category, outcome.success) == outcome.ends_loop


@pytest.mark.parametrize("with_check", [False, True])
def test_a_stop_while_a_tool_runs_is_seen_by_the_engine(with_check: bool) -> None:
    """The engine's stop check (the control's flag, or the context's own check too)
    sees a stop asked for while a synchronous tool runs: the call writes nothing."""
    from ai_tools.tools.base import Actor, Tool
    from ai_tools.tools.registry import ToolRegistry

    holder: dict[str, Any] = {}

    class Stopper(Tool):
        name = "stopper"
        description = "Stops its own loop."
        parameters = {"type": "object", "properties": {}}

        def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
            if with_check:
                holder["flag"] = True
            else:
                holder["ctx"].control.stop("enough")
            return {"success": True}

    llm = ScriptedLLM([answer(call("stopper", {}, "c1")), text("never")])
    options: dict[str, Any] = {"stop_check": lambda: holder.get("flag", False)} \
        if with_check else {}
    ctx = make_ctx(llm, registry=ToolRegistry([Stopper]), **options)
    holder["ctx"] = ctx
    result = execute_react_loop(ctx, LoopConfig()).result
    assert result.termination_reason == react.STOPPED_BY_USER
    assert not [m for m in ctx.history.messages if m["role"] == "tool"]
    assert len(llm.requests) == 1


@given(result=st.dictionaries(st.sampled_from(["success", "_token_advisory", "x"]),
                              st.integers() | st.text(max_size=3), max_size=3),
       pct=st.floats(min_value=-5, max_value=120) | st.just(float("nan")))
def test_the_advised_result_is_inject_token_advisorys(result: dict[str, Any], pct: float
                                                      ) -> None:
    from ai_tools.loop.advisory import DEFAULT_THRESHOLDS, inject_token_advisory
    from ai_tools.loop.run import _advised

    advised = _advised(result, pct, DEFAULT_THRESHOLDS)
    assert advised == inject_token_advisory(result, pct, DEFAULT_THRESHOLDS)
    assert advised is not result
