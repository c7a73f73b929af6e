"""The embedded default store: SQLite through ``twisted.enterprise.adbapi``.

One connection on one thread (``cp_min = cp_max = 1``) is the single writer,
so writes are applied in the order they were asked for and never contend with
each other.  The database runs in WAL mode: readers of the file (the
``sqlite3`` shell, a backup) do not block the writer.

Every write runs in an explicit ``BEGIN IMMEDIATE … COMMIT`` transaction, so
after a crash each assistant's state is either the previous or the new
version, never a mix.  Writes asked for while a transaction is in flight share
the next one, each in its own savepoint (see :meth:`SQLiteStore._write`).
Values are encoded to JSON in the reactor thread before the write is queued
(a caller mutating its dict afterwards cannot change what is written);
decoding and the history repair run on the store thread.

The file is this process's alone while the store is open, and a file deleted
or moved under it stops the writes instead of losing them (see
:mod:`ai_tools.store.sqlite_file`).  Opening checks the file (``PRAGMA
quick_check``, and that it can be written) so that a damaged or read-only
database stops the start with one line saying what to do; SQLite's errors
about the file (disk full, read-only, damaged) reach the callers as a
:class:`~ai_tools.store.sqlite_file.DatabaseFileError` in words.

:class:`SQLiteStore` is that transaction runner plus the parts both SQL stores
share (:mod:`ai_tools.store.sql_parts`: states, cache, records, traces, reading
the world), whose statements run here through
:data:`~ai_tools.store.dialect.SQLITE`; what only SQLite has (saving states,
writing the world, the heard log) is written here.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import attrs
from twisted.enterprise import adbapi
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.interfaces import IHeardLog, IStore, IWorldStore
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.store import sql_statements as sql
from ai_tools.store.clock import SecondsClock, now_seconds
from ai_tools.store.dialect import SQLITE, SQLDialect, fts5_clause
from ai_tools.store.schema import WORLD_TABLES, Migration, migrate
from ai_tools.store.serialization import (
    RECORD_FIELDS,
    check_name,
    check_state,
    encode_world_changes,
)
from ai_tools.store.sql_parts import (
    AssistantStates,
    CacheEntries,
    LoopTraces,
    Records,
    StoreClosed,
    WorldRows,
    deliver,
)
from ai_tools.store.sqlite_file import (
    GONE,
    DatabaseFileError,
    DatabaseFileGuard,
    damaged,
    explain,
    file_problem,
)

T = TypeVar("T")

_RECORD_COLUMNS = ", ".join(f"r.{field}" for field in RECORD_FIELDS)

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


_Op = tuple[Callable[..., object], tuple[object, ...]]
"""One write of a group: the statement function and its arguments after the cursor."""


def _write_group(
    conn: sqlite3.Connection, ops: Sequence[_Op], guard: DatabaseFileGuard | None = None
) -> list[object]:
    """Run several writes in one BEGIN IMMEDIATE … COMMIT; each one's result or Failure.

    First the file is checked (``guard``): a database deleted or moved away
    fails the whole group before anything is written.  With more than one
    write, each runs in its own savepoint: a write that raises is rolled back
    alone (its Failure is its result) and the others are committed.  A
    single write that raises rolls the transaction back and raises.  If the
    file fails (disk full, I/O error: SQLite then rolls the whole transaction
    back) or the commit itself fails, the error is raised and every write of
    the group failed.
    """
    if guard is not None:
        guard.check()
    cursor = conn.cursor()
    try:
        cursor.execute("BEGIN IMMEDIATE")
        try:
            results = _run_writes(conn, cursor, ops)
            cursor.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        return results
    finally:
        cursor.close()


def _run_writes(conn: sqlite3.Connection, cursor: sqlite3.Cursor, ops: Sequence[_Op]
                ) -> list[object]:
    """The writes of one transaction: alone, or each in a savepoint (see :func:`_write_group`)."""
    if len(ops) == 1:
        fn, args = ops[0]
        return [fn(cursor, *args)]
    results: list[object] = []
    for fn, args in ops:
        cursor.execute("SAVEPOINT write")
        try:
            results.append(fn(cursor, *args))
        except Exception as exc:
            # An error about the file (or one after which SQLite ended the
            # transaction itself) fails the group: the savepoint is gone too.
            if not conn.in_transaction or file_problem(exc) is not None:
                raise
            results.append(Failure())
            cursor.execute("ROLLBACK TO write")
        cursor.execute("RELEASE write")
    return results


def _read(conn: sqlite3.Connection, fn: Callable[..., T], *args: object) -> T:
    """Run ``fn(cursor, *args)`` outside a write transaction."""
    cursor = conn.cursor()
    try:
        return fn(cursor, *args)
    finally:
        cursor.close()


@implementer(IWorldStore, IHeardLog)
class SQLiteWorldRows(WorldRows):
    """IWorldStore and IHeardLog in SQLite: the sandbox world of one process, and what its
    characters heard (a world shared by several processes is PostgreSQL's)."""

    __slots__ = ()

    def write_world(
        self,
        put: JSONMapping | None = None,
        delete: Mapping[str, Sequence[str]] | None = None,
    ) -> defer.Deferred[None]:
        """Upsert and delete world rows in one transaction (deletes first)."""
        try:
            rows, meta, deletes = encode_world_changes(put, delete)
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        return self._write(_write_world, rows, meta, deletes)

    def append_heard(self, messages: Sequence[tuple[int, str, str]], keep: int
                     ) -> defer.Deferred[None]:
        """IHeardLog.append_heard (grouped with the writes asked for meanwhile)."""
        return self._write(_append_heard, list(messages), keep)

    def load_heard(self, limit: int) -> defer.Deferred[list[tuple[int, str, str]]]:
        """IHeardLog.load_heard."""
        return self._query(_load_heard, limit)


@implementer(IStore, IWorldStore, IHeardLog)
@attrs.define(eq=False)
class SQLiteStore(AssistantStates, CacheEntries, Records, LoopTraces, SQLiteWorldRows):
    """IStore and IWorldStore on one SQLite file (or ``":memory:"``).

    :param path: database file; its directory is created if missing.
    :param clock: stamps records and saved states (default: the reactor).
    :param reactor: the reactor adbapi schedules on (default: the global one).
    :param synchronous: SQLite ``PRAGMA synchronous``.  ``"FULL"`` (default)
        makes every commit durable against power loss; ``"NORMAL"`` is
        faster and still survives a killed process (WAL mode).
    :param quick_check: run ``PRAGMA quick_check`` when opening (it reads the
        whole file: about 2 s per GB), so a damaged file stops the start
        instead of failing some later read.
    """

    path: str
    clock: SecondsClock | None = None
    reactor: object = None
    """Only handed to adbapi (which needs ``IReactorCore`` and ``IReactorThreads``)."""
    synchronous: str = attrs.field(default="FULL")
    quick_check: bool = True
    _pool: adbapi.ConnectionPool | None = attrs.field(default=None, init=False)
    _guard: DatabaseFileGuard | None = attrs.field(default=None, init=False)
    _problem: str | None = attrs.field(default=None, init=False)
    """What :meth:`health` last found wrong with the file (logged when it changes)."""
    last_write_error: str | None = attrs.field(default=None, init=False)
    """Why the last write transaction failed; None once one succeeds again."""
    schema_version: int = attrs.field(default=0, init=False)
    _pending: list[tuple[Callable[..., object], tuple[object, ...], defer.Deferred[Any]]] = (
        attrs.field(factory=list, init=False))
    """Writes asked for while a write transaction was in flight: the next group."""
    _writing: int = attrs.field(default=0, init=False)
    """Write transactions submitted to the store thread and not finished yet."""
    transactions: int = attrs.field(default=0, init=False)
    """Write transactions committed or attempted (for status and benchmarks)."""

    dialect: ClassVar[SQLDialect] = SQLITE
    _log = Logger()

    @synchronous.validator
    def _check_synchronous(self, _attribute: attrs.Attribute[str], value: str) -> None:
        if value.upper() not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {value!r}")

    def _now(self) -> float:
        return now_seconds(self.clock)

    # -- lifecycle --------------------------------------------------------

    def open(self) -> defer.Deferred[None]:
        """Claim the file, open the connection, check the file and apply missing migrations.

        Fails with :class:`~ai_tools.store.sqlite_file.DatabaseFileError` when
        another process holds the file, or it is damaged or read-only.
        """
        if self._pool is not None:
            return defer.succeed(None)
        if self.path != ":memory:":
            try:
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
                guard = DatabaseFileGuard(self.path)
                guard.claim()
            except (OSError, DatabaseFileError) as exc:
                return defer.fail(exc)
            self._guard = guard
        kwargs: dict[str, object] = {
            "cp_min": 1,
            "cp_max": 1,
            "cp_openfun": self._configure,
            "check_same_thread": False,
            "isolation_level": None,  # we issue BEGIN/COMMIT ourselves
            "timeout": 30.0,
        }
        if self.reactor is not None:
            kwargs["cp_reactor"] = self.reactor
        self._pool = adbapi.ConnectionPool("sqlite3", self.path, **kwargs)
        d = self._pool.runWithConnection(self._prepare, self._now())
        d.addCallback(self._opened)
        d.addErrback(self._open_failed)
        return d

    def _configure(self, conn: sqlite3.Connection) -> None:
        """Per-connection settings (runs on the store thread when it connects)."""
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")

    def _prepare(self, conn: sqlite3.Connection, now: float) -> int:
        """On the store thread: check the file, migrate, check it can be written."""
        if self.quick_check:
            found = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)")]
            if found != ["ok"]:
                lines = [line.strip() for text in found for line in text.splitlines()]
                said = [line for line in lines if line and not line.startswith("***")]
                raise damaged(self.path, "quick_check: " + "; ".join(said))
        version = self._migrate(conn, now)
        _check_writable(conn)
        if self._guard is not None:
            self._guard.remember()
        return version

    def _migrate(self, conn: sqlite3.Connection, now: float) -> int:
        applied: list[Migration] = []
        version = migrate(conn, now, on_applied=applied.append)
        for migration in applied:
            self._log.info(
                "SQLite store {path}: applied migration {version} ({description})",
                path=self.path,
                version=migration.version,
                description=migration.description,
            )
        return version

    def _opened(self, version: int) -> None:
        self.schema_version = version

    def _open_failed(self, failure: Failure) -> Failure:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self._release()
        return self._explained(failure)

    def _explained(self, failure: Failure) -> Failure:
        """``failure``, or the DatabaseFileError in words when it is about the file."""
        explained = explain(failure.value, self.path) if failure.value else None
        return failure if explained is None else Failure(explained)

    def _release(self) -> None:
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.release()

    def close(self) -> defer.Deferred[None]:
        """Finish the queued work, then close the connection and its thread, and the lock."""
        self._submit_pending()
        pool, self._pool = self._pool, None
        if pool is None:
            return defer.succeed(None)
        d = pool.runWithConnection(lambda conn: None)

        def shut(result: object) -> Failure | None:
            pool.close()
            self._release()
            return result if isinstance(result, Failure) else None

        d.addBoth(shut)
        return d

    def health(self) -> dict[str, str | None]:
        """The file's state for status pages (checked now: one ``stat``).

        ``problem`` is None while the file is where it was opened; else what
        happened to it (deleted, moved, replaced, its lock file lost), and
        writes fail until it is back.  ``last_write_error`` is why the last
        write transaction failed (None once one succeeds again).
        """
        self._note_problem()
        return {"backend": "sqlite", "path": self.path, "problem": self._problem,
                "last_write_error": self.last_write_error}

    def _note_problem(self) -> None:
        """Look at the file; log once when a problem appears, and when it goes away."""
        problem = self._guard.problem() if self._guard is not None else None
        if problem == self._problem:
            return
        if problem is not None:
            self._log.error("SQLite store: {problem}; writes are refused until the file is "
                            "back (put it back, or stop the service and restore a backup)",
                            problem=problem)
        else:
            self._log.info("SQLite store {path}: the database file is back; writes go on",
                           path=self.path)
        self._problem = problem

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` was not called."""
        return self._pool is not None

    def _write(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """Run ``fn(cursor, *args)`` in a write transaction; fires once committed.

        Writes asked for while another write transaction is in flight are
        grouped into the next one (each in its own savepoint, so one failing
        write fails alone): a thousand assistants recording an episode in the
        same moment cost a few commits, not a thousand.  Order is kept.
        """
        if self._pool is None:
            return defer.fail(StoreClosed(f"SQLite store {self.path} is not open"))
        d: defer.Deferred[T] = defer.Deferred()
        self._pending.append((fn, args, d))
        if not self._writing:
            self._submit_pending()
        return d

    def _submit_pending(self) -> None:
        """Hand the grouped writes to the store thread as one transaction."""
        ops, self._pending = self._pending, []
        if not ops or self._pool is None:
            for _, _, d in ops:
                d.errback(StoreClosed(f"SQLite store {self.path} is not open"))
            return
        self._writing += 1
        self.transactions += 1
        waiters = [d for _, _, d in ops]
        group = self._pool.runWithConnection(
            _write_group, [(fn, args) for fn, args, _ in ops], self._guard)
        group.addBoth(self._group_done, waiters)

    def _group_done(self, outcome: list[object] | Failure,
                    waiters: list[defer.Deferred[object]]) -> None:
        self._writing -= 1
        if self._pending and not self._writing:
            self._submit_pending()  # the thread starts on the next group at once
        if isinstance(outcome, Failure):
            self._group_failed(self._explained(outcome), waiters)
            return
        self.last_write_error = None
        if self._problem is not None:
            self._note_problem()
        deliver(waiters, outcome)

    def _group_failed(self, failure: Failure, waiters: list[defer.Deferred[object]]) -> None:
        """Every write of the group failed: say why in the status, and to each caller.

        A problem with the file (a full disk...) is also logged, once until it
        changes or a write succeeds again: each caller logs its own failure.
        """
        previous, self.last_write_error = self.last_write_error, failure.getErrorMessage()
        problem = getattr(failure.value, "problem", None)
        if problem == GONE:
            self._note_problem()
        elif problem is not None and self.last_write_error != previous:
            self._log.error("SQLite store: {error}", error=self.last_write_error)
        for d in waiters:
            d.errback(failure)

    def _query(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        if self._pool is None:
            return defer.fail(StoreClosed(f"SQLite store {self.path} is not open"))
        self._submit_pending()  # a read sees every write asked for before it
        return self._pool.runWithConnection(_read, fn, *args).addErrback(self._explained)

    def run_in_transaction(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """Run ``fn(cursor, *args)`` on the store thread in one write transaction.

        For callers that need several statements applied atomically beyond what
        the methods offer.  ``fn`` must not touch Twisted or the reactor.
        """
        return self._write(fn, *args)

    def integrity_check(self) -> defer.Deferred[str]:
        """``PRAGMA integrity_check`` (``"ok"`` for a sound file)."""

        def check(cursor: sqlite3.Cursor) -> str:
            cursor.execute("PRAGMA integrity_check")
            return "\n".join(str(row[0]) for row in cursor.fetchall())

        return self._query(check)

    # -- assistants (the rest: ai_tools.store.sql_parts.AssistantStates) ------

    def save_many(self, states: Mapping[str, JSONMapping]) -> defer.Deferred[None]:
        """Replace the saved states of several assistants in one transaction."""
        try:
            rows = [
                (check_name(name, "assistant name"), check_state(state))
                for name, state in states.items()
            ]
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        return self._write(_save_states, rows, self._now())


# -- statements (run on the store thread) --------------------------------------


def _append_heard(cursor: sqlite3.Cursor, messages: list[tuple[int, str, str]],
                  keep: int) -> None:
    cursor.executemany("INSERT OR REPLACE INTO world_heard (seq, data, receivers)"
                       " VALUES (?, ?, ?)", messages)
    cursor.execute("DELETE FROM world_heard WHERE seq <= (SELECT seq FROM world_heard"
                   " ORDER BY seq DESC LIMIT 1 OFFSET ?)", (keep,))


def _load_heard(cursor: sqlite3.Cursor, limit: int) -> list[tuple[int, str, str]]:
    cursor.execute("SELECT seq, data, receivers FROM world_heard ORDER BY seq DESC LIMIT ?",
                   (limit,))
    return [(int(seq), str(data), str(receivers))
            for seq, data, receivers in reversed(cursor.fetchall())]


def _check_writable(conn: sqlite3.Connection) -> None:
    """Raise SQLite's own error when the file cannot be written (a read-only file or disk).

    SQLite opens a file it may not write read-only, without a word, and
    fails only at the first write; this writes the header's ``user_version``
    (unused by ai_tools) back unchanged and rolls it back.
    """
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA user_version = {int(version)}")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _save_states(cursor: sqlite3.Cursor, rows: list[tuple[str, str]], now: float) -> None:
    cursor.executemany(
        "INSERT INTO assistants (name, state, updated_at) VALUES (?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET state = excluded.state,"
        " updated_at = excluded.updated_at",
        [(name, state, now) for name, state in rows],
    )


def _search_records(cursor: sqlite3.Cursor, owner: str, collection: str | None,
                    expression: str, limit: int) -> list[JSONObject]:
    """The records of ``owner`` matching the FTS5 ``expression`` (for tests of the search)."""
    return sql.search_records(cursor, SQLITE, owner, collection, fts5_clause(expression), limit)


def _write_world(
    cursor: sqlite3.Cursor,
    rows: dict[str, list[tuple[str, str]]],
    meta: dict[str, str],
    deletes: dict[str, list[str]],
) -> None:
    for section, keys in deletes.items():
        table, column = WORLD_TABLES.get(section, ("world_meta", "key"))
        cursor.executemany(f"DELETE FROM {table} WHERE {column} = ?", [(k,) for k in keys])
    for section, items in rows.items():
        table, column = WORLD_TABLES[section]
        # UPSERT keeps the row (and its rowid, hence load order) of an existing key.
        cursor.executemany(
            f"INSERT INTO {table} ({column}, data) VALUES (?, ?)"
            f" ON CONFLICT ({column}) DO UPDATE SET data = excluded.data",
            items,
        )
    cursor.executemany(
        "INSERT INTO world_meta (key, value) VALUES (?, ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        list(meta.items()),
    )
