"""How a service stops: nothing new starts, what runs ends (bounded), everything is saved.

:class:`Stopping` runs the steps of ``AssistantService.stopService`` in order: the
timer stops, the lease manager is told, characters stop hearing, calls waiting for an
operator are refused, ticks and sub-agents in flight get ``stop_grace`` seconds and
are then cancelled (their loops end ``shutdown``), every assistant's state is written,
the other workers may take the assistants, and the model clients and the store close.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from ai_tools.execution.reasons import TerminationReason
from ai_tools.service.waiting import within

if TYPE_CHECKING:
    from ai_tools.service.approvals import ApprovalBoard
    from ai_tools.service.scheduling import TickScheduler
    from ai_tools.service.service import AssistantService
    from ai_tools.service.state_writer import StateWriter

__all__ = ["Stopping"]

log = Logger()


class Stopping:
    """The stop of one service (see the module).

    :meth:`run` is given the parts the service made on first use (None for one it
    never needed): stopping makes none of them.
    """

    def __init__(self, service: AssistantService) -> None:
        self._service = service

    @defer.inlineCallbacks
    def run(self, scheduler: TickScheduler | None, writer: StateWriter | None,
            approvals: ApprovalBoard | None) -> Generator[defer.Deferred[Any], object, None]:
        """Stop everything (see the module); fires when the store is closed."""
        service = self._service
        if scheduler is not None:
            scheduler.stop()
        if service.ownership is not None:
            service.ownership.stopping()
        service.hearing.unhear_all()
        if approvals is not None:  # a yes to a stopped process would approve nothing
            approvals.refuse_all("the service is stopping (a restart refuses every "
                                 "call still waiting)")
        if self._in_flight(scheduler):
            grace = service.stop_grace
            done = yield within(self._all_finished(scheduler), grace, service.clock)
            if not done:  # (with no grace at all, cancelling is what was asked for)
                log.emit(LogLevel.warn if grace > 0 else LogLevel.info,
                         "Stopping: {count} tick(s) still running after {grace}s; cancelling",
                         count=self._in_flight(scheduler), grace=grace)
                self._cancel_in_flight(scheduler)
                yield within(self._all_finished(scheduler), grace, service.clock)
        yield self._final_save(writer)
        yield service.resources.close()

    @defer.inlineCallbacks
    def _final_save(self, writer: StateWriter | None
                    ) -> Generator[defer.Deferred[Any], object, None]:
        """Save every assistant; then let the other workers have them (if shared)."""
        service = self._service
        if writer is not None or len(service.roster):
            for name in service.roster:
                service.writer.save(name).addErrback(_final_save_failed, name)
            yield service.writer.flush()
        if service.ownership is not None:
            try:
                yield defer.maybeDeferred(service.ownership.stopped)
            except Exception:
                log.failure("Releasing this worker's assistants failed")

    def _in_flight(self, scheduler: TickScheduler | None) -> int:
        """How many ticks and sub-agents run now."""
        ticks = len(scheduler.running()) if scheduler is not None else 0
        return ticks + len(self._service.subagents)

    def _all_finished(self, scheduler: TickScheduler | None
                      ) -> defer.Deferred[list[tuple[bool, None]]]:
        waits: list[defer.Deferred[None]] = []
        if scheduler is not None:
            waits.append(scheduler.when_idle())
        waits.extend(self._service.subagents.when_finished())
        return defer.DeferredList(waits)

    def _cancel_in_flight(self, scheduler: TickScheduler | None) -> None:
        service = self._service
        for name in service.roster:
            control = service.roster.get(name).control
            if control is not None:
                control.stop("service stopping", TerminationReason.SHUTDOWN)
        if scheduler is not None:
            scheduler.cancel_running()
        service.subagents.cancel()


def _final_save_failed(failure: Failure, name: str) -> None:
    log.error("Final save of {assistant} failed: {error}", assistant=name,
              error=failure.getErrorMessage())
