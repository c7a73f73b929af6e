"""Sub-agents: budgeted helper loops an assistant delegates a task to.

:class:`Subagents` runs them for one service, in the background: a fresh history,
only the tools the assistant gave (never delegation, persona or sleep tools), at most
``budget`` tool calls.  The report comes back to the assistant as a ``subagent_result``
event; the service waits for (or cancels) the ones in flight when it stops.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.reasons import TerminationReason
from ai_tools.loop import GatePolicy, LoopConfig, LoopContext, LoopControl, LoopResult
from ai_tools.service.assistant import assistant_model
from ai_tools.service.waiting import observe
from ai_tools.telemetry.setup import trace_loop
from ai_tools.tools.base import Actor

if TYPE_CHECKING:
    from ai_tools.service.assistant import Assistant
    from ai_tools.service.service import AssistantService
    from ai_tools.telemetry.loop_tracer import LoopTracer

__all__ = ["Subagents"]

_PERSONA = (
    "You are a helper sub-agent working for {name}. Your only job is the task in the "
    "first message: use your tools to do it, then answer with a short plain-text report "
    "of the result. Do not talk to anyone."
)
_RESULT_CHARS = 4000


def _abandon_trace(result: object, tracer: LoopTracer) -> object:
    """A traced loop ended: close its spans if no ``termination`` event did."""
    tracer.abandon("the loop ended without a termination event")
    return result


def _ignore(_: object) -> None:
    """A failed save of the report is logged and counted by the assistant."""


class Subagents:
    """The sub-agents of one service's assistants (see the module)."""

    def __init__(self, service: AssistantService) -> None:
        self._service = service
        self._running: dict[tuple[str, str], tuple[defer.Deferred[LoopResult], LoopControl]] = {}

    def __len__(self) -> int:
        return len(self._running)

    def start(self, assistant: Assistant, task: str, tool_names: Sequence[str],
              budget: int) -> str:
        """Run a budgeted helper loop in the background; its report becomes an event.

        The helper gets a fresh history, only ``tool_names`` (never delegation,
        persona or sleep tools) and at most ``budget`` tool calls.
        """
        from ai_tools.tools.delegation import NOT_DELEGABLE

        if not isinstance(task, str) or not task.strip():
            raise ValueError("a sub-agent needs a task")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"a sub-agent budget must be a positive integer, not {budget!r}")
        service = self._service
        assistant.count("subagents")
        task_id = f"sub-{assistant.counters['subagents']}"
        allowed = frozenset(n for n in tool_names if n not in NOT_DELEGABLE)
        record: dict[str, object] = {
            "id": task_id, "task": task, "tools": sorted(allowed), "budget": budget,
            "status": "running", "started_at": service.clock.seconds(),
        }
        assistant.record_subagent(task_id, record)
        control = LoopControl()
        ctx = self._context(assistant, task_id, task, allowed, control)
        config = LoopConfig(max_iterations=10, tool_budget=budget,
                            native_tools=assistant.config.native_tools,
                            stream=assistant.config.stream)
        tracer = trace_loop(ctx, service.telemetry, task_id=task_id, parent=(
            assistant.tracer.tool_context() if assistant.tracer is not None else None))
        d: defer.Deferred[LoopResult] = defer.maybeDeferred(service.run_loop, ctx, config)
        if tracer is not None:
            d.addBoth(_abandon_trace, tracer)
        self._running[(assistant.name, task_id)] = (d, control)
        d.addBoth(self._finished, assistant, record)
        service.publish(assistant.name, {"type": "subagent_started", "task_id": task_id})
        return task_id

    def _context(self, assistant: Assistant, task_id: str, task: str,
                 allowed: frozenset[str], control: LoopControl) -> LoopContext:
        """A helper loop's context: a fresh history, the task as its event, few tools."""
        service, name = self._service, assistant.name
        publish = service.publish
        return LoopContext(
            assistant_name=f"{name}/{task_id}",
            actor=Actor(assistant.config.character_id, world=service.world,
                        store=service.store, assistant=assistant),
            registry=service.registry,
            llm=assistant_model(service, assistant.name, assistant.config.model),
            history=ConversationHistory(),
            clock=service.clock,
            cache=service.cache,
            cache_namespace=name,
            gate=GatePolicy(allowed_names=allowed),
            system_prompt=_PERSONA.format(name=name),
            pending_events=[{"type": "task", "from": name, "text": task}],
            on_event=lambda e: publish(name, {**e, "subagent": task_id}),
            observed=functools.partial(service.observed, name),
            stop_check=lambda: assistant.emergency_stopped,
            control=control,
            execution_options={"approval": service.approvals.hook(assistant)},
        )

    def _finished(self, result: LoopResult | Failure, assistant: Assistant,
                  record: dict[str, object]) -> None:
        """Record how a helper loop ended; its report becomes an event of its assistant."""
        task_id = cast(str, record["id"])
        self._running.pop((assistant.name, task_id), None)
        used: int | None = None
        if isinstance(result, Failure):
            status, text, reason = "failed", "", result.getErrorMessage()
        else:
            termination = result.termination_reason
            status = ("stopped" if termination.stopped
                      else "failed" if result.failed else "done")
            reason = termination
            text = result.text[-_RESULT_CHARS:]
            remaining = result.tool_budget_remaining
            used = cast(int, record["budget"]) - remaining if remaining is not None else None
        record.update({"status": status, "result": text, "termination_reason": reason,
                       "tool_calls": used, "finished_at": self._service.clock.seconds()})
        if self._service.roster.hosts(assistant):
            assistant.record_subagent(task_id, record)
            assistant.queue_event({
                "type": "subagent_result", "task_id": task_id, "status": status,
                "text": text or f"(no report; ended with {reason})", "addressed": True,
            }).addErrback(_ignore)

    def stop(self, name: str, reason: str) -> None:
        """Stop the sub-agents of assistant ``name`` (it is being removed)."""
        for key, (_, control) in list(self._running.items()):
            if key[0] == name:
                control.stop(reason)

    def in_flight(self) -> list[defer.Deferred[LoopResult]]:
        """The loops running now."""
        return [d for d, _ in self._running.values()]

    def when_finished(self) -> list[defer.Deferred[None]]:
        """A Deferred per loop running now, firing when it ends (its result untouched)."""
        return [observe(d) for d, _ in list(self._running.values())]

    def cancel(self) -> None:
        """Stop and cancel every loop running (the service stops)."""
        for d, control in list(self._running.values()):
            control.stop("service stopping", TerminationReason.SHUTDOWN)
            d.cancel()
