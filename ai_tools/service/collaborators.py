r"""Two optional capabilities the service uses that no interface names, as ``Protocol``\s.

Everything else the service calls on its store, world and model clients is typed by the
zope interfaces of :mod:`ai_tools.interfaces` (``IStore``, ``IWorld``, ``ILLMClient``),
which mypy reads through the mypy-zope plugin.  What is left here is duck-typed on
purpose: a world that keeps a log of what was heard (the sandbox world, the shared one;
an Evennia world has none), and anything the service closes at stop (store or client).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from ai_tools.json_types import JSONMapping

__all__ = ["Closable", "HeardWorld"]


class Closable(Protocol):
    """A store or model client the service opens or closes (``IStore``, ``ILLMClient``)."""

    def close(self) -> object:
        """Close; a value or a Deferred."""


class HeardWorld(Protocol):
    """Listening to what a character hears in an ``IWorld`` (and its log of it)."""

    def subscribe(self, char_id: str,
                  listener: Callable[[object], None]) -> Callable[[], object] | None:
        """Call ``listener`` for everything ``char_id`` hears; returns an unsubscriber."""

    def heard(self, char_id: str, after: int) -> Iterable[JSONMapping]:
        """The message dicts ``char_id`` heard after message ``after`` (as far as the
        world's log of what it heard goes)."""
