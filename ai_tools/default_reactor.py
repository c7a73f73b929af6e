"""The global reactor as the default of a reactor or clock nobody passed.

Every part that takes a reactor (or a ``task.Clock`` in tests) falls back to
Twisted's global reactor when given none.  The import happens when the default
is needed, never when a module is imported: importing ``twisted.internet.reactor``
installs the default reactor, and a program (``twistd``, Evennia, a test that
installs its own) must be free to install another first.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

__all__ = ["global_reactor", "or_global_reactor"]

_T = TypeVar("_T")


def global_reactor() -> Any:
    """Twisted's global reactor, looked up (and so installed if none is) only now."""
    from twisted.internet import reactor

    return reactor


def or_global_reactor(given: _T | None) -> _T:
    """``given``, or the global reactor when it is ``None``.

    The global reactor provides every reactor interface, so it stands for
    whatever interface (``IReactorTime``, a ``Protocol``) the caller asked for.
    """
    return given if given is not None else cast(_T, global_reactor())
