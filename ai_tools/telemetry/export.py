"""ai_tools' own OpenTelemetry SDK providers, exporting over OTLP/HTTP (the ``otel`` extra).

Made only when no tracer provider was set by the embedding program and an
endpoint is known (:func:`~ai_tools.telemetry.setup.telemetry_for`).  Both read
the standard variables (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_EXPORTER_OTLP_*``, ``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_INTERVAL``);
``OTEL_TRACES_EXPORTER=none`` / ``OTEL_METRICS_EXPORTER=none`` turn one half off.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ai_tools.telemetry.setup import ATTRIBUTE_VALUE_BYTES

__all__ = ["otlp_providers"]

DEFAULT_SERVICE_NAME = "ai-tools"


def otlp_providers(endpoint: str | None, environ: Mapping[str, str]
                   ) -> tuple[TracerProvider, MeterProvider]:
    """A tracer provider with a batch OTLP/HTTP exporter, and a meter provider exporting
    every ``OTEL_METRIC_EXPORT_INTERVAL`` ms; ``endpoint`` (a base URL) wins over the
    variables."""
    base = endpoint.rstrip("/") if endpoint else None
    resource = Resource.create(
        {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": DEFAULT_SERVICE_NAME})
    limits = SpanLimits(max_attribute_length=_int(environ.get(
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"), ATTRIBUTE_VALUE_BYTES))
    tracer_provider = TracerProvider(resource=resource, span_limits=limits)
    if _exporter(environ, "OTEL_TRACES_EXPORTER"):
        spans = OTLPSpanExporter(endpoint=f"{base}/v1/traces" if base else None)
        tracer_provider.add_span_processor(BatchSpanProcessor(spans))
    readers: list[MetricReader] = []
    if _exporter(environ, "OTEL_METRICS_EXPORTER"):
        exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics" if base else None)
        readers.append(PeriodicExportingMetricReader(exporter))
    return tracer_provider, MeterProvider(resource=resource, metric_readers=readers)


def _exporter(environ: Mapping[str, str], name: str) -> bool:
    """Whether the variable ``name`` leaves the OTLP exporter on (unset, or naming otlp)."""
    value = environ.get(name, "otlp").strip().lower()
    return value != "none"


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default
