"""Pending events in a loop: delivered before a model call, taken only once answered.

What players said since the assistant's last turn waits in its pending list.
A loop moves the batch into the history as one ``[EVENTS]`` user message
before its first model call (the list is emptied in place, so one checkpoint
persists both changes), and what is heard while the loop runs joins it the
same way before the next model call (:meth:`EventDelivery.deliver_heard`): a
player who speaks during a long loop waits one model call, not the rest of
the loop.  A batch counts as *taken* only when a model answer that saw it
arrives.  A loop that ends before that — the model unavailable or failing, a
stop, a shutdown — gives the batches not taken back: their messages leave
the history and their events go back to the front of the pending list, in
order, ahead of anything heard meanwhile.  Whatever is saved next holds them
as pending, so nothing a player said is lost to a failed or interrupted turn.

Until then a batch is in neither place for good, so a state written while
the model call is in flight (a checkpoint of another kind: an event heard, a
flag set, an emergency stop) asks the delivery what to save
(:meth:`EventDelivery.saved`): the batches not taken as pending, in front,
and the history without their messages — as if they had been given back.  A
process killed after such a write starts again with them pending, and
answers them.
"""

from __future__ import annotations

import attrs

from ai_tools.execution.history import ConversationHistory
from ai_tools.json_types import JSONMapping
from ai_tools.loop.prompts import format_events

__all__ = ["EventDelivery"]


@attrs.define(eq=False)
class _Batch:
    """Events delivered together and the ``[EVENTS]`` message that carries them."""

    events: list[dict[str, object]]
    message: JSONMapping


@attrs.define(eq=False)
class EventDelivery:
    """The batches of pending events one loop delivered into a history, until each is
    taken or given back."""

    pending: list[dict[str, object]]
    """The assistant's pending list (each batch came from its front)."""
    history: ConversationHistory
    batches: list[_Batch]
    taken_batches: int = 0
    """How many batches, from the first, a model answer saw."""
    returned: bool = False

    @classmethod
    def deliver(cls, pending: list[dict[str, object]], history: ConversationHistory
                ) -> EventDelivery | None:
        """Move every pending event into ``history`` as one message (None: nothing pending)."""
        if not pending:
            return None
        delivery = cls(pending, history, [])
        delivery.deliver_heard()
        return delivery

    @property
    def events(self) -> list[dict[str, object]]:
        """Every event delivered, in order."""
        return [event for batch in self.batches for event in batch.events]

    @property
    def taken(self) -> bool:
        """Whether a model answer saw every batch delivered so far."""
        return self.taken_batches == len(self.batches)

    def deliver_heard(self) -> int:
        """Move what is pending now into the history as another ``[EVENTS]`` message
        (the next model call sees it); returns how many events moved (0 once given back)."""
        if not self.pending or self.returned:
            return 0
        events = list(self.pending)
        self.batches.append(_Batch(events, self.history.add_user(format_events(events))))
        self.pending.clear()
        return len(events)

    def _open(self) -> list[_Batch]:
        return [] if self.returned else self.batches[self.taken_batches:]

    def saved(self, messages: list[dict[str, object]], pending: list[dict[str, object]]
              ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """The history ``messages`` and ``pending`` events a state written now holds.

        Batches taken or given back are as they are; the others are pending (in
        front, in order) and their messages are left out of the history.
        """
        open_batches = self._open()
        if not open_batches:
            return messages, pending
        left_out = {id(batch.message) for batch in open_batches}
        events = [event for batch in open_batches for event in batch.events]
        return [m for m in messages if id(m) not in left_out], [*events, *pending]

    def take(self) -> None:
        """A model answer that saw every batch delivered so far arrived: they are the
        model's now."""
        self.taken_batches = len(self.batches)

    def give_back(self) -> int:
        """Undo the delivery of the batches not taken; returns how many events went back."""
        open_batches = self._open()
        self.returned = True
        for batch in open_batches:
            self.history.take_back(batch.message)
        events = [event for batch in open_batches for event in batch.events]
        self.pending[:0] = events
        return len(events)
