"""Tracing in the service: on only when asked, sub-agents under their delegating call."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer

from ai_tools.llm.events import ChatResponse
from ai_tools.telemetry import telemetry_for
from ai_tools.tools.delegation import DelegateTaskTool
from ai_tools.tools.registry import ToolRegistry
from tests.telemetry_fixtures import Recorded, children
from tests.unit.react_fakes import LookTool, SayTool, answer, call, text
from tests.unit.service_fakes import add, make_service, settle

TASK = "Find every lamp in the plaza please"


class ByRole:
    """A model answering the assistant and its helper from a script of its own each."""

    model = "scripted"
    context_window = 100_000

    def __init__(self) -> None:
        self.assistant = [answer(call("delegate_task", {"task": TASK, "tools": ["look"]})),
                          text("A helper is on it.")]
        self.helper = [answer(call("look", {"at": "lamps"})), text("found 3 lamps")]

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None) -> defer.Deferred[ChatResponse]:
        helper = any(m.get("role") == "user" and TASK in str(m.get("content"))
                     for m in messages)
        script = self.helper if helper else self.assistant
        return defer.succeed(script.pop(0) if script else text("nothing more"))

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


def test_a_subagent_is_traced_as_a_child_of_the_delegating_call() -> None:
    """ada delegates; the helper's invoke_agent span is a child of ada's execute_tool
    delegate_task span, in ada's trace, with its own chat and tool spans under it."""
    recorded = Recorded()
    registry = ToolRegistry([DelegateTaskTool, LookTool, SayTool])
    clock, service, _ = make_service(loop=False, llm=ByRole(), registry=registry,
                                     telemetry=recorded.telemetry)
    add(service, clock, name="ada")
    service.send("ada", {"type": "say", "from": "bob", "text": "count the lamps"})
    for _ in range(5):
        clock.advance(1)
        settle(clock)
    helper = recorded.one("invoke_agent ada/sub-1")
    delegate = recorded.one("execute_tool delegate_task")
    assert helper.parent is not None and helper.parent.span_id == delegate.context.span_id
    assert helper.context.trace_id == delegate.context.trace_id
    assert helper.attributes["ai_tools.subagent.task_id"] == "sub-1"
    assert helper.attributes["ai_tools.loop.termination_reason"] == "completed"
    assert [s.name for s in children(helper, recorded.spans)] == [
        "chat scripted", "execute_tool look", "chat scripted"]
    ada = [s for s in recorded.named("invoke_agent ada") if s.name == "invoke_agent ada"]
    assert ada[0].parent is None
    assert ada[0].attributes["ai_tools.tick"] == 1
    assert ada[0].attributes["ai_tools.loop.reflection"] is False
    assert delegate.parent is not None and delegate.parent.span_id == ada[0].context.span_id
    service.stopService()
    settle(clock)


def test_tracing_is_off_by_default_and_costs_no_observer() -> None:
    """No endpoint, no tracer provider set: no telemetry; the loop's observer is the
    service's own publisher (nothing wraps it)."""
    assert telemetry_for(None, environ={}) is None
    clock, service, loop = make_service()
    assert service.telemetry is None
    assert loop is not None
    add(service, clock, name="ada")
    service.send("ada", "hi")
    settle(clock)
    clock.advance(1)
    settle(clock)
    ctx, _ = loop.calls[0]
    assert ctx.on_request is None
    assert getattr(ctx.on_event, "func", None) == service.publish


def test_disabled_by_the_standard_variable() -> None:
    """OTEL_SDK_DISABLED wins over an endpoint."""
    assert telemetry_for("http://127.0.0.1:4318", environ={"OTEL_SDK_DISABLED": "true"}) is None


def test_variables_the_sdk_refuses_leave_the_service_running_untraced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch larger than the queue: a clear error in the log, tracing off, no crash."""
    from tests.unit.service_fakes import LogCapture

    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
    with LogCapture() as logs:
        found = telemetry_for("http://127.0.0.1:4318", environ={})
    assert found is None
    assert any("OpenTelemetry export not started" in e.get("log_format", "")
               for e in logs.events)


LIBRARY_HOST = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from twisted.internet import task
from ai_tools.service.service import AssistantService

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)          # the embedding program's own set-up
service = AssistantService(clock=task.Clock())
service.startService()
tracer = service.telemetry.loop_tracer("ada", None)
tracer({"type": "termination", "reason": "completed", "iterations": 1})
print([s.name for s in exporter.get_finished_spans()], service.telemetry.providers)
"""


def test_a_library_host_s_own_tracer_provider_is_used() -> None:
    """A program that set its tracer provider (no OTEL_* variable at all) gets its loops
    traced into it, and ai_tools makes no provider of its own (a process of its own:
    the global provider can be set once)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", LIBRARY_HOST], capture_output=True,
                          text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['invoke_agent ada'] ()"


def test_the_otlp_endpoint_setting_must_be_an_http_url() -> None:
    """A bad value, in the file or a variable, is a clear error naming it."""
    from ai_tools.standalone.overrides import Overrides
    from tests.unit.test_config import base_config, error_of

    data = base_config()
    data.setdefault("service", {})["otlp_endpoint"] = "collector:4318"
    assert "service.otlp_endpoint must be an http:// or https:// URL" in error_of(data)
    data["service"]["otlp_endpoint"] = 4318
    assert "service.otlp_endpoint must be a string" in error_of(data)
    message = error_of(base_config(), Overrides(environ={"AI_TOOLS_OTLP_ENDPOINT": "udp://x"}))
    assert "AI_TOOLS_OTLP_ENDPOINT" in message and "http://" in message


class Chatty:
    """A model that always answers in words (no tool call)."""

    model = "scripted"
    context_window = 100_000

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None) -> defer.Deferred[ChatResponse]:
        return defer.succeed(text("Noted."))

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


def test_the_loops_of_one_tick_are_linked_not_nested() -> None:
    """A tick that reflects, then answers: two invoke_agent roots with the same tick number,
    the second linking the first (no span per tick)."""
    recorded = Recorded()
    clock, service, _ = make_service(loop=False, llm=Chatty(), telemetry=recorded.telemetry)
    add(service, clock, name="ada", reflection_interval=2)
    for _ in range(2):
        service.send("ada", {"type": "say", "from": "bob", "text": "hi"})
        clock.advance(1)
        settle(clock)
    before = len(recorded.named("invoke_agent ada"))
    service.send("ada", {"type": "say", "from": "bob", "text": "and now?"})
    clock.advance(1)
    settle(clock)
    reflection, answer_loop = recorded.named("invoke_agent ada")[before:]
    assert reflection.attributes["ai_tools.loop.reflection"] is True
    assert answer_loop.attributes["ai_tools.loop.reflection"] is False
    assert reflection.attributes["ai_tools.tick"] == answer_loop.attributes["ai_tools.tick"]
    assert reflection.parent is None and answer_loop.parent is None
    assert not reflection.links
    assert [link.context.span_id for link in answer_loop.links] == [
        reflection.context.span_id]
    assert len(recorded.spans) == len(recorded.named("invoke_agent")) + len(
        recorded.named("chat"))  # nothing else: no tick spans
    service.stopService()
    settle(clock)
