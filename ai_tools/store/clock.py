"""The clock the stores stamp records with (a reactor or ``task.Clock``)."""

from __future__ import annotations

from typing import Protocol

from ai_tools.default_reactor import or_global_reactor


class SecondsClock(Protocol):
    """The part of ``IReactorTime`` the stores use."""

    def seconds(self) -> float: ...


def now_seconds(clock: SecondsClock | None) -> float:
    """``clock.seconds()``; without a clock, the global reactor's (looked up only now)."""
    return float(or_global_reactor(clock).seconds())
