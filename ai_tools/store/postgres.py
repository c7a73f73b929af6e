"""The scale-out store: PostgreSQL through ``twisted.enterprise.adbapi`` and psycopg2.

It keeps what :class:`~ai_tools.store.sqlite.SQLiteStore` promises — the same
contract tests pass on both — for several worker processes sharing one
database:

* **Grouped writes.** One write transaction is in flight at a time; writes
  asked for meanwhile share the next one, each in its own savepoint (one that
  fails is rolled back alone and fails only its caller).  A write's Deferred
  fires once its transaction committed; a read waits for the writes asked for
  before it, so it sees them.  The service checkpoints an iteration this way
  before the assistant's next model call.
* **The same schema versioning** (:mod:`ai_tools.store.postgres_schema`),
  safe when several workers open the database at once.
* **Full-text search** with PostgreSQL's text search: the same pieces of the
  query as FTS5 (:func:`~ai_tools.store.text_search.search_pieces`), stemmed
  and unaccented like FTS5's ``porter unicode61``, ranked by ``ts_rank``.
* **The shared world** (:mod:`ai_tools.store.postgres_world`,
  :class:`~ai_tools.world.shared.SharedWorld`): versioned rows, one global
  message sequence in commit order, ``LISTEN/NOTIFY`` on a connection of its
  own (:mod:`ai_tools.store.postgres_listener`).
* **Leases** with an epoch and fenced state writes: the seam for several
  workers owning assistants (docs/scaling.md).

:class:`PostgreSQLStore` is that transaction runner composed with the parts
both SQL stores share (:mod:`ai_tools.store.sql_parts`, their statements run
through :data:`~ai_tools.store.dialect.POSTGRESQL`) and PostgreSQL's own
(:mod:`ai_tools.store.postgres_parts`: leases, the shared world's rows).

The password never travels in the DSN (refused there): it comes from
``password=`` (see :func:`database_password`: the environment or a file) or
from libpq's own password file.  The driver is psycopg2: measured against
psycopg 3 through this very store, it costs 1.3 to 1.6 times less client CPU per
operation at the same wall time (docs/scaling.md); ``driver=`` exists for that
measurement.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import attrs
from twisted.enterprise import adbapi
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.errors import AIToolsError, ConfigError
from ai_tools.interfaces import ISharedWorldStore, IStore, IWorldStore
from ai_tools.json_types import JSONMapping
from ai_tools.store import postgres_statements as sql
from ai_tools.store import postgres_world as world_sql
from ai_tools.store.clock import SecondsClock, now_seconds
from ai_tools.store.dbapi import DBConnection, DBCursor
from ai_tools.store.dialect import POSTGRESQL, SQLDialect
from ai_tools.store.postgres_parts import Leases, SharedWorldRows
from ai_tools.store.postgres_schema import migrate
from ai_tools.store.schema import Migration
from ai_tools.store.serialization import (
    check_name,
    check_state,
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

if TYPE_CHECKING:
    from ai_tools.store.postgres_listener import NotificationListener

T = TypeVar("T")

PASSWORD_ENV = "AI_TOOLS_DB_PASSWORD"
PASSWORD_FILE_ENV = "AI_TOOLS_DB_PASSWORD_FILE"

_Op = tuple[Callable[..., object], tuple[object, ...]]
"""One write of a group: the statement function and its arguments after the cursor."""


class _PostgreSQLConnection(DBConnection, Protocol):
    """A psycopg connection: a DB-API connection that can be put in autocommit mode."""

    autocommit: bool


def check_dsn(dsn: str) -> dict[str, str]:
    """The parts of a libpq DSN (``key=value ...`` or a URL); ConfigError if bad.

    A password in the DSN is refused: DSNs end up in command lines, process
    listings and logs.
    """
    try:
        from psycopg2.extensions import parse_dsn
    except ImportError:
        raise ConfigError("the PostgreSQL store needs psycopg2: install the postgres extra "
                          "of ai-tools-twisted (pip install 'CHECKOUT[postgres]')") from None
    try:
        parts = parse_dsn(dsn)
    except Exception as exc:  # psycopg2.ProgrammingError: the message says what is wrong
        raise ConfigError(f"bad PostgreSQL DSN: {str(exc).strip()}") from None
    if "password" in parts:
        raise ConfigError(f"the PostgreSQL DSN must not hold the password: set {PASSWORD_ENV} "
                          f"or {PASSWORD_FILE_ENV} instead")
    return {key: str(value) for key, value in parts.items()}


def database_password(environ: Mapping[str, str]) -> str | None:
    """The database password from ``AI_TOOLS_DB_PASSWORD`` or ``AI_TOOLS_DB_PASSWORD_FILE``.

    None when neither is set (libpq's password file or a trust rule may do).
    The file must be a regular file readable by its owner only (like libpq's
    ``.pgpass``); its content without the final newline is the password.
    """
    direct = environ.get(PASSWORD_ENV)
    path = environ.get(PASSWORD_FILE_ENV)
    if direct and path:
        raise ConfigError(f"set only one of {PASSWORD_ENV} and {PASSWORD_FILE_ENV}")
    if direct:
        return direct
    if not path:
        return None
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{PASSWORD_FILE_ENV}: {path} is not a regular file")
        if info.st_mode & 0o077:
            raise ConfigError(f"{PASSWORD_FILE_ENV}: {path} is readable by others "
                              f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it")
        with open(path, encoding="utf-8") as handle:
            password = handle.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{PASSWORD_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
    if not password:
        raise ConfigError(f"{PASSWORD_FILE_ENV}: {path} is empty")
    return password


def _rollback_quietly(cursor: DBCursor) -> None:
    try:
        cursor.execute("ROLLBACK")  # only a warning when no transaction is open
    except Exception:
        pass  # the connection is gone; adbapi reconnects, the original error stands


def _write_group(conn: DBConnection, ops: Sequence[_Op]) -> list[object]:
    """Run writes in one transaction (each in a savepoint when several); finish the world.

    Returns each write's result, or its Failure.  A single write that raises
    rolls the transaction back and raises; so does a failing commit or world
    clock step (every write of the group then failed).
    """
    cursor = conn.cursor()
    try:
        cursor.execute("BEGIN")
        try:
            if len(ops) == 1:
                fn, args = ops[0]
                results: list[object] = [fn(cursor, *args)]
            else:
                results = [_in_savepoint(cursor, fn, args) for fn, args in ops]
            world_sql.finish_world_changes(cursor, results)
            cursor.execute("COMMIT")
        except BaseException:
            _rollback_quietly(cursor)
            raise
        return results
    finally:
        cursor.close()


def _in_savepoint(cursor: DBCursor, fn: Callable[..., object], args: tuple[object, ...]
                  ) -> object:
    """``fn(cursor, *args)`` in a savepoint: its result, or its Failure (rolled back alone)."""
    cursor.execute("SAVEPOINT write")
    try:
        result = fn(cursor, *args)
    except Exception:
        result = Failure()
        cursor.execute("ROLLBACK TO SAVEPOINT write")
    cursor.execute("RELEASE SAVEPOINT write")
    return result


def _read(conn: DBConnection, fn: Callable[..., T], *args: object) -> T:
    """Run ``fn(cursor, *args)`` as a read-only snapshot (one consistent view)."""
    cursor = conn.cursor()
    try:
        cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            result = fn(cursor, *args)
            cursor.execute("COMMIT")
        except BaseException:
            _rollback_quietly(cursor)
            raise
        return result
    finally:
        cursor.close()


@implementer(IStore, IWorldStore, ISharedWorldStore)
@attrs.define(eq=False)
class PostgreSQLStore(AssistantStates, CacheEntries, Records, LoopTraces, WorldRows, Leases,
                      SharedWorldRows):
    """IStore, IWorldStore and ISharedWorldStore on a PostgreSQL database.

    :param dsn: a libpq connection string or URL, without the password.
    :param password: the password (see :func:`database_password`), or None.
    :param clock: stamps records and saved states (default: the reactor).
    :param reactor: the reactor adbapi and the listener schedule on.
    :param pool_size: connections (threads) of the pool: one writes at a
        time, the others read.
    :param driver: the DB-API module; ``"psycopg2"`` is the one supported,
        ``"psycopg"`` (psycopg 3) exists for the driver measurement.
    """

    dsn: str
    password: str | None = attrs.field(default=None, repr=False)
    clock: SecondsClock | None = None
    reactor: object = None
    """Handed to adbapi and the LISTEN connection (default: the global reactor)."""
    pool_size: int = 4
    driver: str = "psycopg2"
    _pool: adbapi.ConnectionPool | None = attrs.field(default=None, init=False)
    schema_version: int = attrs.field(default=0, init=False)
    _pending: list[tuple[Callable[..., object], tuple[object, ...], defer.Deferred[Any]]] = (
        attrs.field(factory=list, init=False))
    """Writes asked for while a write transaction was in flight: the next group."""
    _writing: bool = attrs.field(default=False, init=False)
    _next_readers: list[defer.Deferred[None]] = attrs.field(factory=list, init=False)
    """Reads waiting for the group the pending writes will form."""
    _current_readers: list[defer.Deferred[None]] = attrs.field(factory=list, init=False)
    """Reads waiting for the group in flight."""
    _listeners: list[NotificationListener] = attrs.field(factory=list, init=False)
    transactions: int = attrs.field(default=0, init=False)
    """Write transactions committed or attempted (for status and benchmarks)."""

    dialect: ClassVar[SQLDialect] = POSTGRESQL
    _log = Logger()

    def _now(self) -> float:
        return now_seconds(self.clock)

    @property
    def label(self) -> str:
        """Where the store is, for people: ``PostgreSQL user@host:port/dbname``."""
        try:
            parts = check_dsn(self.dsn)
        except ConfigError:
            return "PostgreSQL (bad DSN)"
        host = parts.get("host", "localhost")
        port = parts.get("port", "5432")
        user = parts.get("user", "")
        return f"PostgreSQL {user + '@' if user else ''}{host}:{port}/{parts.get('dbname', '')}"

    # -- lifecycle --------------------------------------------------------

    def connect_kwargs(self) -> dict[str, object]:
        """What the driver's ``connect`` gets next to the DSN (the password, when given)."""
        kwargs: dict[str, object] = {"application_name": "ai_tools"}
        if self.password is not None:
            kwargs["password"] = self.password
        return kwargs

    def open(self) -> defer.Deferred[None]:
        """Create the pool, check the connection and apply missing migrations."""
        if self._pool is not None:
            return defer.succeed(None)
        try:
            check_dsn(self.dsn)
        except ConfigError as exc:
            return defer.fail(exc)
        kwargs: dict[str, object] = {
            "cp_min": 1, "cp_max": max(2, self.pool_size), "cp_reconnect": True,
            "cp_noisy": False, "cp_openfun": _configure, **self.connect_kwargs(),
        }
        if self.reactor is not None:
            kwargs["cp_reactor"] = self.reactor
        try:
            self._pool = adbapi.ConnectionPool(self.driver, self.dsn, **kwargs)
        except ImportError:
            return defer.fail(AIToolsError(
                f"the PostgreSQL store needs the {self.driver} module: install the "
                "postgres extra of ai-tools-twisted (pip install 'CHECKOUT[postgres]')"))
        d = self._pool.runWithConnection(self._migrate, self._now())
        d.addCallback(self._opened)
        d.addErrback(self._open_failed)
        return d

    def _migrate(self, conn: DBConnection, now: float) -> int:
        applied: list[Migration] = []
        version = migrate(conn, now, on_applied=applied.append)
        for migration in applied:
            self._log.info("{store}: applied migration {version} ({description})",
                           store=self.label, version=migration.version,
                           description=migration.description)
        return version

    def _opened(self, version: int) -> None:
        self.schema_version = version

    def _open_failed(self, failure: Failure) -> Failure:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        return failure

    def close(self) -> defer.Deferred[None]:
        """Stop the listeners, finish the queued writes, then close the pool."""
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.stop()
        if self._pool is None:
            return defer.succeed(None)
        d = self._after_writes()
        pool = self._pool

        def shut(result: object) -> Failure | None:
            if self._pool is pool:
                self._pool = None
            pool.close()
            return result if isinstance(result, Failure) else None

        d.addBoth(shut)
        return d

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` was not called."""
        return self._pool is not None

    # -- the writer and readers ---------------------------------------------

    def _closed(self) -> defer.Deferred[T]:
        return defer.fail(StoreClosed(f"{self.label} store is not open"))

    def _write(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """Run ``fn(cursor, *args)`` in a write transaction; fires once committed.

        Writes asked for while another write transaction is in flight are
        grouped into the next one (each in its own savepoint).  Order is kept.
        """
        if self._pool is None:
            return self._closed()
        d: defer.Deferred[T] = defer.Deferred()
        self._pending.append((fn, args, d))
        if not self._writing:
            self._submit_pending()
        return d

    def _submit_pending(self) -> None:
        ops, self._pending = self._pending, []
        readers, self._next_readers = self._next_readers, []
        if self._pool is None:
            for _, _, d in ops:
                d.errback(StoreClosed(f"{self.label} store is not open"))
            for reader in readers:
                reader.callback(None)
            return
        self._writing = True
        self._current_readers = readers
        self.transactions += 1
        waiters = [d for _, _, d in ops]
        group = self._pool.runWithConnection(_write_group, [(fn, args) for fn, args, _ in ops])
        group.addBoth(self._group_done, waiters, readers)

    def _group_done(self, outcome: list[object] | Failure, waiters: list[defer.Deferred[object]],
                    readers: list[defer.Deferred[None]]) -> None:
        self._writing = False
        self._current_readers = []
        if self._pending:
            self._submit_pending()  # the writer starts on the next group at once
        if isinstance(outcome, Failure):
            for d in waiters:
                d.errback(outcome)
        else:
            deliver(waiters, outcome)
        for reader in readers:
            reader.callback(None)

    def _after_writes(self) -> defer.Deferred[None]:
        """Fires once every write asked for so far has finished (committed or failed)."""
        wait: defer.Deferred[None] = defer.Deferred()
        if self._pending:
            self._next_readers.append(wait)
        elif self._writing:
            self._current_readers.append(wait)
        else:
            wait.callback(None)
        return wait

    def _query(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """A read that sees every write asked for before it."""
        if self._pool is None:
            return self._closed()
        pool = self._pool
        d = self._after_writes()
        d.addCallback(lambda _: pool.runWithConnection(_read, fn, *args))
        return d  # type: ignore[return-value]

    def _snapshot(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """A read of the committed state now, not waiting for this store's writes."""
        if self._pool is None:
            return self._closed()
        return self._pool.runWithConnection(_read, fn, *args)

    def run_in_transaction(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """Run ``fn(cursor, *args)`` on a store thread in one write transaction (grouped)."""
        return self._write(fn, *args)

    # -- assistants (the rest: ai_tools.store.sql_parts.AssistantStates) ------

    def save_many(
        self,
        states: Mapping[str, JSONMapping],
        fence: tuple[str, Mapping[str, int]] | None = None,
        heard: Mapping[str, int] | None = None,
    ) -> defer.Deferred[None]:
        """Replace the saved states of several assistants in one transaction (all or none).

        ``fence`` is ``(worker, {name: epoch})``: then every state is written
        only while ``worker`` holds that assistant's lease at that epoch, and
        the call fails with :class:`~ai_tools.errors.LeaseLost` (writing
        nothing) otherwise.  ``heard`` (with ``fence``): per assistant, the
        last world message its state holds, so that the next owner hears again
        what came after (:meth:`heard_seq`).
        """
        try:
            rows = [(check_name(name, "assistant name"), check_state(state))
                    for name, state in states.items()]
            if fence is not None:
                fence = (check_name(fence[0], "worker"), dict(fence[1]))
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        return self._write(sql.save_states, rows, self._now(), fence,
                           None if heard is None else dict(heard))

    def listen_world(
        self, on_change: Callable[[int], None], on_connect: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``on_change(clock)`` on every world change of any worker (LISTEN/NOTIFY).

        The connection is its own, outside the pool; it reconnects by itself,
        calling ``on_connect()`` each time it (re)starts listening (changes
        may have been missed meanwhile).  Returns the function that stops it.
        """
        from ai_tools.store.postgres_listener import NotificationListener

        listener = NotificationListener(
            dsn=self.dsn, connect_kwargs=self.connect_kwargs(),
            channel=world_sql.NOTIFY_CHANNEL, reactor=self.reactor,
            on_notify=lambda payload: on_change(_clock_value(payload)),
            on_connect=on_connect)
        self._listeners.append(listener)
        listener.start()

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
            listener.stop()

        return stop


def _clock_value(payload: str) -> int:
    try:
        return int(payload)
    except ValueError:
        return 0  # not ours: a catch-up finds nothing new


def _configure(conn: _PostgreSQLConnection) -> None:
    """Per-connection settings: we issue BEGIN/COMMIT ourselves."""
    conn.autocommit = True
