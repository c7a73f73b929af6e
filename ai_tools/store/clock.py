"""The clock the stores stamp records with (a reactor or ``task.Clock``)."""

from __future__ import annotations

from typing import Protocol, cast


class SecondsClock(Protocol):
    """The part of ``IReactorTime`` the stores use."""

    def seconds(self) -> float: ...


def now_seconds(clock: SecondsClock | None) -> float:
    """``clock.seconds()``; without a clock, the global reactor's (looked up only now)."""
    if clock is None:
        from twisted.internet import reactor

        clock = cast(SecondsClock, reactor)
    return float(clock.seconds())
