"""What the characters of a world hear: their heard logs, listeners and observers.

One part of :class:`~ai_tools.world.sandbox.SandboxWorld` (which composes it):
it knows nothing of objects, rooms or the store.  The world numbers a message,
decides who hears it, and hands both here; :meth:`Hearing.hear` appends it to
each receiver's bounded log, calls their listeners, then the observers.  A
listener or observer that raises is logged and the others still hear.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

import attrs
from twisted.logger import Logger

from ai_tools.json_types import JSONObject
from ai_tools.world.messages import WorldMessage

Listener = Callable[[WorldMessage], object]
"""Called with every message one character hears."""
Observer = Callable[[WorldMessage, tuple[str, ...]], object]
"""Called with every message of the world and the ids of those who heard it."""


@attrs.define
class Hearing:
    """Heard logs (the newest ``log_size`` messages per character), listeners, observers."""

    log_size: int = 200
    logs: dict[str, deque[WorldMessage]] = attrs.field(factory=dict, init=False)
    """Each character's heard log by id (read it with :meth:`heard`)."""
    _listeners: dict[str, list[Listener]] = attrs.field(factory=dict, init=False)
    observers: list[Observer] = attrs.field(factory=list, init=False)
    """Who hears every message (add one with :meth:`add_observer`)."""

    _log = Logger()

    def remember(self, message: WorldMessage, receivers: Iterable[str]) -> None:
        """Put ``message`` in the heard log of each of ``receivers`` (no one is called)."""
        for receiver in receivers:
            log = self.logs.get(receiver)
            if log is None:
                log = self.logs[receiver] = deque(maxlen=self.log_size)
            log.append(message)

    def forget_all(self) -> None:
        """Empty every heard log (before they are refilled from a snapshot)."""
        self.logs.clear()

    def hear(self, message: WorldMessage, receivers: list[str]) -> None:
        """``receivers`` hear ``message``: their logs, their listeners, the observers."""
        self.remember(message, receivers)
        for receiver in receivers:
            for listener in list(self._listeners.get(receiver, ())):
                try:
                    listener(message)
                except Exception:
                    self._log.failure(
                        "Listener of {char} failed on a {kind} message",
                        char=receiver,
                        kind=message.kind,
                    )
        for observer in list(self.observers):
            try:
                observer(message, tuple(receivers))
            except Exception:
                self._log.failure("World observer failed on a {kind} message", kind=message.kind)

    def subscribe(self, char_id: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` for everything ``char_id`` hears; returns the unsubscriber
        (calling it twice is harmless).  The world checks ``char_id`` first."""
        self._listeners.setdefault(char_id, []).append(listener)

        def unsubscribe() -> None:
            listeners = self._listeners.get(char_id, [])
            if listener in listeners:
                listeners.remove(listener)
            if not listeners:
                self._listeners.pop(char_id, None)

        return unsubscribe

    def add_observer(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(message, receivers)`` for every message; returns the remover."""
        self.observers.append(observer)

        def remove() -> None:
            if observer in self.observers:
                self.observers.remove(observer)

        return remove

    def heard(
        self, char_id: str, limit: int | None = None, after: int | None = None
    ) -> list[JSONObject]:
        """What ``char_id`` heard, oldest first, as message dicts (``after``: only larger
        ``seq``; ``limit``: the newest ``limit``)."""
        messages = [m for m in self.logs.get(char_id, ()) if after is None or m.seq > after]
        if limit is not None:
            messages = messages[-limit:] if limit > 0 else []
        return [m.to_dict() for m in messages]
