"""The calls the service makes on its store, world and model clients, typed.

The contracts are the zope interfaces of :mod:`ai_tools.interfaces` — ``IStore``,
``IWorld``, ``ILLMClient`` — and the service's constructor and attributes are typed
with them.  mypy reads a zope interface's methods without their ``self`` (it has no
zope plugin here), so a call through an interface type does not type-check: the
service's parts make their calls through these Protocols, each naming the methods
of an interface one part uses, with the types the interface documents::

    store: AssistantStates = service.store      # an IStore
    state = yield store.load_assistant(name)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from twisted.internet import defer

from ai_tools.json_types import JSONMapping, JSONObject

__all__ = ["AssistantStates", "Closable", "HeardWorld", "RecordStore", "SpeakingWorld"]


class Closable(Protocol):
    """A store or model client the service opens or closes (``IStore``, ``ILLMClient``)."""

    def close(self) -> object:
        """Close; a value or a Deferred."""


class AssistantStates(Protocol):
    """The assistants' saved states in an ``IStore``."""

    def open(self) -> object:
        """Open the store; a value or a Deferred."""

    def load_assistant(self, name: str) -> defer.Deferred[JSONObject | None]:
        """The saved state of ``name``, or None."""

    def list_assistants(self) -> defer.Deferred[list[str]]:
        """The names with a saved state."""

    def delete_assistant(self, name: str) -> defer.Deferred[bool]:
        """Delete the saved state of ``name``."""

    def save_many(self, states: Mapping[str, JSONMapping],
                  **options: object) -> defer.Deferred[None]:
        """Write several states in one transaction (``options``: a store's own, such as
        the lease fence of workers sharing assistants)."""


class RecordStore(Protocol):
    """The records of an ``IStore`` (memories, episodes, the roster's own)."""

    def add_record(self, owner: str, collection: str, content: str,
                   metadata: JSONMapping | None = None) -> defer.Deferred[int]:
        """Add a record; fires with its id."""

    def update_record(self, record_id: int, content: str | None = None,
                      metadata: JSONMapping | None = None) -> defer.Deferred[bool]:
        """Change a record's content or metadata."""

    def delete_record(self, record_id: int) -> defer.Deferred[bool]:
        """Delete a record."""

    def list_records(self, owner: str, collection: str, limit: int = 20,
                     newest_first: bool = True) -> defer.Deferred[list[JSONObject]]:
        """The records of ``owner`` in ``collection``."""


class HeardWorld(Protocol):
    """Listening to what a character hears in an ``IWorld`` (and its log of it)."""

    def subscribe(self, char_id: str,
                  listener: Callable[[object], None]) -> Callable[[], object] | None:
        """Call ``listener`` for everything ``char_id`` hears; returns an unsubscriber."""

    def heard(self, char_id: str, after: int) -> Iterable[JSONMapping]:
        """The message dicts ``char_id`` heard after message ``after`` (as far as the
        world's log of what it heard goes)."""


class SpeakingWorld(Protocol):
    """Saying something in an ``IWorld`` as a character."""

    def message_location(self, char_id: str | None, text: str,
                         kind: str = "say") -> object:
        """Deliver ``text`` from ``char_id`` to its room; a value or a Deferred."""
