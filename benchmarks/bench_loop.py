"""Loop overhead per iteration: the ReAct loop against a bare Deferred loop, same run.

Both loops do the same work per iteration with an instant in-process model and
a trivial tool: ask the model (which answers with one tool call at once),
validate the call's parameters with jsonschema, run the tool through
``maybeDeferred`` and keep the exchange.  The bare loop is only that; ours adds
everything the engine does (continuation check and token counting, the
regenerated system prompt, parsing, gate, cache lookup, timeout, result
shaping, history, observers, checkpoint).  It runs as the service runs it:
the process logs through the service's own chain at its default level
(``benchmarks/deployed_log.py``), and the loop's observer is the service's
fan-out with nobody subscribed (``LoopContext.observed`` says no).

Targets (issue 24): ours at most 1.6x the bare loop per iteration; what the
service's log costs per tool call at most 0.3x a bare loop iteration.  Then,
by ``valgrind --tool=cachegrind`` (``benchmarks/instructions.py``), the
instructions per iteration of each side, which the machine's load does not
disturb.

Times are CPU time of this process (``time.process_time``), so other work on a
shared machine disturbs the figures less than wall-clock time would; the sides
take turns in blocks of ten loops and the ratios are medians of per-round ratios.
The model gives each call its own id, as real models do.

Run: ``make bench BENCH=loop`` (or ``python -m benchmarks loop``).
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jsonschema
from twisted.internet import defer, task
from twisted.logger import LogLevel
from zope.interface import implementer

from ai_tools.execution.engine import ExecutionContext, execute_tool_call
from ai_tools.execution.history import ConversationHistory
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse
from ai_tools.loop import LoopConfig, LoopContext, execute_react_loop
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from benchmarks import deployed_log
from benchmarks.instructions import report as instructions_report

ITERATIONS_PER_LOOP = 10
BLOCK = 10
"""Loops per timed block."""
BLOCKS = 10
ROUNDS = 15
TARGET = 1.6
"""Whole iteration against the bare loop (issue 24; 2.0 in issue 5)."""
LOG_TARGET = 0.3
"""What the deployed service's log costs per tool call, against a bare loop iteration."""

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


def _unobserved() -> bool:
    """The loop's observers as the service hands them: its fan-out, nobody subscribed."""
    return False


def _checkpoint(progress: Any) -> None:
    pass


def ours_block(clock: task.Clock, registry: ToolRegistry, model: InstantModel
               ) -> Callable[[], None]:
    """BLOCK loops of ITERATIONS_PER_LOOP iterations through execute_react_loop."""
    config = LoopConfig(max_iterations=ITERATIONS_PER_LOOP)
    actor = Actor("char:bench")
    llm: Any = model  # an ILLMClient (zope declares it; mypy cannot see it)

    def run() -> None:
        for _ in range(BLOCK):
            ctx = LoopContext(
                assistant_name="bench", actor=actor, registry=registry, llm=llm,
                history=ConversationHistory(), clock=clock,
                system_prompt="You are a benchmark.",
                on_event=_noop_event, observed=_unobserved, checkpoint=_checkpoint,
            )
            d = execute_react_loop(ctx, config)
            result: Any = d.result  # the model and the tool answer synchronously
            assert result.iterations == ITERATIONS_PER_LOOP, result

    return run


def bare_block(model: InstantModel) -> Callable[[], None]:
    """The same work as a bare inlineCallbacks + maybeDeferred + jsonschema loop."""
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

    def run() -> None:
        for _ in range(BLOCK):
            d = loop()
            assert d.result == 2 * ITERATIONS_PER_LOOP

    return run


def engine_block(clock: task.Clock, registry: ToolRegistry) -> Callable[[], None]:
    """The same number of bare ``execute_tool_call`` calls (the engine's share)."""
    actor = Actor("char:bench")

    def run() -> None:
        for _ in range(BLOCK):
            ctx = ExecutionContext(registry=registry, actor=actor,
                                   history=ConversationHistory(), clock=clock)
            for i in range(ITERATIONS_PER_LOOP):
                call = _RESPONSES[i].message["tool_calls"][0]
                outcome: Any = execute_tool_call(ctx, call).result
                assert outcome.success, outcome

    return run


def log_events_block() -> Callable[[], None]:
    """The two log events every tool call emits (DESIGN §4), alone: a diagnostic.

    Emitted with the engine's own logger (same namespace, same observers), at
    the engine's level (debug) and with the fields the engine gives them, as
    many times as the engine side makes calls.
    """
    from ai_tools.execution import engine as execution

    log = execution.log
    arguments = {"at": "room"}

    def run() -> None:
        for _ in range(BLOCK * ITERATIONS_PER_LOOP):
            logged = log.wants(LogLevel.debug)  # as the engine asks: once a call
            if logged:
                log.debug("Assistant decision: {tool} - {reasoning}", tool="look",
                          reasoning="", tool_call_id="call_0", arguments=arguments,
                          assistant="char:bench")
            if logged:
                log.debug("Function call completed: {name} ({ms}ms)", name="look", ms=0,
                          success=True, status="success", attempts=1, from_cache=False,
                          tool_call_id="call_0", assistant="char:bench")

    return run


