"""ScriptStore: the IStore of assistants hosted in Evennia.

An assistant's state (history, pending events, mode, counters) lives on its
:class:`~.scripts.AssistantScript`: it moves
with the game's database, survives ``evennia reload`` and is deleted with the
character.  Everything else the engine stores — memories, journal, goals and
the persistent tool cache — goes to an ordinary ai_tools store given as
``records`` (by default a SQLite file beside the game's database, see
``AI_TOOLS_RECORDS_DB``).

Script attributes are written synchronously in the reactor thread, the way
Evennia itself writes them; the records store keeps its own thread pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from ai_tools.contrib.evennia.lookup import all_assistant_scripts, get_assistant_script
from ai_tools.errors import NotFound
from ai_tools.history_format import repair_state
from ai_tools.interfaces import IStore
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.store.history_repair import log_repair
from ai_tools.store.serialization import check_name, check_state

if TYPE_CHECKING:
    from ai_tools.contrib.evennia.scripts import AssistantScript
    from ai_tools.store.memory import MemoryStore
    from ai_tools.store.sqlite import SQLiteStore

log = Logger()


@implementer(IStore)
@attrs.define(eq=False)
class ScriptStore:
    """Assistant state on AssistantScripts; records and cache in ``records``."""

    records: MemoryStore | SQLiteStore
    """The IStore that keeps records and cache entries (SQLiteStore or MemoryStore)."""

    def open(self) -> defer.Deferred[None]:
        """Open the records store."""
        return defer.maybeDeferred(self.records.open)

    def close(self) -> defer.Deferred[None]:
        """Close the records store."""
        return defer.maybeDeferred(self.records.close)

    # -- assistant state: on the scripts ------------------------------------------

    @staticmethod
    def _script(name: str) -> AssistantScript:
        script = get_assistant_script(check_name(name, "assistant name"))
        if script is None:
            raise NotFound(f"no assistant script for {name!r}")
        return script

    def load_assistant(self, name: str) -> defer.Deferred[JSONObject | None]:
        """The state saved on ``name``'s script (its history repaired), or None."""
        return defer.maybeDeferred(self._load, name)

    def _load(self, name: str) -> JSONObject | None:
        script = get_assistant_script(check_name(name, "assistant name"))
        state = script.load_state() if script is not None else None
        if state is None:
            return None
        repaired, report = repair_state(state)
        log_repair(name, report)
        return repaired

    def save_assistant(self, name: str, state: JSONMapping) -> defer.Deferred[None]:
        """Write ``name``'s state on its script."""
        return self.save_many({name: state})

    def save_many(self, states: Mapping[str, JSONMapping]) -> defer.Deferred[None]:
        """Write several states; every state is checked before any is written."""
        return defer.maybeDeferred(self._save_many, states)

    def _save_many(self, states: Mapping[str, JSONMapping]) -> None:
        targets = []
        for name, state in states.items():
            check_state(state)
            targets.append((self._script(name), state))
        for script, state in targets:
            script.save_state(dict(state))

    def delete_assistant(self, name: str) -> defer.Deferred[bool]:
        """Forget ``name``'s state (the script itself stays); True if there was one."""

        def delete() -> bool:
            script = get_assistant_script(check_name(name, "assistant name"))
            return bool(script is not None and script.clear_state())

        return defer.maybeDeferred(delete)

    def list_assistants(self) -> defer.Deferred[list[str]]:
        """Names of the assistants whose scripts hold a saved state."""
        return defer.maybeDeferred(
            lambda: sorted(
                s.assistant_key for s in all_assistant_scripts() if s.assistant_key and s.db.state
            )
        )

    # -- everything else: the records store ---------------------------------------

    def cache_get(self, namespace: str, key: str, now: float) -> defer.Deferred[object]:
        """Delegated to the records store."""
        return self.records.cache_get(namespace, key, now)

    def cache_put(self, namespace: str, key: str, value: object,
                  expires_at: float | None) -> defer.Deferred[None]:
        """Delegated to the records store."""
        return self.records.cache_put(namespace, key, value, expires_at)

    def cache_invalidate(self, namespace: str) -> defer.Deferred[int]:
        """Delegated to the records store."""
        return self.records.cache_invalidate(namespace)

    def add_record(
        self,
        owner: str,
        collection: str,
        content: str,
        metadata: JSONMapping | None = None,
        parent_id: int | None = None,
    ) -> defer.Deferred[JSONObject]:
        """Delegated to the records store."""
        return self.records.add_record(owner, collection, content, metadata, parent_id)

    def update_record(self, record_id: int, content: str | None = None,
                      metadata: JSONMapping | None = None) -> defer.Deferred[JSONObject]:
        """Delegated to the records store."""
        return self.records.update_record(record_id, content, metadata)

    def get_record(self, record_id: int) -> defer.Deferred[JSONObject | None]:
        """Delegated to the records store."""
        return self.records.get_record(record_id)

    def list_records(
        self,
        owner: str,
        collection: str,
        limit: int = 20,
        newest_first: bool = True,
        parent_id: int | None = None,
    ) -> defer.Deferred[list[JSONObject]]:
        """Delegated to the records store."""
        return self.records.list_records(owner, collection, limit, newest_first, parent_id)

    def search_records(self, owner: str, collection: str, query: str,
                       limit: int = 10) -> defer.Deferred[list[JSONObject]]:
        """Delegated to the records store."""
        return self.records.search_records(owner, collection, query, limit)

    def __getattr__(self, name: str) -> object:
        # Optional store extras (delete_record, cache_purge_expired...) go to the
        # records store, so tools that feature-test for them keep working.
        if name.startswith("_") or name == "records":
            raise AttributeError(name)
        return getattr(self.records, name)
