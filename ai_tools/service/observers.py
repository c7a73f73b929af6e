
"""Who watches a service's assistants: observers of loop and tick events.

:class:`Observers` is where every event of every assistant goes (``publish``): the
HTTP API's event stream, the console, tracing, a test.  Loops ask :meth:`Observers.observed`
before they build an event, so with nobody watching an assistant its loops build none.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

__all__ = ["Observer", "Observers"]

log = Logger()

Observer = Callable[[dict[str, object]], None]
"""Receives loop and tick events: dicts with ``type`` and ``assistant``."""


class Observers:
    """The observers of one service, each of every assistant or of one (see the module).

    ``clock`` returns the clock that stamps an event's ``time`` (asked when an
    event is published: the service's clock may be looked up late).
    """

    def __init__(self, clock: Callable[[], IReactorTime]) -> None:
        self._clock = clock
        # A tuple, replaced on change: publishing iterates it without a copy.
        self.entries: tuple[tuple[Observer, str | None], ...] = ()
        """``(observer, assistant name or None)`` in the order they were added."""

    def add(self, observer: Observer, assistant: str | None = None) -> Callable[[], None]:
        """Call ``observer(event)`` for loop and tick events (of one assistant, or all).

        Events are dicts with ``type`` — ``iteration``, ``tool_call``,
        ``tool_result`` (with ``duration_ms`` and ``from_cache``), ``signal``,
        ``termination``, ``text_delta``, ``tick``, ``mode``, ``added``,
        ``removed``, ``stopped``... — plus ``assistant`` and ``time``.
        Returns a callable that removes the observer.
        """
        entry = (observer, assistant)
        self.entries = (*self.entries, entry)

        def remove() -> None:
            if entry in self.entries:
                entries = list(self.entries)
                entries.remove(entry)
                self.entries = tuple(entries)

        return remove

    def publish(self, name: str, event: dict[str, object]) -> None:
        """Hand an event of assistant ``name`` to the observers (their errors are logged)."""
        if not self.entries:
            return
        if "assistant" not in event:
            event["assistant"] = name
        if "time" not in event:
            event["time"] = self._clock().seconds()
        for observer, only in self.entries:
            if only is not None and only != name:
                continue
            try:
                observer(event)
            except Exception:
                log.failure("Observer {observer!r} failed on a {kind} event of {assistant}",
                            observer=observer, kind=event.get("type"), assistant=name)

    def observed(self, name: str) -> bool:
        """Whether an event of assistant ``name`` would reach an observer now.

        Loops ask before building each event (``LoopContext.observed``): with no
        observer subscribed (a console, an event stream, tracing), none is built.
        """
        for _, only in self.entries:
            if only is None or only == name:
                return True
        return False
