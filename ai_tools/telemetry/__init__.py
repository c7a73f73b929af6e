"""OpenTelemetry traces and metrics of loops, after the GenAI semantic conventions.

Off unless asked for (``docs/observability.md``): :func:`telemetry_for` says
whether it is on; a :class:`~ai_tools.telemetry.loop_tracer.LoopTracer` per loop
makes the spans from the loop's events, and :mod:`ai_tools.telemetry.mcp_spans` those of
MCP requests (client and server).  Nothing here is imported by the loop or by the MCP
code: with tracing off, no module of OpenTelemetry is even loaded.
"""

from ai_tools.telemetry.setup import Telemetry, telemetry_for, trace_loop

__all__ = ["Telemetry", "telemetry_for", "trace_loop"]
