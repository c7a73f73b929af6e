"""The service's board of tool calls waiting for an operator's approval.

An assistant whose ``approval`` (or ``tool_approval``) setting asks for it
makes a call wait here before it runs (:mod:`ai_tools.execution.approval`).
Each waiting call has a short id; an operator answers yes or no through the
HTTP API, the web console, the manhole or an in-game command (all call
:meth:`ApprovalBoard.decide`).  Every wait is bounded: after the assistant's
``approval_timeout`` the call is refused as timed out.  A kill or stop of the
loop withdraws the request.  When the service stops (a restart), every call
still waiting is refused, one log line each: a yes given to a process that
is gone would approve nothing, and the model learns the call did not run.

Events (``type``): ``approval_requested`` (the request: ``id``, ``tool``,
``arguments``, ``reasoning``, ``expires_at``), ``approval_decided``
(``id``, ``approved``, ``by``, ``reason``, ``timed_out``), and
``approval_withdrawn`` (the loop was stopped while it waited).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from ai_tools.errors import NotFound
from ai_tools.execution.approval import ApprovalDecision, ApprovalHook, needs_approval
from ai_tools.execution.results import CLIPPED_KEY, clip_arguments, clip_text
from ai_tools.json_types import JSONMapping
from ai_tools.llm.events import ToolCall
from ai_tools.tools.base import Tool

if TYPE_CHECKING:
    from ai_tools.service.assistant import Assistant

__all__ = ["MAX_PENDING_APPROVALS", "ApprovalBoard", "PendingApproval"]

log = Logger()

MAX_PENDING_APPROVALS = 1000
"""Calls that may wait at once in one service; beyond it a call is refused at once."""

_SHOWN_BYTES = 2048
"""How much of a call's arguments and reasoning a request shows (events, lists)."""

MAX_REASON = 500
"""Characters of an operator's reason kept (the rest is cut)."""


@attrs.define(eq=False)
class PendingApproval:
    """One call waiting for an operator."""

    id: str
    assistant: str
    tool: str
    tool_call_id: str
    arguments: dict[str, object]
    reasoning: str
    requested_at: float
    expires_at: float
    waiting: defer.Deferred[ApprovalDecision] = attrs.field(repr=False)
    timer: IDelayedCall | None = attrs.field(default=None, repr=False)

    def as_dict(self) -> dict[str, object]:
        """What lists and events show of it."""
        return {"id": self.id, "assistant": self.assistant, "tool": self.tool,
                "tool_call_id": self.tool_call_id, "arguments": self.arguments,
                "reasoning": self.reasoning, "requested_at": self.requested_at,
                "expires_at": self.expires_at}


def _shown_arguments(call: ToolCall) -> dict[str, object]:
    try:
        clipped = clip_arguments(call.arguments_json, _SHOWN_BYTES)
    except (TypeError, ValueError, RecursionError):
        return {CLIPPED_KEY: "[arguments that are not plain JSON]"}
    return dict(call.arguments) if clipped is None else dict(clipped)


