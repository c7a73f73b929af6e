"""The clock the HTTP API's timers run on: a reactor, or a ``task.Clock`` in tests.

The part of ``IReactorTime`` the API uses, as a ``Protocol``: mypy reads the
methods of a zope interface as functions without ``self``, so a parameter typed
``IReactorTime`` could not be called; any reactor and ``task.Clock`` fit this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.interfaces import IDelayedCall

__all__ = ["Clock"]


class Clock(Protocol):
    """``seconds()`` and ``callLater()`` of ``IReactorTime``."""

    def seconds(self) -> float:
        """The current time in seconds."""
        ...

    def callLater(self, delay: float, callable: Callable[..., object], *args: object,
                  **kw: object) -> IDelayedCall:
        """Call ``callable(*args, **kw)`` in ``delay`` seconds."""
        ...
