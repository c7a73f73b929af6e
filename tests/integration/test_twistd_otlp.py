"""A real ``twistd`` service exporting its traces and metrics over OTLP/HTTP to a receiver in
the test (a twisted.web endpoint decoding the protobuf with ``opentelemetry-proto``), and the
same service with its collector unreachable."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from twisted.web import resource, server

from ai_tools.testing import start_test_server
from tests.integration.test_twistd import SCRIPT
from tests.integration.twistd_process import (
    TWISTD,
    assert_stopped_by,
    http,
    post_json,
    processes,
    reactor,
    start_and_wait,
    until,
    write_config,
)

__all__ = ["http", "processes"]  # fixtures

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

MAX_EXPORT_BYTES = 8 * 1024 * 1024
"""Largest export the receiver reads (a bigger one is refused with 413)."""


class Receiver(resource.Resource):
    """``/v1/traces`` and ``/v1/metrics`` of an OTLP/HTTP collector, keeping what came."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[Any] = []
        self.resources: list[dict[str, Any]] = []
        self.metrics: list[str] = []

    def render_POST(self, request: Any) -> bytes:
        body = request.content.read(MAX_EXPORT_BYTES + 1)
        if len(body) > MAX_EXPORT_BYTES:
            request.setResponseCode(413)
            return b""
        request.setHeader(b"content-type", b"application/x-protobuf")
        if request.path == b"/v1/traces":
            traces = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            for batch in traces.resource_spans:
                self.resources.append({a.key: a.value.string_value
                                       for a in batch.resource.attributes})
                for scope in batch.scope_spans:
                    self.spans.extend(scope.spans)
            return trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        if request.path == b"/v1/metrics":
            metrics = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
            for batch in metrics.resource_metrics:
                for scope in batch.scope_metrics:
                    self.metrics.extend(m.name for m in scope.metrics)
            return metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        request.setResponseCode(404)
        return b""

    def named(self, prefix: str) -> list[Any]:
        return [s for s in self.spans if s.name.startswith(prefix)]


def attributes(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        values[a.key] = getattr(a.value, kind) if kind else None
    return values


def otel_env(endpoint: str) -> dict[str, str]:
    """The standard variables: the endpoint, quick batches, a service name."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "300", "OTEL_SERVICE_NAME": "inn"}


@pytest_twisted.ensureDeferred
async def test_twistd_exports_the_loop_over_otlp_http(tmp_path: Path, processes: Any,
                                                      http: Any) -> None:
    """Set by OTEL_EXPORTER_OTLP_ENDPOINT: Pip's loop arrives as invoke_agent / chat /
    execute_tool spans of one trace, the model server saw each chat span's traceparent,
    the GenAI metrics arrive, and SIGTERM still stops it cleanly."""
    receiver = Receiver()
    port = reactor().listenTCP(0, server.Site(receiver), interface="127.0.0.1")
    model = await start_test_server(SCRIPT, reactor=reactor())
    try:
        endpoint = f"http://127.0.0.1:{port.getHost().port}"
        proc, base = await start_and_wait(processes, tmp_path, write_config(tmp_path, model),
                                          env=otel_env(endpoint))
        await post_json(http, f"{base}/messages", {
            "character": "char:bob", "kind": "say",
            "text": "Pip, put mussel stew on the slate tonight, please."})
        await until(lambda: receiver.named("invoke_agent pip"), "the loop's span")
        await until(lambda: "gen_ai.client.operation.duration" in receiver.metrics
                    and "gen_ai.client.token.usage" in receiver.metrics, "the GenAI metrics")
        proc.signal("TERM")
        await proc.wait_ended()
        assert_stopped_by(proc, signal.SIGTERM)
    finally:
        await model.stop()
        await port.stopListening()
    [root] = receiver.named("invoke_agent pip")
    assert attributes(root)["ai_tools.loop.termination_reason"] == "dangerous_tool"
    assert attributes(root)["gen_ai.agent.name"] == "pip"
    assert receiver.resources[0]["service.name"] == "inn"
    kids = sorted((s for s in receiver.spans if s.parent_span_id == root.span_id),
                  key=lambda s: s.start_time_unix_nano)
    assert [s.name.split(" ")[0] for s in kids] == ["chat", "execute_tool", "chat",
                                                    "execute_tool"]
    assert [attributes(s).get("gen_ai.tool.name") for s in kids[1::2]] == [
        "inspect_location", "set_attribute"]
    assert {s.trace_id for s in kids} == {root.trace_id}
    sent = [r.headers["traceparent"].split("-")[1:3] for r in model.requests]
    assert sent == [[s.trace_id.hex(), s.span_id.hex()] for s in kids[0::2]]


@pytest_twisted.ensureDeferred
async def test_an_unreachable_collector_breaks_nothing(tmp_path: Path, processes: Any,
                                                       http: Any) -> None:
    """The config key names a collector nobody listens on: loops run and answer as
    always, memory stays bounded (spans past the bounded queue are dropped), and the
    stop waits for the export a bounded time only."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    model = await start_test_server(SCRIPT, reactor=reactor())
    try:
        config = write_config(tmp_path, model, service=(
            f'stop_grace = 5.0\notlp_endpoint = "http://127.0.0.1:{dead}"'))
        proc, base = await start_and_wait(processes, tmp_path, config, env={
            "OTEL_BSP_MAX_QUEUE_SIZE": "16", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "8",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
        assert f"exporting traces and metrics over OTLP/HTTP to http://127.0.0.1:{dead}" \
            in proc.stdout
        rss = []
        for loop in range(1, 25):  # 5 spans a loop: the 16-span queue overflows at once
            await post_json(http, f"{base}/messages", {
                "character": "char:bob", "kind": "say", "text": "What soup tonight?"})
            wanted = 2 * loop
            await until(lambda: len(model.requests) >= wanted,  # noqa: B023 (awaited here)
                        "the loops to go on")
            if loop in (4, 24):
                rss.append(_rss_kib(proc.transport.pid))
        assert rss[-1] - rss[0] < 16 * 1024, rss  # no growth with the spans dropped
        started = time.monotonic()
        proc.signal("TERM")
        await proc.wait_ended()
        assert time.monotonic() - started < 20
        assert_stopped_by(proc, signal.SIGTERM)
    finally:
        await model.stop()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")
