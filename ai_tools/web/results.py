"""The last loop results of each assistant, rebuilt from the service's loop events.

The service publishes every loop step to its observers (``iteration``,
``tool_call``, ``tool_result``, ``signal``, ``termination``, then ``tick``).
:class:`LoopRecorder` is one such observer: it folds the events of each loop
into a summary (iterations, termination reason, each tool call with its
status, duration and cache hit, the signals) and keeps the newest few per
assistant for ``GET /assistants/{name}/results``.  It knows the loops that
ran while it was attached; the assistant's own ``last_tick`` covers the time
before.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs

__all__ = ["LoopRecorder", "event_owner"]

_TOOL_FIELDS = ("tool", "tool_call_id", "status", "success", "skipped", "duration_ms",
                "from_cache", "iteration")
_END_FIELDS = ("reason", "error", "success", "iterations", "duration_ms")


def event_owner(event: dict[str, Any]) -> str:
    """The assistant a service event belongs to (a sub-agent's ``ada/sub-1`` is Ada's)."""
    return str(event.get("assistant", "")).split("/", 1)[0]


@attrs.define(eq=False)
class LoopRecorder:
    """Keeps the newest ``keep`` loop summaries per assistant (an observer callable)."""

    keep: int = 20
    _open: dict[tuple[str, str | None], dict[str, Any]] = attrs.field(factory=dict, init=False)
    _done: dict[str, deque[dict[str, Any]]] = attrs.field(factory=dict, init=False)

    def __call__(self, event: dict[str, Any]) -> None:
        """Take one service event."""
        kind = event.get("type")
        owner = event_owner(event)
        if not owner:
            return
        subagent = event.get("subagent")
        key = (owner, subagent if isinstance(subagent, str) else None)
        if kind == "iteration":
            loop = self._loop(key, event)
            loop["iterations"] = event.get("iteration", loop["iterations"])
        elif kind == "tool_result":
            self._loop(key, event)["tool_calls"].append(
                {k: event.get(k) for k in _TOOL_FIELDS})
        elif kind == "signal":
            self._loop(key, event)["signals"].append(
                {k: event.get(k) for k in ("tool_name", "arguments", "emitted_at")})
        elif kind == "termination":
            loop = self._open.pop(key) if key in self._open else self._new(key, event)
            for field in _END_FIELDS:
                loop["termination_reason" if field == "reason" else field] = event.get(field)
            loop["finished_at"] = event.get("time")
            self._done.setdefault(owner, deque(maxlen=self.keep)).append(loop)
        elif kind == "removed":
            self.forget(owner)
        elif kind == "tick":
            done = self._done.get(owner)
            if done and done[-1].get("tick") is None and done[-1].get("subagent") is None:
                done[-1]["tick"] = event.get("tick")

    def loops(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest loop summaries of ``name``, oldest first (at most ``limit``)."""
        done = list(self._done.get(name, ()))
        if limit is not None:
            done = done[-limit:] if limit > 0 else []
        return [dict(loop) for loop in done]

    def forget(self, name: str) -> None:
        """Drop what is kept about ``name`` (it was removed)."""
        self._done.pop(name, None)
        for key in [k for k in self._open if k[0] == name]:
            del self._open[key]

    def _loop(self, key: tuple[str, str | None], event: dict[str, Any]) -> dict[str, Any]:
        loop = self._open.get(key)
        if loop is None:
            loop = self._open[key] = self._new(key, event)
        return loop

    @staticmethod
    def _new(key: tuple[str, str | None], event: dict[str, Any]) -> dict[str, Any]:
        return {
            "assistant": key[0],
            "subagent": key[1],
            "tick": None,
            "started_at": event.get("time"),
            "finished_at": None,
            "iterations": 0,
            "termination_reason": None,
            "success": None,
            "error": None,
            "duration_ms": None,
            "tool_calls": [],
            "signals": [],
        }
