"""Log events that no observer keeps are never built: a level gate in front of the logger.

``twisted.logger`` decides whether an event is kept only after the event is
built: :meth:`Logger.emit <twisted.logger.Logger.emit>` checks the level's
validity (by listing every level), fills in the ``log_*`` keys and hands the
event to the global publisher, whose observers filter it.  Under
``twistd ai-assistant`` the only observer is the service's level filter in
front of the log file (:func:`ai_tools.standalone.plugin.service_log_observer`),
so the logger can ask that filter's rule first and build nothing it would drop.

* :class:`LevelGate` is that filter's predicate (a
  :class:`~twisted.logger.LogLevelFilterPredicate`, its one rule): it also
  answers :meth:`LevelGate.keeps` for a level and namespace, cached per
  namespace and forgotten when a level is set.
* :func:`arm` makes a gate the process's (the service does, when its filter is
  the process's log); :func:`disarm` lifts it.  Unarmed — a library, a test,
  Evennia — every event is built, as by the stock logger.
* :class:`GatedLogger` is a :class:`~twisted.logger.Logger` whose ``emit``,
  ``debug`` and ``info`` ask the armed gate before building the event, and
  build it with the documented ``log_*`` keys only (public API: a subclass
  overriding public methods).  It gates only events bound for the global
  publisher; a logger given its own observer emits everything.
  :meth:`GatedLogger.wants` asks before even the event's fields are packed.

An observer added to the global publisher while a gate is armed sees the
events at the service's log level (``service.log_level``) and above.

Measured (``valgrind --tool=cachegrind``, ``make bench BENCH=loop``, see
``docs/service.md``): an info event through the stock ``Logger`` and the
service's file log at ``info`` costs ~186 k instructions; under the gate a
debug event costs ~6.5 k (the call and its keyword fields), ~2.3 k when
``wants`` is asked first.
"""

from __future__ import annotations

from time import time
from typing import cast

from twisted.logger import (
    Logger,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogPublisher,
)

__all__ = ["GatedLogger", "LevelGate", "arm", "armed", "disarm"]

_RANK = {level: rank for rank, level in enumerate(LogLevel.iterconstants())}
"""Each level's rank, lowest first (the order ``LogLevel`` defines)."""
_DEBUG, _INFO = LogLevel.debug, LogLevel.info


class LevelGate(LogLevelFilterPredicate):
    """The service log's level filter, which also tells loggers what it would drop."""

    def __init__(self, defaultLogLevel: LogLevel = LogLevel.info) -> None:
        self._lowest: dict[str, int] = {}
        super().__init__(defaultLogLevel)

    def keeps(self, level: LogLevel, namespace: str) -> bool:
        """Whether an event of ``level`` in ``namespace`` would pass this filter."""
        lowest = self._lowest.get(namespace)
        if lowest is None:
            lowest = self._lowest[namespace] = _RANK[self.logLevelForNamespace(namespace)]
        return _RANK[level] >= lowest

    def setLogLevelForNamespace(self, namespace: str, level: LogLevel) -> None:
        """Set a namespace's level (as the stock predicate) and forget the cached answers."""
        super().setLogLevelForNamespace(namespace, level)
        self._lowest.clear()

    def clearLogLevels(self) -> None:
        """Back to the default level everywhere; the cached answers go too."""
        super().clearLogLevels()
        self._lowest.clear()


_armed: list[LevelGate] = []
"""The process's gate, if armed (a list: no module global is rebound)."""


def arm(gate: LevelGate) -> None:
    """Make ``gate`` the process's: its filter is now the only log observer."""
    _armed[:] = [gate]


def disarm() -> None:
    """Build every event again (another observer joins, the service stops logging)."""
    _armed.clear()


def armed() -> LevelGate | None:
    """The process's gate, or None."""
    return _armed[0] if _armed else None


class GatedLogger(Logger):
    """A ``Logger`` that builds no event the armed gate would drop (see the module)."""

    def wants(self, level: LogLevel) -> bool:
        """Whether an event of ``level`` would be kept: ask before building a costly one.

        ``if log.wants(LogLevel.debug): log.debug(...)`` builds not even the
        event's fields under the service's default level (an event's keyword
        fields alone cost about 5 k instructions).
        """
        if not _armed or self.observer is not globalLogPublisher:
            return True
        return _armed[0].keeps(level, self.namespace)

    def emit(self, level: LogLevel, format: str | None = None, **kwargs: object) -> None:
        """Emit at ``level`` unless the gate drops it (an invalid level: the stock path)."""
        if level not in _RANK:
            super().emit(level, format, **kwargs)
            return
        self._publish(level, format, kwargs)

    def debug(self, format: str | None = None, **kwargs: object) -> None:
        """Emit at ``debug``: under ``info`` (the service's default), nothing is built."""
        self._publish(_DEBUG, format, kwargs)

    def info(self, format: str | None = None, **kwargs: object) -> None:
        """Emit at ``info`` (the fields taken as they came: no second keyword packing)."""
        self._publish(_INFO, format, kwargs)

    def _publish(self, level: LogLevel, format: str | None, event: dict[str, object]) -> None:
        """Complete the event with the documented ``log_*`` keys and hand it on."""
        observer = self.observer
        if _armed and observer is globalLogPublisher \
                and not _armed[0].keeps(level, self.namespace):
            return
        event["log_logger"] = self
        event["log_level"] = level
        event["log_namespace"] = self.namespace
        event["log_source"] = self.source
        event["log_format"] = format
        event["log_time"] = time()
        if "log_trace" in event:
            cast("list[object]", event["log_trace"]).append((self, observer))
        observer(event)
