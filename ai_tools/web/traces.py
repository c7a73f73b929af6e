"""Loop traces for the console: built from the service's events, kept in the store.

:class:`TraceRecorder` observes the service's loop events (``iteration``,
``model_request``, ``tool_call``, ``tool_result``, ``signal``, ``termination``) and
folds each loop into a trace: when it started and ended, why, its token totals, and
its spans — each model request (tokens, HTTP attempts, status) and tool call (status,
cache hit, refusal, attempts, error) with its offset and duration.  A finished trace
goes to the store (``save_trace``: the newest ``keep`` per assistant survive a
restart); a running one is answered *live* in the same shape, so the console draws
the live loop and a past one with one view.  A sub-agent's loop is its assistant's
(``loop`` names it).  Everything is bounded: :data:`MAX_SPANS` spans a trace,
:data:`TEXT_CHARS` characters an error, one open trace per running loop.

:func:`trace_search` reads ``GET /traces``'s query into a
:class:`~ai_tools.store.traces.TraceFilter`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.server import Request

from ai_tools.execution.reasons import FAILURE_REASONS
from ai_tools.store.traces import TraceFilter
from ai_tools.web.errors import ApiError
from ai_tools.web.query import query_int, query_text
from ai_tools.web.results import event_owner

__all__ = ["MAX_SPANS", "TraceRecorder", "trace_search"]

log = Logger()

MAX_SPANS = 400
"""Most spans one trace keeps (later ones are counted in ``dropped_spans``)."""
TEXT_CHARS = 300
"""Longest error text a span keeps."""

_REFUSALS = frozenset({"unknown_tool", "blocked_by_tool_mode", "no_character",
                       "invalid_parameters"})
_KINDS = frozenset({"iteration", "model_request", "tool_call", "tool_result", "signal",
                    "termination", "removed"})


def _clip(text: Any) -> str | None:
    return None if text is None else str(text)[:TEXT_CHARS]


@attrs.define(eq=False)
class _Open:
    """One loop being traced."""

    trace: dict[str, Any]
    chat: dict[str, Any] | None = None
    tools: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    def offset_ms(self, at: float) -> float:
        return round((at - self.trace["started_at"]) * 1000.0, 3)

    def add(self, span: dict[str, Any]) -> None:
        spans = self.trace["spans"]
        if len(spans) < MAX_SPANS:
            spans.append(span)
        else:
            self.trace["dropped_spans"] = self.trace.get("dropped_spans", 0) + 1


@attrs.define(eq=False)
class TraceRecorder:
    """The traces of the loops that run while it observes (a service observer)."""

    store: Any = None
    """Where finished traces go (a store with ``save_trace``; None or without it: none)."""
    keep: int = 50
    """Traces kept per assistant (the API's ``traces_kept`` limit)."""
    prices: Callable[[Any], Any] = lambda profile: None
    """The :class:`~ai_tools.llm.profile.Prices` of a model profile (by its label), or
    None: a request of a priced profile gets a ``cost``, and its loop the sum."""
    _open: dict[str, _Open] = attrs.field(factory=dict, init=False)
    _saving: set[defer.Deferred[Any]] = attrs.field(factory=set, init=False)

    @property
    def stores(self) -> bool:
        """Whether finished traces are kept in the store."""
        return self.keep > 0 and callable(getattr(self.store, "save_trace", None))

    def __call__(self, event: dict[str, Any]) -> None:
        """Take one service event."""
        kind = event.get("type")
        if kind not in _KINDS:
            return
        loop = str(event.get("assistant") or "")
        if kind == "removed":
            for key in [k for k in self._open if event_owner({"assistant": k}) == loop]:
                del self._open[key]
            return
        at = float(event.get("time") or 0.0)
        handler: Callable[[str, _Open, dict[str, Any], float], None] = getattr(
            self, f"_{kind}")
        handler(loop, self._loop(loop, event, at), event, at)

    def live(self, owner: str | None = None) -> list[dict[str, Any]]:
        """The traces of the loops running now (of ``owner``'s, or all), in the stored
        shape with ``live`` true."""
        return [{**o.trace, "spans": list(o.trace["spans"]), "live": True}
                for key, o in self._open.items()
                if owner is None or event_owner({"assistant": key}) == owner]

    def flush(self) -> defer.Deferred[None]:
        """Fires once the traces being written are (for a clean stop, and tests)."""
        waits = list(self._saving)
        return defer.DeferredList(waits).addCallback(lambda _: None)

    # -- the events -------------------------------------------------------------------

    def _loop(self, loop: str, event: dict[str, Any], at: float) -> _Open:
        found = self._open.get(loop)
        if found is None:
            owner = event_owner(event)
            found = self._open[loop] = _Open({
                "assistant": owner, "loop": loop, "started_at": at, "ended_at": at,
                "reason": "", "failed": False, "error": None, "iterations": 0,
                "input_tokens": 0, "output_tokens": 0, "tools": [], "spans": []})
        return found

    def _iteration(self, loop: str, o: _Open, event: dict[str, Any], at: float) -> None:
        o.trace["iterations"] = event.get("iteration", o.trace["iterations"])
        o.chat = {"kind": "chat", "name": "model", "start_ms": o.offset_ms(at),
                  "iteration": event.get("iteration")}

    def _model_request(self, loop: str, o: _Open, event: dict[str, Any], at: float) -> None:
        duration = float(event.get("latency_ms") or 0.0)
        span = o.chat or {"kind": "chat", "start_ms": max(o.offset_ms(at) - duration, 0.0)}
        o.chat = None
        tokens_in, tokens_out = event.get("prompt_tokens"), event.get("completion_tokens")
        span.update({
            "name": str(event.get("model") or "model"), "duration_ms": duration,
            "status": str(event.get("status") or "ok"),
            "attempts": event.get("attempts"), "input_tokens": tokens_in,
            "output_tokens": tokens_out, "finish_reason": event.get("finish_reason"),
            "error": _clip(event.get("error"))})
        trace = o.trace
        tokens_in = tokens_in if isinstance(tokens_in, int) else 0
        tokens_out = tokens_out if isinstance(tokens_out, int) else 0
        trace["input_tokens"] += tokens_in
        trace["output_tokens"] += tokens_out
        prices = self.prices(event.get("profile"))
        if prices is not None:
            span["cost"] = prices.cost(tokens_in, tokens_out)
            trace["cost"] = trace.get("cost", 0.0) + span["cost"]
            trace["currency"] = prices.currency
        o.add(span)

    def _tool_call(self, loop: str, o: _Open, event: dict[str, Any], at: float) -> None:
        o.tools[str(event.get("tool_call_id"))] = {
            "kind": "tool", "name": str(event.get("tool") or ""), "start_ms": o.offset_ms(at),
            "category": event.get("category"), "tool_call_id": event.get("tool_call_id")}

    def _tool_result(self, loop: str, o: _Open, event: dict[str, Any], at: float) -> None:
        duration = float(event.get("duration_ms") or 0.0)
        span = o.tools.pop(str(event.get("tool_call_id")), None) or {
            "kind": "tool", "name": str(event.get("tool") or ""),
            "start_ms": max(o.offset_ms(at) - duration, 0.0),
            "tool_call_id": event.get("tool_call_id")}
        status = str(event.get("status") or "")
        span.update({"duration_ms": duration, "status": status,
                     "success": bool(event.get("success")),
                     "from_cache": bool(event.get("from_cache")),
                     "attempts": event.get("attempts"),
                     "refused": status if status in _REFUSALS else None,
                     "skipped": bool(event.get("skipped")), "error": _clip(event.get("error"))})
        if span["name"] and span["name"] not in o.trace["tools"]:
            o.trace["tools"].append(span["name"])
        o.add(span)

    def _signal(self, loop: str, o: _Open, event: dict[str, Any], at: float) -> None:
        o.add({"kind": "signal", "name": str(event.get("tool_name") or ""),
               "start_ms": o.offset_ms(at), "duration_ms": 0.0})

    def _termination(self, loop: str, o: _Open, event: dict[str, Any], at: float) -> None:
        del self._open[loop]
        for span in o.tools.values():  # killed in flight
            span.update({"duration_ms": max(o.offset_ms(at) - span["start_ms"], 0.0),
                         "status": "cancelled", "success": False})
            o.add(span)
        reason = str(event.get("reason") or "")
        o.trace.update({"ended_at": at, "reason": reason, "error": _clip(event.get("error")),
                        "failed": reason in FAILURE_REASONS,
                        "iterations": event.get("iterations", o.trace["iterations"]),
                        "duration_ms": event.get("duration_ms")})
        if self.stores:
            self._save(o.trace)

    def _save(self, trace: dict[str, Any]) -> None:
        try:
            d: defer.Deferred[Any] = self.store.save_trace(trace, self.keep)
        except Exception:
            d = defer.fail()
        self._saving.add(d)
        d.addErrback(lambda f: log.error("The trace of {loop} was not stored: {error}",
                                         loop=trace["loop"], error=f.getErrorMessage()))
        d.addBoth(lambda _: self._saving.discard(d))


def trace_search(request: Request) -> TraceFilter:
    """``GET /traces``'s query (``assistant``, ``reason``, ``tool``, ``failed``, ``since``,
    ``until``: seconds since the epoch, ``limit``) as a filter; 400 for a bad value."""
    failed = query_text(request, "failed")
    if failed not in (None, "", "true", "false"):
        raise ApiError(400, f"failed must be true or false, not {failed!r}", field="failed")
    return TraceFilter(
        assistant=query_text(request, "assistant") or None,
        reason=query_text(request, "reason") or None,
        tool=query_text(request, "tool") or None,
        failed=None if not failed else failed == "true",
        since=query_int(request, "since", None, 0, 2**40),
        until=query_int(request, "until", None, 0, 2**40),
        limit=query_int(request, "limit", 50, 1, 200) or 50)