def loop_line_block() -> Callable[[], None]:
    """The loop's one info line (its end), alone, once per loop: a diagnostic."""
    from ai_tools.loop import run as loop_run

    log = loop_run.log

    def run() -> None:
        for _ in range(BLOCK):
            log.info("ReAct loop of {assistant} ended: {reason} after {iterations} "
                     "iteration(s), {calls} tool call(s) ({failed} failed){tools}",
                     assistant="bench", reason="max_iterations", iterations=10, calls=10,
                     failed=0, tools=": look look look look look look look look +2",
                     error=None, events_returned=0, duration_ms=0.0)

    return run


def _counted(side: str) -> Any:
    def make() -> tuple[Callable[[], None], int]:
        deployed_log.begin()
        clock = task.Clock()
        registry = ToolRegistry([LookTool])
        model = InstantModel()
        runs = {"bare": lambda: bare_block(model), "ours": lambda: ours_block(
            clock, registry, model), "engine": lambda: engine_block(clock, registry),
            "call_logs": log_events_block, "loop_line": loop_line_block}
        return runs[side](), BLOCK * ITERATIONS_PER_LOOP
    return make


COUNTED = {side: _counted(side)
           for side in ("bare", "ours", "engine", "call_logs", "loop_line")}
"""The sides ``benchmarks.instructions`` counts (one run: BLOCK loops)."""


def main() -> None:
    """Measure the three sides in interleaved blocks; print medians per iteration.

    Each round runs BLOCKS blocks of each side in turn (a block is BLOCK loops,
    a few tens of milliseconds), so load from other processes on a shared
    machine hits all sides alike; the ratios are medians of per-round ratios.
    """
    deployed_log.begin()
    clock = task.Clock()
    registry = ToolRegistry([LookTool])
    model = InstantModel()
    sides = [bare_block(model), ours_block(clock, registry, model),
             engine_block(clock, registry)]
    for run in sides:  # warm up (imports, the token counter, jsonschema compilation)
        run()
    n = BLOCKS * BLOCK * ITERATIONS_PER_LOOP
    bare: list[float] = []
    ours: list[float] = []
    engine: list[float] = []
    for _ in range(ROUNDS):
        gc.collect()
        spent = [0.0, 0.0, 0.0]
        for _ in range(BLOCKS):
            for i, run in enumerate(sides):
                started = time.process_time()
                run()
                spent[i] += time.process_time() - started
        bare.append(spent[0] / n)
        ours.append(spent[1] / n)
        engine.append(spent[2] / n)
    ours_us = statistics.median(ours) * 1e6
    bare_us = statistics.median(bare) * 1e6
    engine_us = statistics.median(engine) * 1e6
    ratio = statistics.median(o / b for o, b in zip(ours, bare, strict=True))
    engine_ratio = statistics.median(e / b for e, b in zip(engine, bare, strict=True))
    loop_ratio = statistics.median((o - e) / b for o, e, b in zip(ours, engine, bare,
                                                                   strict=True))
    print(f"iterations per round and side: {n} ({BLOCKS} blocks x {BLOCK} loops x "
          f"{ITERATIONS_PER_LOOP}), rounds: {ROUNDS}, CPU time, medians; ratios are "
          "medians of per-round ratios")
    print(f"bare inlineCallbacks+maybeDeferred+jsonschema loop: {bare_us:8.1f} us/iteration")
    print(f"execute_react_loop, whole iteration:               {ours_us:8.1f} us/iteration")
    print(f"  of which execute_tool_call (engine) alone:        {engine_us:8.1f} us/call")
    print(f"  the loop itself (whole minus engine):             "
          f"{ours_us - engine_us:8.1f} us/iteration")
    logs = log_events_block()
    logs()
    log_times = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(BLOCKS):
            logs()
        log_times.append((time.process_time() - started) / n)
    log_us = statistics.median(log_times) * 1e6
    print(f"  (diagnostic: the engine's two log events per call alone: {log_us:6.1f} us/call,"
          f" {log_us / bare_us:.2f}x the bare loop)")
    verdict = "OK" if ratio <= TARGET else "OVER TARGET"
    print(f"ratio: {ratio:.2f}x (target <= {TARGET:.1f}x) {verdict}; "
          f"loop alone {loop_ratio:.2f}x, engine alone {engine_ratio:.2f}x", flush=True)
    instructions()


def instructions() -> None:
    """Instructions per iteration of each side, and what the log costs per tool call."""
    counts = instructions_report("loop", [
        ("bare", "bare inlineCallbacks+maybeDeferred+jsonschema loop"),
        ("ours", "execute_react_loop, whole iteration"),
        ("engine", "  of which execute_tool_call (engine) alone"),
        ("call_logs", "the engine's two log events per call"),
        ("loop_line", "the loop's one info line, per iteration")], "bare")
    if not counts:
        return
    bare, ours = counts["bare"], counts["ours"]
    logs = counts["call_logs"] + counts["loop_line"]
    verdict = "OK" if ours <= TARGET * bare else "OVER TARGET"
    print(f"instruction ratio: {ours / bare:.2f}x (target <= {TARGET:.1f}x) {verdict}; "
          f"loop alone {(ours - counts['engine']) / bare:.2f}x; the service log per tool call "
          f"({ITERATIONS_PER_LOOP} calls a loop) {logs / bare:.2f}x the bare loop "
          f"(target <= {LOG_TARGET}x)", flush=True)


if __name__ == "__main__":
    main()
