"""Pending events in a loop: delivered before the first model call, taken only once answered.

What players said since the assistant's last turn waits in its pending list.
A loop moves the batch into the history as one ``[EVENTS]`` user message
before its first model call (the list is emptied in place, so one checkpoint
persists both changes).  The batch counts as *taken* only when a model answer
that saw it arrives.  A loop that ends before that — the model unavailable or
failing, a stop, a shutdown — gives the batch back: the message leaves the
history and the events go back to the front of the pending list, in order,
ahead of anything heard meanwhile.  Whatever is saved next holds them as
pending, so nothing a player said is lost to a failed or interrupted turn.

Until then the batch is in neither place for good, so a state written while
the model call is in flight (a checkpoint of another kind: an event heard, a
flag set, an emergency stop) asks the delivery what to save
(:meth:`EventDelivery.saved`): the batch as pending, in front, and the history
without its message — as if it had been given back.  A process killed after
such a write starts again with the batch pending, and answers it.
"""

from __future__ import annotations

import attrs

from ai_tools.execution.history import ConversationHistory
from ai_tools.loop.prompts import format_events

__all__ = ["EventDelivery"]


@attrs.define(eq=False)
class EventDelivery:
    """One batch of pending events delivered into a history, until taken or given back."""

    pending: list[dict[str, object]]
    """The assistant's pending list (the batch came from its front)."""
    events: list[dict[str, object]]
    history: ConversationHistory
    message: dict[str, object]
    """The ``[EVENTS]`` message in the history."""
    taken: bool = False
    returned: bool = False

    @classmethod
    def deliver(cls, pending: list[dict[str, object]], history: ConversationHistory
                ) -> EventDelivery | None:
        """Move every pending event into ``history`` as one message (None: nothing pending)."""
        if not pending:
            return None
        events = list(pending)
        message = history.add_user(format_events(events))
        pending.clear()
        return cls(pending, events, history, message)

    def saved(self, messages: list[dict[str, object]], pending: list[dict[str, object]]
              ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """The history ``messages`` and ``pending`` events a state written now holds.

        Taken or given back, they are as they are; still undecided, the batch is
        pending (in front, in order) and its message is left out of the history.
        """
        if self.taken or self.returned:
            return messages, pending
        return [m for m in messages if m is not self.message], [*self.events, *pending]

    def take(self) -> None:
        """A model answer that saw the batch arrived: it is the model's now."""
        self.taken = True

    def give_back(self) -> int:
        """Undo the delivery unless taken; returns how many events went back."""
        if self.taken or self.returned:
            return 0
        self.returned = True
        self.history.take_back(self.message)
        self.pending[:0] = self.events
        return len(self.events)
