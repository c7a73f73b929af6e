"""Who listens to what a character hears: the registry hearing delivers to.

``EvenniaWorld.subscribe`` adds a listener per assistant's character (the
AssistantService's); :class:`~.hearing.AssistantCharacterMixin` delivers every
heard message to the listeners of its character.  Neither imports the other:
both use this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.logger import Logger

if TYPE_CHECKING:
    from ai_tools.world.messages import WorldMessage

log = Logger()


class ListenerRegistry:
    """Listeners per character id; delivery never lets a listener's error escape."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[[WorldMessage], object]]] = {}

    def add(self, char_id: str,
            listener: Callable[[WorldMessage], object]) -> Callable[[], None]:
        """Register ``listener`` for ``char_id``; returns the function that removes it."""
        self._listeners.setdefault(char_id, []).append(listener)

        def unsubscribe() -> None:
            listeners = self._listeners.get(char_id, [])
            if listener in listeners:
                listeners.remove(listener)
            if not listeners:
                self._listeners.pop(char_id, None)

        return unsubscribe

    def has_listeners(self, char_id: str) -> bool:
        """Whether anything listens to ``char_id``."""
        return bool(self._listeners.get(char_id))

    def deliver(self, char_id: str, message: WorldMessage) -> int:
        """Call every listener of ``char_id`` with ``message``; returns how many were called."""
        delivered = 0
        for listener in list(self._listeners.get(char_id, ())):
            try:
                listener(message)
            except Exception:
                log.failure("listener of {char} failed on a heard message", char=char_id)
            delivered += 1
        return delivered

    def clear(self) -> None:
        """Forget every listener (service shutdown, tests)."""
        self._listeners.clear()


LISTENERS = ListenerRegistry()
"""The process-wide registry ``EvenniaWorld.subscribe`` adds to."""
