"""Engine overhead of one tool call: ``execute_tool_call`` next to the bare minimum.

Two paths of a trivial SAFE tool, each measured side by side with its baseline in
the same run (the sides take turns in blocks of 100 calls, so machine noise hits
all of them alike; CPU time of this process):

* **uncached** — the engine (parse, decision log, lookup, gate, validation,
  dispatch through a Deferred, result check and size limit, counters, completion
  log, history entry, outcome) against a bare loop of ``maybeDeferred(fn, **params)``
  after a precompiled jsonschema validator.  Target: <= 1.4x (issue 24).
* **cache hit** — the engine answering from the tick cache against validation
  plus a bare dict lookup.  Target: <= 1.2x.

A decorated line compares the same tool written as a typed function
(``ai_tools.tool``, schema built once at decoration) with the class above, both
through ``execute_tool_call``: a decorated tool's call costs what a class's
call costs (target: <= 1.1x).

A third line, for information, runs the steps the engine cannot skip (parse,
decision log, validation, the tool, result shaping, completion log, history
entry, outcome) inline with no control flow around them: the distance between
it and the engine is what the engine's own machinery (gate, cache, counters,
retries, kill, stop checks) costs.

Sync tools complete inside ``execute_tool_call``: the Deferred path is real,
but no reactor needs to spin.  The process logs as the deployed service does
(``benchmarks/deployed_log.py``: the twistd plugin's level filter and log file at
the default level), so the engine's per-call events (debug) are not built.

Then, by ``valgrind --tool=cachegrind`` (``benchmarks/instructions.py``), the
instructions per call of each side and their ratios (the targets hold for both).

Run: ``make bench BENCH=execution`` (or ``python -m benchmarks execution``).
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Annotated, Any

import jsonschema
import msgspec
from twisted.internet import defer, task
from twisted.logger import LogLevel

from ai_tools.execution.cache import ToolCache, cache_key
from ai_tools.execution.calls import parse_tool_call
from ai_tools.execution.engine import ExecutionContext, execute_tool_call
from ai_tools.execution.engine import log as engine_log
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.outcome import ToolCallOutcome
from ai_tools.execution.results import shape_result
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.function_tool import tool
from ai_tools.tools.registry import ToolRegistry
from ai_tools.tools.validation import validate_tool_result
from benchmarks import deployed_log
from benchmarks.instructions import report as instructions_report

CALLS = 1000
BLOCK = 100
ROUNDS = 21
UNCACHED_TARGET = 1.4
CACHED_TARGET = 1.2
DECORATED_TARGET = 1.1

SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["query"],
}
PARAMS = {"query": "brass lamp", "limit": 5}


def search(**params: Any) -> dict[str, Any]:
    """The work of the trivial tool: nothing."""
    return {"success": True, "count": 0, "query": params["query"]}


class SearchTool(Tool):
    name = "search"
    description = "Find objects."
    parameters = SCHEMA

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return search(**params)


@tool(name="decorated_search", requires_character=True)
def decorated_search(query: str,
                     limit: Annotated[int, msgspec.Meta(ge=1, le=50)] = 10) -> dict[str, Any]:
    """Find objects."""
    return search(query=query, limit=limit)


class CachedSearchTool(SearchTool):
    name = "cached_search"
    cacheable = True
    cache_scope = "tick"


def _context() -> ExecutionContext:
    clock = task.Clock()
    return ExecutionContext(
        registry=ToolRegistry([SearchTool, CachedSearchTool, decorated_search]),
        actor=Actor("bench"),
        history=ConversationHistory(),
        clock=clock,
        cache=ToolCache(clock),
        cache_namespace="bench",
    )


def _calls(name: str) -> list[dict[str, Any]]:
    """Native calls as the loop hands them over (arguments decoded)."""
    return [{"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": dict(PARAMS)}} for i in range(CALLS)]


Side = Callable[[], Callable[[int, int], None]]
"""Sets up one round of one side; returns ``run(start, stop)`` making calls start..stop-1."""

_CHECKS: dict[Callable[[int, int], None], Callable[[], bool]] = {}
"""Checks run after a round (outside the timing): every engine call gave the outcome."""


def bare_uncached() -> Callable[[int, int], None]:
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    sink: list[Any] = []
    params_list = [dict(PARAMS) for _ in range(CALLS)]

    def run(start: int, stop: int) -> None:
        for params in params_list[start:stop]:
            if any(True for _ in validator.iter_errors(params)):
                raise AssertionError("invalid")
            d = defer.maybeDeferred(search, **params)
            d.addCallback(sink.append)

    return run


def engine_uncached() -> Callable[[int, int], None]:
    ctx = _context()
    calls = _calls("search")
    sink: list[Any] = []

    def run(start: int, stop: int) -> None:
        for tool_call in calls[start:stop]:
            execute_tool_call(ctx, tool_call).addCallback(sink.append)

    _CHECKS[run] = lambda: len(sink) == CALLS and all(o.status == "success" for o in sink)
    return run


def engine_decorated() -> Callable[[int, int], None]:
    ctx = _context()
    calls = _calls("decorated_search")
    sink: list[Any] = []

    def run(start: int, stop: int) -> None:
        for tool_call in calls[start:stop]:
            execute_tool_call(ctx, tool_call).addCallback(sink.append)

    _CHECKS[run] = lambda: len(sink) == CALLS and all(o.status == "success" for o in sink)
    return run


def inline_steps() -> Callable[[int, int], None]:
    ctx = _context()
    tool = ctx.registry.get_tool("search")
    assert tool is not None
    calls = _calls("search")
    sink: list[Any] = []
    log = engine_log  # the engine's own logger: its two events per call, at its level

    def run(start: int, stop: int) -> None:
        for tool_call in calls[start:stop]:
            call = parse_tool_call(tool_call)
            if log.wants(LogLevel.debug):  # as the engine asks
                log.debug("Assistant decision: {tool} - {reasoning}", tool=call.name,
                          reasoning=call.reasoning)
            validation = tool.validate_parameters(dict(call.arguments))
            result = validate_tool_result(tool.execute(ctx.actor, **validation.cleaned_params))
            shaped = shape_result(result, tool.name)
            if log.wants(LogLevel.debug):
                log.debug("Function call completed: {name} ({ms}ms)", name=tool.name, ms=0)
            entries = ctx.history.add_tool_exchange(call, shaped.content, native=True)
            d: defer.Deferred[ToolCallOutcome] = defer.Deferred()
            d.addCallback(sink.append)
            d.callback(ToolCallOutcome(kind="history", status="success", result=shaped.result,
                                       call=call, history_entries=entries))

    return run


def bare_cached() -> Callable[[int, int], None]:
    validator = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
    cache = {cache_key("cached_search", PARAMS): search(**PARAMS)}
    sink: list[Any] = []
    params_list = [dict(PARAMS) for _ in range(CALLS)]

    def run(start: int, stop: int) -> None:
        for params in params_list[start:stop]:
            if any(True for _ in validator.iter_errors(params)):
                raise AssertionError("invalid")
            key = "cached_search:" + json.dumps(params, sort_keys=True, separators=(",", ":"))
            sink.append(cache[key])

    return run


def engine_cached() -> Callable[[int, int], None]:
    ctx = _context()
    first: list[Any] = []
    execute_tool_call(ctx, {"tool": "cached_search", "parameters": dict(PARAMS)}) \
        .addCallback(first.append)
    calls = _calls("cached_search")
    sink: list[Any] = []

    def run(start: int, stop: int) -> None:
        for tool_call in calls[start:stop]:
            execute_tool_call(ctx, tool_call).addCallback(sink.append)

    _CHECKS[run] = lambda: len(sink) == CALLS and all(o.from_cache for o in sink)
    return run


def _medians(*sides: Side) -> tuple[list[float], list[float]]:
    """Medians over ROUNDS of each side's CPU us per call, and of the per-round ratios.

    A round sets every side up afresh, then runs their calls in blocks of
    BLOCK, the sides taking turns, so load from other processes on a shared
    machine hits all sides alike.  Ratios are against the first side (the
    baseline), round by round.  CPU time of this process, not wall time.
    """
    times: list[list[float]] = [[] for _ in sides]
    for _ in range(ROUNDS):
        runs = [side() for side in sides]
        gc.collect()
        spent = [0.0] * len(runs)
        for start in range(0, CALLS, BLOCK):
            for i, run in enumerate(runs):
                started = time.process_time()
                run(start, start + BLOCK)
                spent[i] += time.process_time() - started
        for i, total in enumerate(spent):
            times[i].append(total * 1e6 / CALLS)
        for run in runs:
            assert _CHECKS.pop(run, lambda: True)(), "an engine call did not succeed"
    ratios = [statistics.median(t / b for t, b in zip(ti, times[0], strict=True))
              for ti in times]
    return [statistics.median(t) for t in times], ratios


def _report(label: str, ours: float, bare: float, ratio: float, target: float) -> None:
    verdict = "meets" if ratio <= target else "MISSES"
    print(f"{label:10s} engine {ours:7.1f} us/call   baseline {bare:7.1f} us/call   "
          f"ratio {ratio:4.2f}x (target <= {target}x: {verdict})", flush=True)


def _counted(side: Side) -> Any:
    """A side for ``benchmarks.instructions``: each run() makes the next BLOCK calls."""
    def make() -> tuple[Callable[[], None], int]:
        deployed_log.begin()
        run = side()
        starts = iter(range(0, CALLS, BLOCK))

        def block() -> None:
            start = next(starts)
            run(start, start + BLOCK)

        return block, BLOCK
    return make


COUNTED = {side.__name__: _counted(side) for side in (
    bare_uncached, engine_uncached, inline_steps, bare_cached, engine_cached)}
"""The sides ``benchmarks.instructions`` counts (at most CALLS / BLOCK - 1 blocks)."""


def instructions() -> None:
    """Instructions per call of each side and their ratios, counted by cachegrind."""
    uncached = instructions_report("execution", [
        ("bare_uncached", "uncached baseline"), ("engine_uncached", "uncached engine"),
        ("inline_steps", "the mandatory steps inline")], "bare_uncached", blocks=5)
    cached = instructions_report("execution", [
        ("bare_cached", "cache hit baseline"), ("engine_cached", "cache hit engine")],
        "bare_cached", blocks=5)
    if uncached and cached:
        ratio = uncached["engine_uncached"] / uncached["bare_uncached"]
        print(f"instruction ratios: uncached {ratio:.2f}x (target <= {UNCACHED_TARGET}x), "
              "cache hit "
              f"{cached['engine_cached'] / cached['bare_cached']:.2f}x "
              f"(target <= {CACHED_TARGET}x)", flush=True)


def main() -> None:
    deployed_log.begin()
    print(f"{CALLS} calls x {ROUNDS} rounds, CPU time; medians of per-round means, "
          "ratio = median of per-round ratios", flush=True)
    (bare, ours, inline), (_, ratio, inline_ratio) = _medians(
        bare_uncached, engine_uncached, inline_steps)
    _report("uncached", ours, bare, ratio, UNCACHED_TARGET)
    print(f"{'':10s} (the mandatory steps inline, no engine: {inline:.1f} us/call = "
          f"{inline_ratio:.2f}x the baseline)", flush=True)
    (bare, ours), (_, ratio) = _medians(bare_cached, engine_cached)
    _report("cache hit", ours, bare, ratio, CACHED_TARGET)
    (cls, decorated), (_, ratio) = _medians(engine_uncached, engine_decorated)
    verdict = "meets" if ratio <= DECORATED_TARGET else "MISSES"
    print(f"{'decorated':10s} engine {decorated:7.1f} us/call   class tool {cls:7.1f} us/call   "
          f"ratio {ratio:4.2f}x (target <= {DECORATED_TARGET}x: {verdict})", flush=True)
    instructions()


if __name__ == "__main__":
    main()
