"""Instructions per loop iteration, for ``valgrind --tool=cachegrind --cache-sim=no``.

``python -m benchmarks.loop_instructions [--traced] BLOCKS`` runs one warm-up block
and then BLOCKS blocks of ``make bench BENCH=loop``'s own loop side
(:func:`benchmarks.bench_loop.ours_block`: 10 loops of 10 iterations, one tool call
each).  Run it under cachegrind with 0 and with 10 blocks: the difference of the
``I refs`` totals over 1,000 is the instructions of one iteration (one model request
and one tool call).  ``--traced`` attaches a loop tracer to every loop (the
OpenTelemetry SDK's tracer provider with a batch span processor, its exporter
discarding the spans): the difference to the untraced count is what tracing costs
per tool call.  ``docs/observability.md`` has the figures and the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from twisted.internet import task

from ai_tools.execution.history import ConversationHistory
from ai_tools.loop import LoopConfig, LoopContext, execute_react_loop
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry
from benchmarks.bench_loop import (
    BLOCK,
    ITERATIONS_PER_LOOP,
    InstantModel,
    LookTool,
    _checkpoint,
    _noop_event,
    ours_block,
)


def traced_block(clock: task.Clock, registry: ToolRegistry, model: InstantModel
                 ) -> Callable[[], None]:
    """``ours_block`` with a loop tracer on every loop."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from ai_tools.telemetry import Telemetry, trace_loop

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    telemetry = Telemetry.from_providers(provider, MeterProvider(), environ={})
    config = LoopConfig(max_iterations=ITERATIONS_PER_LOOP)
    actor = Actor("char:bench")
    llm: Any = model

    def run() -> None:
        for _ in range(BLOCK):
            ctx = LoopContext(
                assistant_name="bench", actor=actor, registry=registry, llm=llm,
                history=ConversationHistory(), clock=clock,
                system_prompt="You are a benchmark.",
                on_event=_noop_event, checkpoint=_checkpoint,
            )
            trace_loop(ctx, telemetry)
            result: Any = execute_react_loop(ctx, config).result
            assert result.iterations == ITERATIONS_PER_LOOP, result

    return run


def main(argv: list[str]) -> int:
    traced = "--traced" in argv
    blocks = int(next(a for a in argv if not a.startswith("--")))
    clock = task.Clock()
    registry = ToolRegistry([LookTool])
    model = InstantModel()
    run = (traced_block if traced else ours_block)(clock, registry, model)
    run()  # warm-up: imports, jsonschema compilation, the token counter
    for _ in range(blocks):
        run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
