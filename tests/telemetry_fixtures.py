"""The real OpenTelemetry SDK, recording in memory: what the tracing tests read spans from."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ai_tools.telemetry import Telemetry
from ai_tools.telemetry.conventions import CAPTURE_CONTENT_ENV


class Recorded:
    """A :class:`Telemetry` over SDK providers that keep every span and metric in memory."""

    def __init__(self, capture_content: bool = False, content_bytes: int | None = None) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        meters = MeterProvider(metric_readers=[self.reader])
        environ = {CAPTURE_CONTENT_ENV: "true"} if capture_content else {}
        self.telemetry = Telemetry.from_providers(provider, meters, environ)
        if content_bytes is not None:
            self.telemetry.content_bytes = content_bytes

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def one(self, name: str) -> ReadableSpan:
        [span] = [s for s in self.spans if s.name == name]
        return span

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> its data points."""
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found


def children(parent: ReadableSpan, spans: Iterable[ReadableSpan]) -> list[ReadableSpan]:
    """The spans whose parent is ``parent``, in start order."""
    parent_id = parent.context.span_id
    return sorted((s for s in spans if s.parent is not None and s.parent.span_id == parent_id),
                  key=lambda s: s.start_time or 0)


def traceparent_of(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` naming ``span``."""
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
