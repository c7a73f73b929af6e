"""Whether tracing is on, and with what: :class:`Telemetry` and :func:`telemetry_for`.

Tracing is off unless one of these holds (checked once, when a service starts):

1. the embedding program set a global tracer provider (a library host, an
   Evennia game with its own OpenTelemetry set-up): its providers are used;
2. the ``otel`` extra is installed and ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
   ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, or the service was given an
   endpoint (the standalone service's ``otlp_endpoint`` setting): ai_tools makes
   its own SDK providers exporting over OTLP/HTTP, configured by the standard
   ``OTEL_*`` variables (service name, resource attributes, headers, batch and
   queue sizes, timeouts) and shut down with the service.

``OTEL_SDK_DISABLED=true`` turns it all off.  The batch span processor exports
from its own thread, and its queue is bounded (``OTEL_BSP_MAX_QUEUE_SIZE``,
2,048 spans; later spans are dropped while the collector is away), as is
every attribute value (:data:`ATTRIBUTE_VALUE_BYTES`): a dead collector costs
bounded memory and nothing else.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
from twisted.internet import defer
from twisted.logger import Logger

import ai_tools.telemetry.conventions as sc
from ai_tools.clocks import ThreadClock as Clock

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.trace import SpanContext, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from ai_tools.json_types import JSONMapping
    from ai_tools.loop.context import LoopContext
    from ai_tools.mcp.tracing import ClientTracing, ServerTracing
    from ai_tools.telemetry.loop_tracer import LoopTracer


__all__ = ["ATTRIBUTE_VALUE_BYTES", "Telemetry", "telemetry_for", "trace_loop"]

log = Logger()

ATTRIBUTE_VALUE_BYTES = 4096
"""Longest attribute value (message contents included) ai_tools' own providers keep."""

SHUTDOWN_SECONDS = 5.0
"""How long a stopping service waits for the last spans to be exported."""

_TRUE = ("1", "true", "yes", "on")


@attrs.define(eq=False)
class Telemetry:
    """The tracer and instruments loops are traced with (tracing is on when one exists).

    ``providers`` are the SDK providers ai_tools made (shut down with the service),
    empty when the embedding program's are used.
    """

    tracer: Tracer
    token_usage: Histogram
    duration: Histogram
    capture_content: bool = False
    content_bytes: int = ATTRIBUTE_VALUE_BYTES
    providers: tuple[SdkTracerProvider | SdkMeterProvider, ...] = ()
    log: Logger = log
    mcp_client_duration: Histogram | None = None
    """``mcp.client.operation.duration`` (seconds)."""
    mcp_server_duration: Histogram | None = None
    """``mcp.server.operation.duration`` (seconds)."""
    _mcp_server: ServerTracing | None = attrs.field(default=None, init=False)

    @classmethod
    def from_providers(cls, tracer_provider: TracerProvider, meter_provider: MeterProvider,
                       environ: Mapping[str, str] | None = None,
                       providers: tuple[SdkTracerProvider | SdkMeterProvider, ...] = ()
                       ) -> Telemetry:
        """Telemetry over these providers (the content opt-in read from ``environ``)."""
        environ = os.environ if environ is None else environ
        tracer = tracer_provider.get_tracer(sc.INSTRUMENTATION_NAME, _version(),
                                            schema_url=sc.SCHEMA_URL)
        meter = meter_provider.get_meter(sc.INSTRUMENTATION_NAME, _version(),
                                         schema_url=sc.SCHEMA_URL)
        return cls(
            tracer=tracer,
            token_usage=meter.create_histogram(
                sc.TOKEN_USAGE, unit="{token}", description="Number of input and output "
                "tokens used", explicit_bucket_boundaries_advisory=list(sc.TOKEN_BUCKETS)),
            duration=meter.create_histogram(
                sc.OPERATION_DURATION, unit="s", description="GenAI operation duration",
                explicit_bucket_boundaries_advisory=list(sc.DURATION_BUCKETS)),
            capture_content=environ.get(sc.CAPTURE_CONTENT_ENV, "").strip().lower() in _TRUE,
            providers=providers,
            mcp_client_duration=meter.create_histogram(
                sc.MCP_CLIENT_DURATION, unit="s", description="The duration of the MCP request "
                "or notification as observed on the sender",
                explicit_bucket_boundaries_advisory=list(sc.MCP_DURATION_BUCKETS)),
            mcp_server_duration=meter.create_histogram(
                sc.MCP_SERVER_DURATION, unit="s", description="MCP request or notification "
                "duration as observed on the receiver",
                explicit_bucket_boundaries_advisory=list(sc.MCP_DURATION_BUCKETS)))

    def loop_tracer(self, assistant: str, llm: object, *, parent: object = None,
                    then: Callable[[dict[str, object]], None] | None = None,
                    task_id: str | None = None,
                    attributes: Mapping[str, AttributeValue] | None = None,
                    links: Sequence[SpanContext] = ()) -> LoopTracer:
        """A :class:`~ai_tools.telemetry.loop_tracer.LoopTracer` for one loop."""
        from opentelemetry.context import Context

        from ai_tools.telemetry.loop_tracer import LoopTracer

        return LoopTracer(self, assistant, llm,
                          parent=parent if isinstance(parent, Context) else None, then=then,
                          task_id=task_id, attributes=attributes, links=links)

    def mcp_client_tracing(self, url: str | None) -> ClientTracing:
        """CLIENT spans for one MCP server's session (``url`` None: a child's stdio)."""
        from ai_tools.telemetry.mcp_spans import McpClientTracing, client_facts

        return McpClientTracing(self, client_facts(url))

    def mcp_server_tracing(self) -> ServerTracing:
        """SERVER spans for our MCP server's sessions (one, kept)."""
        if self._mcp_server is None:
            from ai_tools.telemetry.mcp_spans import McpServerTracing

            self._mcp_server = McpServerTracing(self)
        return self._mcp_server

    def clip(self, text: str) -> str:
        """``text`` cut to :attr:`content_bytes` (UTF-8), marked when cut."""
        data = text.encode("utf-8")
        if len(data) <= self.content_bytes:
            return text
        return data[:self.content_bytes - 16].decode("utf-8", "ignore") + "...[clipped]"

    def record_request(self, model: str | None, event: JSONMapping,
                       server: Mapping[str, AttributeValue], seconds: float) -> None:
        """The two GenAI client metrics of one model request (a ``model_request`` event)."""
        attributes: dict[str, AttributeValue] = {sc.OPERATION_NAME: sc.CHAT,
                                      sc.PROVIDER_NAME: sc.PROVIDER_OPENAI, **server}
        if model:
            attributes[sc.REQUEST_MODEL] = model
        if event.get("response_model"):
            attributes[sc.RESPONSE_MODEL] = str(event["response_model"])
        status = str(event.get("status") or "ok")
        if status != "ok":
            attributes[sc.ERROR_TYPE] = status
        self.duration.record(seconds, attributes)
        for key, kind in (("prompt_tokens", "input"), ("completion_tokens", "output")):
            value = event.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.token_usage.record(value, {**attributes, sc.TOKEN_TYPE: kind})

    def shutdown(self, clock: Clock) -> defer.Deferred[None]:
        """Export what is left and stop ai_tools' own providers, in a thread of their own
        (a daemon: neither the reactor nor the process waits for it), waiting
        :data:`SHUTDOWN_SECONDS` at most on ``clock`` — a dead collector cannot hold a stop."""
        if not self.providers:
            return defer.succeed(None)
        providers, self.providers = self.providers, ()
        waited: defer.Deferred[None] = defer.Deferred()

        def done() -> None:
            if not waited.called:
                timer.cancel()
                waited.callback(None)

        def stop() -> None:
            for provider in providers:
                try:
                    provider.shutdown()
                except Exception:
                    log.failure("Stopping the OpenTelemetry export failed")
            clock.callFromThread(done)

        timer = clock.callLater(SHUTDOWN_SECONDS, waited.callback, None)
        threading.Thread(target=stop, name="ai_tools-otel-shutdown", daemon=True).start()
        return waited


