"""The loop's cheaper paths give what the general ones give, and leave nothing behind."""

from __future__ import annotations

import gc
import weakref

from ai_tools.react import LoopConfig, LoopResult, execute_react_loop
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
