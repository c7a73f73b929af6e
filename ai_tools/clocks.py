"""The clocks ai_tools runs on, where Twisted's interfaces do not say it alone.

A clock is Twisted's ``IReactorTime`` (the reactor, or ``task.Clock`` in tests) and its
timers ``IDelayedCall``; mypy reads both through the mypy-zope plugin.  Two things have
no single Twisted name, so they live here once for every layer:

- :class:`ThreadClock`: a clock that other threads hand work to (``callLater`` and
  ``callFromThread`` at once: the telemetry shutdown waits on both);
- :func:`or_global_clock`: a clock, or the global reactor, typed for an attrs converter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from ai_tools.default_reactor import or_global_reactor

__all__ = ["ThreadClock", "or_global_clock"]


class ThreadClock(Protocol):
    """``callLater`` of ``IReactorTime`` and ``callFromThread`` of ``IReactorFromThreads``."""

    def callLater(self, delay: float, f: Callable[..., object], /, *args: object,
                  **kw: object) -> IDelayedCall:
        """Call ``f(*args, **kw)`` in ``delay`` seconds."""
        ...

    def callFromThread(self, f: Callable[..., object], /, *args: object) -> None:
        """Call ``f(*args)`` in the reactor's thread."""
        ...


def or_global_clock(clock: IReactorTime | None) -> IReactorTime:
    """``clock``, or the global reactor when it is ``None`` (an attrs converter mypy can
    type, where the generic :func:`~ai_tools.default_reactor.or_global_reactor` cannot)."""
    return or_global_reactor(clock)