def trace_loop(ctx: LoopContext, telemetry: Telemetry | None, *, parent: object = None,
               task_id: str | None = None,
               attributes: Mapping[str, AttributeValue] | None = None,
               links: Sequence[SpanContext] = ()) -> LoopTracer | None:
    """Attach a loop tracer to the loop context ``ctx`` — its ``on_event`` (the events
    then go on to the observer it had) and ``on_request`` — and return it; None, and
    ``ctx`` untouched, with tracing off.  ``parent``: the context of a delegating call;
    ``links``: the loops of the same tick that ran before this one."""
    if telemetry is None:
        return None
    tracer = telemetry.loop_tracer(ctx.assistant_name, ctx.llm, parent=parent,
                                   then=ctx.on_event, task_id=task_id,
                                   attributes=attributes, links=links)
    ctx.on_event = tracer
    ctx.observed = None  # the tracer listens: every event is built
    ctx.on_request = tracer.on_request
    return tracer


def telemetry_for(endpoint: str | None = None,
                  environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """The telemetry a starting service uses, or None: tracing off (see the module)."""
    environ = os.environ if environ is None else environ
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return None
    wanted = bool(endpoint or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                  or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        if wanted:
            log.warn("An OTLP endpoint is set but OpenTelemetry is not installed: no "
                     "traces (pip install 'ai-tools-twisted[otel]')")
        return None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, trace.ProxyTracerProvider):  # the embedding program's
        log.info("OpenTelemetry: tracing loops with the program's tracer provider")
        return Telemetry.from_providers(provider, metrics.get_meter_provider(), environ)
    if not wanted:
        return None
    try:
        from ai_tools.telemetry.export import otlp_providers
    except ImportError as e:
        log.warn("An OTLP endpoint is set but the OpenTelemetry SDK or its OTLP exporter is "
                 "missing ({error}): no traces (pip install 'ai-tools-twisted[otel]')",
                 error=e)
        return None
    try:
        tracer_provider, meter_provider = otlp_providers(endpoint, environ)
    except Exception as e:  # e.g. OTEL_BSP_* values the SDK refuses: say so, run untraced
        log.error("OpenTelemetry export not started, no traces: {error} (check the OTEL_* "
                  "variables)", error=f"{type(e).__name__}: {e}")
        return None
    log.info("OpenTelemetry: exporting traces and metrics over OTLP/HTTP to {endpoint}",
             endpoint=endpoint or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
             or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    return Telemetry.from_providers(tracer_provider, meter_provider, environ,
                                    providers=(tracer_provider, meter_provider))


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("ai-tools-twisted")
    except Exception:
        return "0"
