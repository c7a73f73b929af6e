"""The parts both SQL stores are composed of, one per concern, over one adbapi path.

:class:`~ai_tools.store.sqlite.SQLiteStore` and
:class:`~ai_tools.store.postgres.PostgreSQLStore` are each their database's
transaction runner (:class:`SQLRunner`: how a write is grouped and committed,
how a read sees the writes asked for before it) plus these parts, which check
and encode the arguments in the reactor thread and hand the shared statements
(:mod:`ai_tools.store.sql_statements`, :mod:`ai_tools.store.traces`) to the
runner with the store's :class:`~ai_tools.store.dialect.SQLDialect`.  A part
holds no state: it is the rules of one concern, written once, as Twisted's
reactor is composed of mixins for time, threads and descriptors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, TypeVar

from twisted.internet import defer
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.history_format import RepairReport
from ai_tools.interfaces import IAssistantStates, ICacheStore, IRecordStore, ITraceStore
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.store import sql_statements as sql
from ai_tools.store import traces
from ai_tools.store.dialect import SQLDialect
from ai_tools.store.history_repair import log_repair
from ai_tools.store.serialization import (
    check_content,
    check_expiry,
    check_limit,
    check_metadata,
    check_name,
    encode_json,
)
from ai_tools.store.traces import TraceFilter, trace_row

__all__ = ["AssistantStates", "CacheEntries", "LoopTraces", "Records", "SQLRunner",
           "StoreClosed", "WorldRows", "deliver"]

T = TypeVar("T")


class StoreClosed(RuntimeError):
    """A store method was called before ``open()`` or after ``close()``."""


def deliver(waiters: Sequence[defer.Deferred[object]], results: Sequence[object]) -> None:
    """Fire each write's Deferred with its result, or errback it with its Failure.

    The writes of one committed group: a write that failed in its savepoint
    failed alone (its result is its Failure), the others are durable.
    """
    for waiter, result in zip(waiters, results, strict=True):
        if isinstance(result, Failure):
            waiter.errback(result)
        else:
            waiter.callback(result)


class SQLRunner:
    """What a part asks of its store: the dialect, the clock and the transaction runner."""

    __slots__ = ()

    dialect: ClassVar[SQLDialect]
    """The store's database."""

    def _now(self) -> float:
        """The time records and states are stamped with (seconds)."""
        raise NotImplementedError

    def _write(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """Run ``fn(cursor, *args)`` in a grouped write transaction; fires once committed."""
        raise NotImplementedError

    def _query(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """Run ``fn(cursor, *args)`` as a read that sees every write asked for before it."""
        raise NotImplementedError


@implementer(IAssistantStates)
class AssistantStates(SQLRunner):
    """IAssistantStates but ``save_many`` (each database writes states its own way)."""

    __slots__ = ()

    def load_assistant(self, name: str) -> defer.Deferred[dict[str, object] | None]:
        """The saved state of ``name`` with its history repaired, or None."""
        try:
            check_name(name, "assistant name")
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        d = self._query(sql.load_assistant, self.dialect, name)
        return d.addCallback(_report_repair, name)

    def save_assistant(self, name: str, state: JSONMapping) -> defer.Deferred[None]:
        """Replace the saved state of ``name`` in one transaction."""
        return self.save_many({name: state})

    def save_many(self, states: Mapping[str, JSONMapping]) -> defer.Deferred[None]:
        """Replace the saved states of several assistants in one transaction (all or none)."""
        raise NotImplementedError

    def delete_assistant(self, name: str) -> defer.Deferred[bool]:
        """Forget ``name``; fires True if it had saved state."""
        return self._write(sql.delete_assistant, self.dialect, name)

    def list_assistants(self) -> defer.Deferred[list[str]]:
        """Sorted names of the assistants with saved state."""
        return self._query(sql.list_assistants, self.dialect)


def _report_repair(loaded: tuple[dict[str, object], RepairReport] | None, name: str
                   ) -> dict[str, object] | None:
    """The loaded state, once what its repair changed is logged."""
    if loaded is None:
        return None
    state, report = loaded
    log_repair(name, report)
    return state


@implementer(ICacheStore)
class CacheEntries(SQLRunner):
    """ICacheStore: the persistent cache's entries."""

    __slots__ = ()

    def cache_get(self, namespace: str, key: str, now: float) -> defer.Deferred[JSONValue]:
        """The cached value, or None when absent or expired (``expires_at <= now``)."""
        return self._query(sql.cache_get, self.dialect, namespace, key, now)

    def cache_put(
        self, namespace: str, key: str, value: object, expires_at: float | None
    ) -> defer.Deferred[None]:
        """Store ``value`` under ``(namespace, key)`` until ``expires_at`` (None: forever)."""
        try:
            check_name(namespace, "cache namespace")
            check_name(key, "cache key")
            row = (namespace, key, encode_json(value, "cache value"), check_expiry(expires_at))
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        return self._write(sql.cache_put, self.dialect, row)

    def cache_invalidate(self, namespace: str) -> defer.Deferred[int]:
        """Drop every entry of ``namespace``; fires with how many were dropped."""
        return self._write(sql.cache_invalidate, self.dialect, namespace)

    def cache_purge_expired(self, now: float) -> defer.Deferred[int]:
        """Drop every expired entry; fires with how many were dropped."""
        return self._write(sql.cache_purge, self.dialect, now)


@implementer(IRecordStore)
class Records(SQLRunner):
    """IRecordStore: searchable records (full-text search as the dialect has it)."""

    __slots__ = ()

    def add_record(
        self,
        owner: str,
        collection: str,
        content: str,
        metadata: JSONMapping | None = None,
        parent_id: int | None = None,
    ) -> defer.Deferred[JSONObject]:
        """Add a record; fires with its dict (``NotFound`` if ``parent_id`` is unknown)."""
        try:
            check_name(owner, "record owner")
            check_name(collection, "record collection")
            row = (owner, collection, check_content(content), check_metadata(metadata))
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        return self._write(sql.add_record, self.dialect, row, parent_id, self._now())

    def update_record(
        self,
        record_id: int,
        content: str | None = None,
        metadata: JSONMapping | None = None,
    ) -> defer.Deferred[JSONObject | None]:
        """Replace the content and/or metadata of a record; None if unknown."""
        try:
            new_content = check_content(content) if content is not None else None
            new_metadata = check_metadata(metadata) if metadata is not None else None
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        return self._write(sql.update_record, self.dialect, record_id, new_content,
                           new_metadata, self._now())

    def get_record(self, record_id: int) -> defer.Deferred[JSONObject | None]:
        """One record dict, or None."""
        return self._query(sql.get_record, self.dialect, record_id)

    def delete_record(self, record_id: int) -> defer.Deferred[bool]:
        """Remove a record (its children keep existing, with no parent); True if it existed."""
        return self._write(sql.delete_record, self.dialect, record_id)

    def list_records(
        self,
        owner: str,
        collection: str | None,
        limit: int = 20,
        newest_first: bool = True,
        parent_id: int | None = None,
    ) -> defer.Deferred[list[JSONObject]]:
        """Records of one collection (None: every collection) in time order."""
        try:
            check_limit(limit)
        except ValueError as exc:
            return defer.fail(exc)
        return self._query(sql.list_records, self.dialect, owner, collection, limit,
                           newest_first, parent_id)

    def search_records(
        self, owner: str, collection: str | None, query: str, limit: int = 10
    ) -> defer.Deferred[list[JSONObject]]:
        """Full-text search, best first; ``score`` is higher for a better match.

        SQLite's FTS5 ranks by BM25 (``score`` is ``-bm25()``), PostgreSQL by
        ``ts_rank``.  Any word of ``query`` may match; arbitrary text is safe
        (operators and quotes in it are not interpreted).
        """
        try:
            check_limit(limit)
        except ValueError as exc:
            return defer.fail(exc)
        search = self.dialect.search_clause(query)
        if search is None:
            return defer.succeed([])
        return self._query(sql.search_records, self.dialect, owner, collection, search, limit)


@implementer(ITraceStore)
class LoopTraces(SQLRunner):
    """ITraceStore: the newest loop traces of each assistant (:mod:`ai_tools.store.traces`)."""

    __slots__ = ()

    def save_trace(self, trace: JSONMapping, keep: int) -> defer.Deferred[int]:
        """Keep one loop trace, and only the newest ``keep`` of its assistant; its id."""
        try:
            row = trace_row(trace)
        except (KeyError, TypeError, ValueError) as e:
            return defer.fail(e)
        return self._write(traces.save_trace, self.dialect, row, keep)

    def list_traces(self, search: TraceFilter) -> defer.Deferred[list[JSONObject]]:
        """The summaries of the newest traces ``search`` asks for, newest first."""
        return self._query(traces.list_traces, self.dialect, search)

    def get_trace(self, trace_id: int) -> defer.Deferred[JSONObject | None]:
        """One stored trace, whole (None: not kept)."""
        return self._query(traces.get_trace, self.dialect, trace_id)


class WorldRows(SQLRunner):
    """IWorldStore's reading (each database writes the world its own way)."""

    __slots__ = ()

    def load_world(self) -> defer.Deferred[JSONObject | None]:
        """The saved world sections, or None when no world was ever written."""
        return self._query(sql.load_world, self.dialect)
