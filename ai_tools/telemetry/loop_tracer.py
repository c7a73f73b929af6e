"""One loop's spans, made from the loop's own events: :class:`LoopTracer`.

A loop publishes what it does (``iteration``, ``model_request``, ``tool_call``,
``tool_result``, ``signal``, ``termination``; see ``docs/http-api.md``) to its
``on_event`` observer, and the model client tells an ``on_request`` observer of
each HTTP attempt.  A :class:`LoopTracer` is both, for one loop: it opens and
closes the spans of the GenAI conventions (:mod:`ai_tools.telemetry.conventions`)
as the events arrive, each with an explicit parent taken from the loop's own
structure — never from a context variable, which ``inlineCallbacks`` and
callbacks do not carry faithfully when hundreds of loops interleave on one
reactor:

* ``invoke_agent {assistant}`` — the loop (a root, or a child of the delegating
  tool call for a sub-agent);
* ``chat {model}`` — one model request, from its ``iteration`` event to its
  ``model_request`` event; each HTTP attempt is an event on it and carries its
  ``traceparent``;
* ``execute_tool {tool}`` — one tool call, from ``tool_call`` to ``tool_result``.

Only attached when tracing is on: with it off the loop has no tracer at all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode

import ai_tools.telemetry.conventions as sc
from ai_tools.execution.reasons import FAILURE_REASONS
from ai_tools.json_types import JSONMapping
from ai_tools.llm.events import RequestAttempt

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from ai_tools.telemetry.setup import Telemetry

__all__ = ["LoopTracer", "fail", "tool_result_attributes"]

Event = dict[str, object]
"""A loop event (``docs/http-api.md``)."""
Observer = Callable[[Event], None]
Attributes = dict[str, "AttributeValue"]

_REFUSALS = frozenset({"unknown_tool", "blocked_by_tool_mode", "no_character",
                       "invalid_parameters"})
"""Tool statuses of a call refused before it ran."""



class LoopTracer:
    """The spans of one loop; call it with each loop event, ``on_request`` with attempts.

    ``then`` is the observer the events go on to (the service's publisher).
    ``telemetry`` is the :class:`~ai_tools.telemetry.setup.Telemetry` in use;
    ``attributes`` go on the loop's span besides the conventions' (its tick);
    ``links`` are span contexts it relates to without being their child (the
    loops that ran before it in the same tick).
    """

    __slots__ = ("_chat", "_content", "_handlers", "_model", "_parent_tool", "_root",
                 "_server", "_telemetry", "_text", "_then", "_tokens", "_tools")

    def __init__(self, telemetry: Telemetry, assistant: str, llm: object, *,
                 parent: Context | None = None, then: Observer | None = None,
                 task_id: str | None = None,
                 attributes: Mapping[str, AttributeValue] | None = None,
                 links: Sequence[SpanContext] = ()) -> None:
        self._telemetry = telemetry
        self._then = then
        self._content: bool = telemetry.capture_content
        self._model = _model_names(llm)
        self._server = _server_of(llm)
        root: Attributes = {
            sc.OPERATION_NAME: sc.INVOKE_AGENT, sc.PROVIDER_NAME: sc.PROVIDER_OPENAI,
            sc.AGENT_NAME: assistant, sc.AGENT_ID: assistant, **(attributes or {})}
        if self._model[1]:
            root[sc.REQUEST_MODEL] = self._model[1]
        if task_id is not None:
            root[sc.SUBAGENT_TASK] = task_id
        self._root: Span = telemetry.tracer.start_span(
            f"{sc.INVOKE_AGENT} {assistant}", context=parent or Context(),
            kind=SpanKind.INTERNAL, attributes=root,
            links=[Link(context) for context in links if context.is_valid])
        self._chat: Span | None = None
        self._text: list[str] | None = None
        self._tools: dict[str, Span] = {}
        self._parent_tool: Span | None = None
        self._tokens = [0, 0]
        self._handlers: dict[str, Callable[[Event], None]] = {
            "iteration": self._iteration, "model_request": self._model_request,
            "tool_call": self._tool_call, "tool_result": self._tool_result,
            "signal": self._signal, "termination": self._termination,
            "text_delta": self._text_delta}

    # -- the observers --------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        """One loop event: the spans it opens or closes, then on to ``then``."""
        handler = self._handlers.get(str(event.get("type", "")))
        if handler is not None:
            try:
                handler(event)
            except Exception:  # a tracing fault must never cost the loop anything
                self._telemetry.log.failure("Tracing a {kind} event failed",
                                            kind=event.get("type"))
        if self._then is not None:
            self._then(event)

    def on_request(self, attempt: RequestAttempt) -> None:
        """An HTTP attempt of the model request in flight: its event and ``traceparent``."""
        chat = self._chat or self._open_chat()
        chat.add_event(sc.ATTEMPT_EVENT, {"attempt": attempt.attempt,
                                          "retry_of": attempt.retry_of or ""})
        propagate.inject(attempt.headers, context=trace.set_span_in_context(chat))

    def tool_context(self) -> Context | None:
        """The context of the tool call running now (a sub-agent's parent), if any."""
        span = self._parent_tool
        return trace.set_span_in_context(span) if span is not None else None

    def call_context(self, call_id: str | None) -> Context | None:
        """The context of the ``execute_tool`` span of the call ``call_id`` in flight (the
        parent of what the call does elsewhere: an MCP request), None if none is."""
        span = self._tools.get(call_id) if call_id is not None else None
        return trace.set_span_in_context(span) if span is not None else None

    @property
    def root(self) -> Span:
        """The loop's ``invoke_agent`` span."""
        return self._root

    # -- model requests -------------------------------------------------------------------

    def _open_chat(self, start: int | None = None) -> Span:
        profile, model = self._model
        attributes: Attributes = {sc.OPERATION_NAME: sc.CHAT,
                                      sc.PROVIDER_NAME: sc.PROVIDER_OPENAI}
        if model:
            attributes[sc.REQUEST_MODEL] = model
        if profile:
            attributes[sc.MODEL_PROFILE] = profile
        attributes.update(self._server)
        chat = self._chat = self._telemetry.tracer.start_span(
            f"{sc.CHAT} {model or 'model'}", context=trace.set_span_in_context(self._root),
            kind=SpanKind.CLIENT, attributes=attributes, start_time=start)
        self._text = [] if self._content else None
        return chat

    def _iteration(self, event: Event) -> None:
        if self._chat is None:  # the model is asked right after (no wait in between)
            self._open_chat()

    def _text_delta(self, event: Event) -> None:
        if self._text is not None:
            text = event.get("text")
            self._text.append(text if isinstance(text, str) else "")

    def _model_request(self, event: Event) -> None:
        latency = _number(event.get("latency_ms")) / 1000.0
        chat = self._chat
        if chat is None:  # (no iteration event came: start it when the request did)
            chat = self._open_chat(start=_now_ns() - int(latency * 1e9))
        self._chat = None
        status = str(event.get("status") or "ok")
        attributes = _chat_result(event)
        self._add_tokens(attributes)
        if self._text is not None:
            attributes[sc.OUTPUT_MESSAGES] = self._telemetry.clip(json.dumps(
                [{"role": "assistant", "parts": [{"type": "text",
                                                  "content": "".join(self._text)}]}]))
            self._text = None
        chat.set_attributes(attributes)
        if status != "ok":
            fail(chat, status, event.get("error"))
        chat.end()
        self._telemetry.record_request(self._model[1], event, self._server, latency)

    def _add_tokens(self, attributes: Attributes) -> None:
        tokens = self._tokens
        for index, key in enumerate((sc.USAGE_INPUT_TOKENS, sc.USAGE_OUTPUT_TOKENS)):
            value = attributes.get(key, 0)
            tokens[index] += value if isinstance(value, int) else 0

    # -- tool calls -----------------------------------------------------------------------

    def _tool_call(self, event: Event) -> None:
        name = str(event.get("tool") or "")
        call_id = str(event.get("tool_call_id") or "")
        attributes: Attributes = {sc.OPERATION_NAME: sc.EXECUTE_TOOL, sc.TOOL_NAME: name,
                                      sc.TOOL_CALL_ID: call_id, sc.TOOL_TYPE: "function"}
        category = event.get("category")
        if category:
            attributes[sc.TOOL_CATEGORY] = str(category)
        if self._content and event.get("arguments") is not None:
            attributes[sc.TOOL_CALL_ARGUMENTS] = self._telemetry.clip(
                json.dumps(event["arguments"], ensure_ascii=False, default=str))
        span = self._telemetry.tracer.start_span(
            f"{sc.EXECUTE_TOOL} {name}", context=trace.set_span_in_context(self._root),
            kind=SpanKind.INTERNAL, attributes=attributes)
        self._tools[call_id] = self._parent_tool = span

    def _tool_result(self, event: Event) -> None:
        call_id = str(event.get("tool_call_id") or "")
        started = self._tools.pop(call_id, None)
        if started is not None:
            span: Span = started
        else:  # skipped: never started, answered at once
            name = str(event.get("tool") or "")
            span = self._telemetry.tracer.start_span(
                f"{sc.EXECUTE_TOOL} {name}", context=trace.set_span_in_context(self._root),
                kind=SpanKind.INTERNAL, attributes={
                    sc.OPERATION_NAME: sc.EXECUTE_TOOL, sc.TOOL_NAME: name,
                    sc.TOOL_CALL_ID: call_id, sc.TOOL_TYPE: "function"})
        if span is self._parent_tool:
            self._parent_tool = None
        status = str(event.get("status") or "")
        span.set_attributes(tool_result_attributes(event, status))
        result = event.get("result")
        if self._content and isinstance(result, str):
            span.set_attribute(sc.TOOL_CALL_RESULT, self._telemetry.clip(result))
        if not event.get("success") and not event.get("skipped"):
            fail(span, status or "tool_error", event.get("error"))
        span.end()

    # -- the loop's end -------------------------------------------------------------------

    def _signal(self, event: Event) -> None:
        self._root.add_event(sc.SIGNAL_EVENT, {"tool": str(event.get("tool_name") or "")})

    def _termination(self, event: Event) -> None:
        """Close whatever is open (a kill leaves the call in flight open), then the loop."""
        reason = str(event.get("reason") or "")
        if self._chat is not None:
            fail(self._chat, "cancelled", "the loop ended during the request")
            self._chat.end()
            self._chat = None
        for span in self._tools.values():
            span.set_attribute(sc.TOOL_STATUS, "cancelled")
            fail(span, "cancelled", f"the loop ended during the call ({reason})")
            span.end()
        self._tools.clear()
        self._parent_tool = None
        root = self._root
        root.set_attributes({
            sc.TERMINATION_REASON: reason, sc.ITERATIONS: _int(event.get("iterations")),
            sc.EVENTS_RETURNED: _int(event.get("events_returned")),
            sc.USAGE_INPUT_TOKENS: self._tokens[0], sc.USAGE_OUTPUT_TOKENS: self._tokens[1]})
        if reason in FAILURE_REASONS:
            fail(root, reason, event.get("error"))
        root.end()

    def abandon(self, why: str) -> None:
        """The loop ended without a ``termination`` event (it could not run): close all."""
        if self._root.is_recording():
            self._termination({"reason": why, "error": why})


def _number(value: object) -> float:
    """A measure of an event (0 when missing or not a number)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _int(value: object) -> int:
    """A count of an event (0 when missing or not a number)."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _chat_result(event: JSONMapping) -> Attributes:
    """The attributes a ``model_request`` event gives its ``chat`` span."""
    attempts = _int(event.get("attempts"))
    attributes: Attributes = {sc.MODEL_ATTEMPTS: attempts}
    if attempts > 1:
        attributes[sc.RESEND_COUNT] = attempts - 1
    for key, name in (("prompt_tokens", sc.USAGE_INPUT_TOKENS),
                      ("completion_tokens", sc.USAGE_OUTPUT_TOKENS)):
        value = event.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            attributes[name] = value
    if event.get("response_model"):
        attributes[sc.RESPONSE_MODEL] = str(event["response_model"])
    if event.get("finish_reason"):
        attributes[sc.RESPONSE_FINISH_REASONS] = (str(event["finish_reason"]),)
    return attributes


def tool_result_attributes(event: JSONMapping, status: str) -> Attributes:
    """The attributes a ``tool_result`` event gives its ``execute_tool`` span."""
    attributes: Attributes = {
        sc.TOOL_STATUS: status, sc.TOOL_FROM_CACHE: bool(event.get("from_cache")),
        sc.TOOL_ATTEMPTS: _int(event.get("attempts")),
        sc.TOOL_TIMED_OUT: status == "timed_out"}
    if status in _REFUSALS:
        attributes[sc.TOOL_REFUSED] = status
    if event.get("skipped"):
        attributes[sc.TOOL_SKIPPED] = True
    return attributes


def fail(span: Span, error_type: str, description: object) -> None:
    """Mark ``span`` failed: ``error.type`` and an ERROR status saying ``description``."""
    span.set_attribute(sc.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, str(description or error_type)[:1024]))


def _model_names(llm: object) -> tuple[str | None, str | None]:
    """The model profile's label and the model's name (as ``model_request`` events say)."""
    profile = getattr(llm, "profile", None)
    model = getattr(llm, "model", None)
    return (getattr(profile, "label", None), model if isinstance(model, str) else None)


def _server_of(llm: object) -> Attributes:
    """``server.address`` and ``server.port`` of the client's chat URL (none if unknown)."""
    url = getattr(getattr(llm, "profile", None), "chat_url", None)
    if not isinstance(url, str):
        return {}
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    return {sc.SERVER_ADDRESS: parts.hostname or "", sc.SERVER_PORT: port}


def _now_ns() -> int:
    return time.time_ns()