@attrs.define(eq=False)
class ApprovalBoard:
    """The calls of one service waiting for approval, by id.

    ``clock`` times the waits out; ``publish(assistant, event)`` hands events
    to the service's observers (the event stream, the console).
    """

    clock: IReactorTime
    publish: Callable[[str, dict[str, object]], None]
    max_pending: int = MAX_PENDING_APPROVALS
    _pending: dict[str, PendingApproval] = attrs.field(init=False, factory=dict)

    def hook(self, assistant: Assistant) -> ApprovalHook:
        """The engine's approval hook for ``assistant`` (its current ``config`` decides)."""

        def ask(tool: Tool, call: ToolCall, params: JSONMapping
                ) -> defer.Deferred[ApprovalDecision] | None:
            config = assistant.config
            if not needs_approval(tool, config.approval, config.tool_approval):
                return None
            return self.request(assistant.name, tool.name, call, config.approval_timeout)

        return ask

    def request(self, assistant: str, tool: str, call: ToolCall,
                timeout: float) -> defer.Deferred[ApprovalDecision]:
        """Put ``call`` on the board; the Deferred fires with the decision."""
        if len(self._pending) >= self.max_pending:
            log.warn("Tool call {tool} of {assistant} refused: {count} calls already wait "
                     "for approval", tool=tool, assistant=assistant, count=len(self._pending))
            return defer.succeed(ApprovalDecision(
                False, by="service", reason="too many calls are waiting for approval"))
        approval_id = self._new_id()
        now = self.clock.seconds()
        waiting: defer.Deferred[ApprovalDecision] = defer.Deferred(
            lambda _: self._withdraw(approval_id))
        pending = self._pending[approval_id] = PendingApproval(
            approval_id, assistant, tool, call.id, _shown_arguments(call),
            clip_text(call.reasoning or "", _SHOWN_BYTES), now, now + timeout, waiting)
        pending.timer = self.clock.callLater(timeout, self._expire, approval_id, timeout)
        log.info("Tool call {tool} of {assistant} waits for approval {id} (at most {timeout}s)",
                 tool=tool, assistant=assistant, id=approval_id, timeout=timeout)
        self.publish(assistant, {"type": "approval_requested", **pending.as_dict()})
        return waiting

    def _new_id(self) -> str:
        while True:
            approval_id = secrets.token_hex(4)
            if approval_id not in self._pending:
                return approval_id

    def pending(self, assistant: str | None = None) -> list[dict[str, object]]:
        """The calls waiting (of one assistant, or all), oldest first."""
        return [p.as_dict() for p in sorted(self._pending.values(),
                                            key=lambda p: p.requested_at)
                if assistant is None or p.assistant == assistant]

    def get(self, approval_id: str) -> dict[str, object]:
        """One waiting call (NotFound if none has this id)."""
        return self._find(approval_id).as_dict()

    def _find(self, approval_id: str) -> PendingApproval:
        pending = self._pending.get(approval_id) if isinstance(approval_id, str) else None
        if pending is None:
            raise NotFound(f"no call waits for approval {approval_id!r} (answered, timed out "
                           "or withdrawn already?)")
        return pending

    def decide(self, approval_id: str, approved: bool, by: str,
               reason: str = "") -> dict[str, object]:
        """An operator's answer; the call runs (yes) or is refused (no) at once.

        NotFound if nothing waits under ``approval_id``.  Returns the request
        with the decision.
        """
        pending = self._find(approval_id)
        decision = ApprovalDecision(bool(approved), by=by, reason=clip_text(reason, MAX_REASON)
                                    if reason else "")
        log.info("Approval {id} ({tool} of {assistant}) {verdict} by {by}{why}", id=approval_id,
                 tool=pending.tool, assistant=pending.assistant,
                 verdict="granted" if decision.approved else "refused", by=by,
                 why=f": {decision.reason}" if decision.reason else "")
        return self._settle(pending, decision)

    def refuse_all(self, reason: str) -> list[str]:
        """Refuse every waiting call (the service stops); one warning each.  The ids."""
        ids = list(self._pending)
        for approval_id in ids:
            pending = self._pending[approval_id]
            log.warn("Refused approval {id} ({tool} of {assistant}) still waiting: {reason}",
                     id=approval_id, tool=pending.tool, assistant=pending.assistant,
                     reason=reason)
            self._settle(pending, ApprovalDecision(False, by="service", reason=reason))
        return ids

    def _expire(self, approval_id: str, timeout: float) -> None:
        pending = self._pending.get(approval_id)
        if pending is None:
            return
        pending.timer = None
        log.warn("Approval {id} ({tool} of {assistant}) timed out after {timeout}s",
                 id=approval_id, tool=pending.tool, assistant=pending.assistant,
                 timeout=timeout)
        self._settle(pending, ApprovalDecision(
            False, by="service", reason=f"no answer within {timeout:g}s", timed_out=True))

    def _settle(self, pending: PendingApproval, decision: ApprovalDecision) -> dict[str, object]:
        del self._pending[pending.id]
        self._stop_timer(pending)
        answer = {**pending.as_dict(), "approved": decision.approved, "by": decision.by,
                  "reason": decision.reason, "timed_out": decision.timed_out}
        self.publish(pending.assistant, {"type": "approval_decided", **answer})
        pending.waiting.callback(decision)
        return answer

    def _withdraw(self, approval_id: str) -> None:
        """The loop stopped while the call waited (the Deferred was cancelled)."""
        pending = self._pending.pop(approval_id, None)
        if pending is None:
            return
        self._stop_timer(pending)
        log.info("Approval {id} ({tool} of {assistant}) withdrawn: the loop was stopped",
                 id=approval_id, tool=pending.tool, assistant=pending.assistant)
        self.publish(pending.assistant, {"type": "approval_withdrawn", **pending.as_dict()})

    @staticmethod
    def _stop_timer(pending: PendingApproval) -> None:
        timer, pending.timer = pending.timer, None
        if timer is not None and timer.active():
            timer.cancel()
