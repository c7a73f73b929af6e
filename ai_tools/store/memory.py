"""An in-memory IStore: the same behaviour as the SQLite store, nothing on disk.

Used by tests and by hosts that do not need state to survive a restart.
Values are kept as JSON text, exactly as the SQLite store keeps them, so a
value that could not be saved there fails here too and callers never share
mutable objects with the store.  Every method returns an already-fired
Deferred.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from ai_tools.history_format import repair_state
from ai_tools.interfaces import IHeardLog, ISharedWorldStore, IStore, ITraceStore, IWorldStore
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.store.clock import SecondsClock, now_seconds
from ai_tools.store.history_repair import log_repair
from ai_tools.store.memory_records import MemoryRecords
from ai_tools.store.memory_world import MemoryWorldRows
from ai_tools.store.serialization import (
    ChangeOutcome,
    check_expiry,
    check_name,
    check_state,
    encode_json,
)
from ai_tools.store.traces import MemoryTraces, TraceFilter, trace_row

T = TypeVar("T")


@implementer(IStore, IWorldStore, IHeardLog, ISharedWorldStore, ITraceStore)
@attrs.define(eq=False)
class MemoryStore:
    """IStore, IWorldStore, IHeardLog and ISharedWorldStore (the world shared in one
    process) in memory.

    ``clock`` (a reactor or ``task.Clock``, default the global reactor, looked up when
    first needed) stamps records with ``created_at``/``updated_at``.
    """

    clock: SecondsClock | None = None
    _assistants: dict[str, str] = attrs.field(factory=dict, init=False)
    _cache: dict[tuple[str, str], tuple[str, float | None]] = attrs.field(factory=dict, init=False)
    _records: MemoryRecords = attrs.field(factory=MemoryRecords, init=False)
    _world: MemoryWorldRows = attrs.field(factory=MemoryWorldRows, init=False)
    _heard: dict[int, tuple[int, str, str]] = attrs.field(factory=dict, init=False)
    _traces: MemoryTraces = attrs.field(factory=MemoryTraces, init=False)
    _open: bool = attrs.field(default=False, init=False)

    _log = Logger()

    def _now(self) -> float:
        return now_seconds(self.clock)

    @staticmethod
    def _call(fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        return defer.maybeDeferred(fn, *args)

    # -- lifecycle --------------------------------------------------------

    def open(self) -> defer.Deferred[None]:
        """Nothing to create; fires at once."""
        self._open = True
        return defer.succeed(None)

    def close(self) -> defer.Deferred[None]:
        """Nothing to release; the data stays (a memory store lives as long as the object)."""
        self._open = False
        return defer.succeed(None)

    # -- assistants -------------------------------------------------------

    def load_assistant(self, name: str) -> defer.Deferred[dict[str, object] | None]:
        """The saved state of ``name`` with its history repaired, or None."""
        return self._call(self._load_assistant, name)

    def _load_assistant(self, name: str) -> dict[str, object] | None:
        encoded = self._assistants.get(check_name(name, "assistant name"))
        if encoded is None:
            return None
        state, report = repair_state(json.loads(encoded))
        log_repair(name, report)
        return state

    def save_assistant(self, name: str, state: JSONMapping) -> defer.Deferred[None]:
        """Replace the saved state of ``name``."""
        return self._call(self._save_many, {name: state})

    def save_many(self, states: Mapping[str, JSONMapping]) -> defer.Deferred[None]:
        """Replace the saved states of several assistants at once (all or none)."""
        return self._call(self._save_many, states)

    def _save_many(self, states: Mapping[str, JSONMapping]) -> None:
        encoded = {
            check_name(name, "assistant name"): check_state(state) for name, state in states.items()
        }
        self._assistants.update(encoded)

    def delete_assistant(self, name: str) -> defer.Deferred[bool]:
        """Forget ``name``; fires True if it had saved state."""
        return self._call(lambda: self._assistants.pop(name, None) is not None)

    def list_assistants(self) -> defer.Deferred[list[str]]:
        """Sorted names of the assistants with saved state."""
        return defer.succeed(sorted(self._assistants))

    # -- persistent cache ---------------------------------------------------

    def cache_get(self, namespace: str, key: str, now: float) -> defer.Deferred[JSONValue]:
        """The cached value, or None when absent or expired (``expires_at <= now``)."""
        return self._call(self._cache_get, namespace, key, now)

    def _cache_get(self, namespace: str, key: str, now: float) -> JSONValue:
        entry = self._cache.get((namespace, key))
        if entry is None:
            return None
        encoded, expires_at = entry
        if expires_at is not None and expires_at <= now:
            return None  # left for cache_purge_expired, as in the SQLite store
        return json.loads(encoded)

    def cache_put(
        self, namespace: str, key: str, value: object, expires_at: float | None
    ) -> defer.Deferred[None]:
        """Store ``value`` under ``(namespace, key)`` until ``expires_at`` (None: forever)."""
        return self._call(self._cache_put, namespace, key, value, expires_at)

    def _cache_put(self, namespace: str, key: str, value: object, expires_at: float | None) -> None:
        check_name(namespace, "cache namespace")
        check_name(key, "cache key")
        self._cache[(namespace, key)] = (
            encode_json(value, "cache value"),
            check_expiry(expires_at),
        )

    def cache_invalidate(self, namespace: str) -> defer.Deferred[int]:
        """Drop every entry of ``namespace``; fires with how many were dropped."""
        doomed = [k for k in self._cache if k[0] == namespace]
        for k in doomed:
            del self._cache[k]
        return defer.succeed(len(doomed))

    def cache_purge_expired(self, now: float) -> defer.Deferred[int]:
        """Drop every expired entry; fires with how many were dropped."""
        doomed = [k for k, (_, exp) in self._cache.items() if exp is not None and exp <= now]
        for k in doomed:
            del self._cache[k]
        return defer.succeed(len(doomed))

    # -- records (ai_tools.store.memory_records) -----------------------------

    def add_record(
        self,
        owner: str,
        collection: str,
        content: str,
        metadata: JSONMapping | None = None,
        parent_id: int | None = None,
    ) -> defer.Deferred[JSONObject]:
        """Add a record; fires with its dict (``NotFound`` if ``parent_id`` is unknown)."""
        return self._call(self._records.add, owner, collection, content, metadata, parent_id,
                          self._now)

    def update_record(
        self,
        record_id: int,
        content: str | None = None,
        metadata: JSONMapping | None = None,
    ) -> defer.Deferred[JSONObject | None]:
        """Replace the content and/or metadata of a record; None if unknown."""
        return self._call(self._records.update, record_id, content, metadata, self._now)

    def get_record(self, record_id: int) -> defer.Deferred[JSONObject | None]:
        """One record dict, or None."""
        return defer.succeed(self._records.get(record_id))

    def delete_record(self, record_id: int) -> defer.Deferred[bool]:
        """Remove a record (its children keep existing, with no parent); True if it existed."""
        return defer.succeed(self._records.delete(record_id))

    def list_records(
        self,
        owner: str,
        collection: str | None,
        limit: int = 20,
        newest_first: bool = True,
        parent_id: int | None = None,
    ) -> defer.Deferred[list[JSONObject]]:
        """Records of one collection (None: every collection) in time order."""
        return self._call(self._records.in_order, owner, collection, limit, newest_first, parent_id)

    def search_records(
        self, owner: str, collection: str | None, query: str, limit: int = 10
    ) -> defer.Deferred[list[JSONObject]]:
        """BM25-ranked records containing any word of ``query``, best first, with ``score``."""
        return self._call(self._records.search, owner, collection, query, limit)

    # -- world ------------------------------------------------------------------

    def load_world(self) -> defer.Deferred[JSONObject | None]:
        """The saved world sections, or None when no world was ever written."""
        return self._call(self._world.load_world)

    def write_world(
        self,
        put: JSONMapping | None = None,
        delete: Mapping[str, Sequence[str]] | None = None,
    ) -> defer.Deferred[None]:
        """Upsert and delete world rows, all or nothing."""
        d = self._call(self._world.change_world, put, delete)
        d.addCallback(lambda _: None)
        return d  # type: ignore[return-value]

    def append_heard(self, messages: Sequence[tuple[int, str, str]], keep: int
                     ) -> defer.Deferred[None]:
        """IHeardLog.append_heard."""
        def append() -> None:  # (a world numbers its messages upwards: oldest first)
            heard = self._heard
            for seq, data, receivers in messages:
                heard[seq] = (seq, str(data), str(receivers))
            while len(heard) > max(keep, 0):
                del heard[next(iter(heard))]
        return self._call(append)

    def load_heard(self, limit: int) -> defer.Deferred[list[tuple[int, str, str]]]:
        """IHeardLog.load_heard."""
        return self._call(lambda: sorted(self._heard.values())[-limit:] if limit > 0 else [])

    # -- loop traces (ai_tools.store.traces) ---------------------------------------------

    def save_trace(self, trace: JSONMapping, keep: int) -> defer.Deferred[int]:
        """Keep one loop trace, and only the newest ``keep`` of its assistant; its id."""
        return self._call(lambda: self._traces.save(trace_row(trace), keep))

    def list_traces(self, search: TraceFilter) -> defer.Deferred[list[JSONObject]]:
        """The summaries of the newest traces ``search`` asks for, newest first."""
        return self._call(self._traces.search, search)

    def get_trace(self, trace_id: int) -> defer.Deferred[JSONObject | None]:
        """One stored trace, whole (None: not kept)."""
        return self._call(self._traces.get, trace_id)

    def change_world(
        self,
        put: JSONMapping | None = None,
        delete: Mapping[str, Sequence[str]] | None = None,
        *,
        expect: Mapping[tuple[str, str], int | None] | None = None,
        touch: Sequence[tuple[str, str]] = (),
        messages: Sequence[JSONMapping] = (),
    ) -> defer.Deferred[ChangeOutcome]:
        """One shared-world change (ISharedWorldStore), all or nothing."""
        return self._call(self._world.change_world, put, delete, expect, touch, messages)

    def load_shared_world(self, log_size: int) -> defer.Deferred[dict[str, object] | None]:
        """The world with versions, the clock and what each character heard last."""
        return self._call(self._world.load_shared_world, log_size)

    def world_since(
        self, clock: int, dirty: Sequence[tuple[str, str]] = (), limit: int = 1000
    ) -> defer.Deferred[dict[str, object]]:
        """What changed after ``clock`` (ISharedWorldStore)."""
        return self._call(self._world.world_since, clock, dirty, limit)

    def prune_world_messages(self, keep: int) -> defer.Deferred[int]:
        """Keep only the newest ``keep`` world messages; how many went."""
        return self._call(self._world.prune_world_messages, keep)

    def listen_world(
        self, on_change: Callable[[int], None], on_connect: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``on_change(clock)`` after every world change; returns ``stop()``."""
        return self._world.listen_world(on_change, on_connect)
