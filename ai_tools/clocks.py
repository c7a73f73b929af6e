"""What a clock is to ai_tools: the part of the reactor's time interfaces it uses.

Every part that waits takes a clock — the reactor in production, ``task.Clock`` in tests
— typed by these ``Protocol`` classes.  They stand where ``IReactorTime`` and
``IDelayedCall`` would: mypy reads the methods of a zope interface as functions without
``self``, so a parameter typed by the interface could not be called.  One definition here
for every layer (the scheduler, the web API, the MCP sessions, the telemetry shutdown).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ai_tools.default_reactor import or_global_reactor

__all__ = ["Clock", "ThreadClock", "Timer", "or_global_clock"]


class Timer(Protocol):
    """What ``callLater`` returns (an ``IDelayedCall``), as far as ai_tools uses it."""

    def active(self) -> bool:
        """Whether the call is still to come."""
        ...

    def cancel(self) -> None:
        """Take the call back (only while it is active)."""
        ...


class Clock(Protocol):
    """``seconds()`` and ``callLater()`` of ``IReactorTime`` (a reactor or ``task.Clock``)."""

    def seconds(self) -> float:
        """The current time in seconds."""
        ...

    def callLater(self, delay: float, f: Callable[..., object], /, *args: object,
                  **kw: object) -> Timer:
        """Call ``f(*args, **kw)`` in ``delay`` seconds."""
        ...


class ThreadClock(Clock, Protocol):
    """A clock that other threads can hand work to (``IReactorFromThreads``): a reactor."""

    def callFromThread(self, f: Callable[..., object], /, *args: object) -> None:
        """Call ``f(*args)`` in the reactor's thread."""
        ...


def or_global_clock(clock: Clock | None) -> Clock:
    """``clock``, or the global reactor when it is ``None`` (an attrs converter mypy can
    type, where the generic :func:`~ai_tools.default_reactor.or_global_reactor` cannot)."""
    return or_global_reactor(clock)
