"""Stopping what assistants do: the kill, and the emergency stop that holds until cleared.

:class:`EmergencyStop` kills what an assistant runs (its model call or tool in
flight) and sets or clears the emergency stop of one assistant or of all (every
tick then exits early).  Each assistant's stop is saved with its state; the stop
of *everything* (:attr:`EmergencyStop.everything_stopped`) also holds for callers
outside the loops (MCP sessions) and is not saved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.logger import Logger

if TYPE_CHECKING:
    from ai_tools.service.service import AssistantService

__all__ = ["EmergencyStop"]

log = Logger()


def _ignore(_: object) -> None:
    """A failed save is logged and counted by the writer's callers; the stop holds anyway."""


class EmergencyStop:
    """The kill and the emergency stop of one service's assistants (see the module)."""

    def __init__(self, service: AssistantService) -> None:
        self._service = service
        self.everything_stopped = False
        """An emergency stop of every assistant holds (until cleared for all): callers
        from outside the loops (MCP sessions) run no tool either.  Not saved: each
        assistant's own stop is."""

    def kill(self, name: str, reason: str = "stopped by user") -> bool:
        """Kill what the assistant is doing: cancel its model call or tool in flight.

        The loop ends with ``stopped_by_user`` and the killed call leaves no
        history entry.  Returns whether something was running.
        """
        service = self._service
        assistant = service.roster.get(name)
        if assistant.control is not None:
            assistant.control.stop(reason)
            service.publish(name, {"type": "stopped", "reason": reason})
            return True
        if assistant.current_tick is not None:
            # Outside a loop (compaction, assessment): cancel the step in flight.
            assistant.current_tick.cancel()
            service.publish(name, {"type": "stopped", "reason": reason})
            return True
        return False

    def stop(self, name: str | None = None, reason: str = "") -> list[str]:
        """Stop one assistant (or all): kill what runs, and every tick exits early until
        cleared.  Returns the names stopped.  Persisted, so it survives a restart."""
        service = self._service
        names = [name] if name is not None else list(service.roster)
        if name is None:
            self.everything_stopped = True
        for n in names:
            assistant = service.roster.get(n)
            assistant.emergency_stopped = True
            self.kill(n, reason or "emergency stop")
            service.publish(n, {"type": "emergency_stop", "reason": reason})
            service.save_state(n).addErrback(_ignore)
        log.warn("Emergency stop of {names}: {reason}", names=", ".join(names), reason=reason)
        return names

    def clear(self, name: str | None = None) -> list[str]:
        """Let emergency-stopped assistants tick again; returns the names cleared."""
        service = self._service
        roster = service.roster
        names = [name] if name is not None else [
            n for n in roster if roster.get(n).emergency_stopped]
        if name is None:
            self.everything_stopped = False
        for n in names:
            assistant = roster.get(n)
            assistant.emergency_stopped = False
            service.publish(n, {"type": "emergency_stop_cleared"})
            service.save_state(n).addErrback(_ignore)
        return names
