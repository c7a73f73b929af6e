"""Loop overhead per iteration: the ReAct loop against a bare Deferred loop, same run.

Both loops do the same work per iteration with an instant in-process model and
a trivial tool: ask the model (which answers with one tool call at once),
validate the call's parameters with jsonschema, run the tool through
``maybeDeferred`` and keep the exchange.  The bare loop is only that; ours adds
everything the engine does (continuation check and token counting, the
regenerated system prompt, parsing, gate, cache lookup, timeout, result
shaping, history, observers, checkpoint).

Target (issue 5, benchmark a): ours at most 2x the bare loop per iteration.

Times are CPU time of this process (``time.process_time``), so other work on a
shared machine disturbs the figures less than wall-clock time would.

Run: ``make bench BENCH=loop`` (or ``python -m benchmarks loop``).
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import jsonschema
from twisted.internet import defer, task
from zope.interface import implementer

from ai_tools.history import ConversationHistory
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse
from ai_tools.react import LoopConfig, LoopContext, execute_react_loop
from ai_tools.tools.base import Actor, Tool, ToolRegistry

ITERATIONS_PER_LOOP = 10
LOOPS = 100
ROUNDS = 15
TARGET = 2.0

_SCHEMA = {"type": "object", "properties": {"at": {"type": "string"}}, "required": ["at"]}


def _response(call_id: str) -> ChatResponse:
    call = {"id": call_id, "type": "function",
            "function": {"name": "look", "arguments": '{"at": "room"}'}}
    return ChatResponse.from_message(
        {"role": "assistant", "content": None, "tool_calls": [call]},
        finish_reason="tool_calls",
        usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    )


# One response per iteration of a loop, each call with its own id as a real model gives
# (a reused id would make the engine log a warning and renumber it, every iteration).
_RESPONSES = tuple(_response(f"call_{i}") for i in range(ITERATIONS_PER_LOOP))


class LookTool(Tool):
    """A trivial read-only tool."""

    name = "look"
    description = "Look at something."
    parameters = _SCHEMA

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True, "seen": params["at"]}


@implementer(ILLMClient)
class InstantModel:
    """An ILLMClient answering every request at once with the same tool call."""

    model = "instant"
    context_window = 128_000

    def __init__(self) -> None:
        self._next = 0

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None) -> defer.Deferred[ChatResponse]:
        response = _RESPONSES[self._next]
        self._next = (self._next + 1) % len(_RESPONSES)
        return defer.succeed(response)

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


def _noop_event(event: dict[str, Any]) -> None:
    pass


def _checkpoint(progress: Any) -> None:
    pass


def run_ours(clock: task.Clock, registry: ToolRegistry, model: InstantModel) -> float:
    """Seconds for LOOPS loops of ITERATIONS_PER_LOOP iterations through execute_react_loop."""
    config = LoopConfig(max_iterations=ITERATIONS_PER_LOOP)
    actor = Actor("char:bench")
    start = time.process_time()
    for _ in range(LOOPS):
        llm: Any = model  # an ILLMClient (zope declares it; mypy cannot see it)
        ctx = LoopContext(
            assistant_name="bench", actor=actor, registry=registry, llm=llm,
            history=ConversationHistory(), clock=clock, system_prompt="You are a benchmark.",
            on_event=_noop_event, checkpoint=_checkpoint,
        )
        d = execute_react_loop(ctx, config)
        result: Any = d.result  # the model and the tool answer synchronously
        assert result.iterations == ITERATIONS_PER_LOOP, result
    return time.process_time() - start


def run_bare(model: InstantModel) -> float:
    """The same work as a bare inlineCallbacks + maybeDeferred + jsonschema loop."""
    import json

    validator = jsonschema.Draft202012Validator(_SCHEMA)
    tool = LookTool()
    actor = Actor("char:bench")

    @defer.inlineCallbacks
    def loop() -> Any:
        history: list[dict[str, Any]] = []
        for _ in range(ITERATIONS_PER_LOOP):
            messages = [{"role": "system", "content": "You are a benchmark."}, *history]
            response = yield defer.maybeDeferred(model.complete, messages)
            for call in response.tool_calls:
                params = json.loads(call.raw_arguments)
                errors = list(validator.iter_errors(params))
                if errors:
                    result: dict[str, Any] = {"success": False}
                else:
                    result = yield defer.maybeDeferred(tool.execute, actor, **params)
                history.append({"role": "assistant",
                                "tool_calls": response.message["tool_calls"]})
                history.append({"role": "tool", "tool_call_id": call.id,
                                "content": json.dumps(result)})
        return len(history)

    start = time.process_time()
    for _ in range(LOOPS):
        d = loop()
        assert d.result == 2 * ITERATIONS_PER_LOOP
    return time.process_time() - start


def run_engine_only(clock: task.Clock, registry: ToolRegistry) -> float:
    """Seconds for the same number of bare ``execute_tool_call`` calls (the engine's share)."""
    from ai_tools.execution import ExecutionContext, execute_tool_call

    actor = Actor("char:bench")
    start = time.process_time()
    for _ in range(LOOPS):
        ctx = ExecutionContext(registry=registry, actor=actor, history=ConversationHistory(),
                               clock=clock)
        for i in range(ITERATIONS_PER_LOOP):
            outcome: Any = execute_tool_call(ctx, _RESPONSES[i].message["tool_calls"][0]).result
            assert outcome.success, outcome
    return time.process_time() - start


def main() -> None:
    """Measure the loops in alternating rounds and print medians per iteration.

    The ratios are medians of per-round ratios: each round of ours is divided by
    the bare round measured just before it, so load from other processes hits
    both sides of a ratio alike.
    """
    clock = task.Clock()
    registry = ToolRegistry([LookTool])
    model = InstantModel()
    # warm up (imports, the token counter, jsonschema compilation)
    run_ours(clock, registry, model)
    run_bare(model)
    run_engine_only(clock, registry)
    ours: list[float] = []
    bare: list[float] = []
    engine: list[float] = []
    n = LOOPS * ITERATIONS_PER_LOOP
    for _ in range(ROUNDS):
        gc.collect()
        bare.append(run_bare(model) / n)
        gc.collect()
        ours.append(run_ours(clock, registry, model) / n)
        gc.collect()
        engine.append(run_engine_only(clock, registry) / n)
    ours_us = statistics.median(ours) * 1e6
    bare_us = statistics.median(bare) * 1e6
    engine_us = statistics.median(engine) * 1e6
    ratio = statistics.median(o / b for o, b in zip(ours, bare, strict=True))
    engine_ratio = statistics.median(e / b for e, b in zip(engine, bare, strict=True))
    loop_ratio = statistics.median((o - e) / b for o, e, b in zip(ours, engine, bare,
                                                                   strict=True))
    print(f"iterations per round: {n} ({LOOPS} loops x {ITERATIONS_PER_LOOP}), "
          f"rounds: {ROUNDS}, CPU time, medians; ratios are medians of per-round ratios")
    print(f"bare inlineCallbacks+maybeDeferred+jsonschema loop: {bare_us:8.1f} us/iteration")
    print(f"execute_react_loop, whole iteration:               {ours_us:8.1f} us/iteration")
    print(f"  of which execute_tool_call (engine) alone:        {engine_us:8.1f} us/call")
    print(f"  the loop itself (whole minus engine):             "
          f"{ours_us - engine_us:8.1f} us/iteration")
    verdict = "OK" if ratio <= TARGET else "OVER TARGET"
    print(f"ratio: {ratio:.2f}x (target <= {TARGET:.1f}x) {verdict}; "
          f"loop alone {loop_ratio:.2f}x, engine alone {engine_ratio:.2f}x")


if __name__ == "__main__":
    main()
