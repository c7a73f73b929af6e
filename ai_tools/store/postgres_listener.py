"""``LISTEN`` on a PostgreSQL connection of its own, read by the reactor.

A notification arrives on an idle connection's socket.  The connection is
opened (blocking) in a thread, ``LISTEN channel`` is sent there too, then the
socket is handed to the reactor (``addReader``): when it is readable,
psycopg2's ``connection.poll()`` reads what arrived without blocking and
fills ``connection.notifies``, whose payloads go to ``on_notify``.
Nothing else ever runs on this connection, and it is outside
the adbapi pool: a pool connection is busy with queries and would hear
nothing while idle in the pool.

When the connection breaks (server restart, network), the listener closes it
and connects again after a delay that doubles up to ``max_delay``; every time
it is listening again it calls ``on_connect`` — notifications sent meanwhile
are lost, so the caller catches up from the database then.  TCP keepalives
make a silently dead peer break the connection too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

import attrs
from twisted.internet import defer, threads
from twisted.internet.interfaces import IReadDescriptor
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.default_reactor import global_reactor

APPLICATION_NAME = "ai_tools listen"
"""How the listening connection shows in ``pg_stat_activity``."""

_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
               "keepalives_count": 3, "connect_timeout": 10}


class _Notify(Protocol):
    """One notification as psycopg2 hands it over."""

    @property
    def payload(self) -> str: ...


class _ListenConnection(Protocol):
    """What the listener uses of a psycopg2 connection."""

    notifies: list[_Notify]

    def poll(self) -> object: ...

    def fileno(self) -> int: ...

    def close(self) -> object: ...


class _Retry(Protocol):
    """The pending reconnection (an ``IDelayedCall``)."""

    def active(self) -> bool: ...

    def cancel(self) -> None: ...


@implementer(IReadDescriptor)
class _SocketReader:
    """The reactor's view of the listening connection's socket."""

    def __init__(self, listener: NotificationListener, fileno: int) -> None:
        self._listener = listener
        self._fileno = fileno

    def fileno(self) -> int:
        return self._fileno

    def doRead(self) -> None:
        self._listener.readable()

    def connectionLost(self, reason: Failure) -> None:
        self._listener.lost(reason)

    def logPrefix(self) -> str:
        return "PostgreSQL LISTEN"


@attrs.define(eq=False)
class NotificationListener:
    """Calls ``on_notify(payload)`` for each NOTIFY on ``channel`` (a plain identifier)."""

    dsn: str
    connect_kwargs: dict[str, object] = attrs.field(repr=False)
    channel: str
    on_notify: Callable[[str], None]
    on_connect: Callable[[], None]
    reactor: Any = None
    """Provides ``IReactorThreads``, ``IReactorFDSet`` and ``IReactorTime`` (default: the
    global reactor).  No one interface says all three (and mypy reads zope interfaces
    without their providers), hence no narrower type."""
    retry_delay: float = 0.5
    max_delay: float = 30.0
    _conn: _ListenConnection | None = attrs.field(default=None, init=False)
    _reader: _SocketReader | None = attrs.field(default=None, init=False)
    _stopped: bool = attrs.field(default=True, init=False)
    _delay: float = attrs.field(default=0.0, init=False)
    _retry: _Retry | None = attrs.field(default=None, init=False)
    _waiting: list[defer.Deferred[None]] = attrs.field(factory=list, init=False)
    connects: int = attrs.field(default=0, init=False)
    """How many times it started listening (reconnects included)."""

    _log = Logger()

    def __attrs_post_init__(self) -> None:
        if not self.channel.isidentifier():
            raise ValueError(f"channel must be a plain identifier, not {self.channel!r}")
        if self.reactor is None:
            self.reactor = global_reactor()

    def start(self) -> None:
        """Connect and listen (in the background); reconnects until :meth:`stop`."""
        if not self._stopped:
            return
        self._stopped = False
        self._delay = self.retry_delay
        self._connect()

    def stop(self) -> None:
        """Stop listening and close the connection; harmless twice."""
        self._stopped = True
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
        self._drop()

    def _connect(self) -> None:
        self._retry = None
        d = threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self._open)
        d.addCallbacks(self._listening, self._failed)

    def _open(self) -> _ListenConnection:
        """(In a thread.)  A new autocommit connection that listens on the channel."""
        import psycopg2

        conn = psycopg2.connect(self.dsn, **{
            **_KEEPALIVES, **self.connect_kwargs, "application_name": APPLICATION_NAME})
        try:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute(f"LISTEN {self.channel}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _listening(self, conn: _ListenConnection) -> None:
        if self._stopped:
            conn.close()
            return
        self._conn = conn
        # The reactor watches a duplicate of the socket: libpq closes its own
        # descriptor when the connection breaks, before we could unregister it.
        self._reader = _SocketReader(self, os.dup(conn.fileno()))
        self.reactor.addReader(self._reader)
        self._delay = self.retry_delay
        self.connects += 1
        self._log.debug("Listening for {channel} notifications", channel=self.channel)
        self._call(self.on_connect)
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.callback(None)

    def when_listening(self) -> defer.Deferred[None]:
        """Fires once the listener listens (at once if it does now)."""
        if self._conn is not None:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()
        self._waiting.append(waiter)
        return waiter

    def _failed(self, failure: Failure) -> None:
        if self._stopped:
            return
        self._log.warn("Cannot listen for {channel} notifications ({error}); retrying in "
                       "{delay:.1f}s", channel=self.channel,
                       error=failure.getErrorMessage(), delay=self._delay)
        self._retry = self.reactor.callLater(self._delay, self._connect)
        self._delay = min(self.max_delay, self._delay * 2)

    def readable(self) -> None:
        """The socket has data: take in what arrived and hand over each notification."""
        conn = self._conn
        if conn is None:
            return
        try:
            conn.poll()
            payloads = [notify.payload for notify in conn.notifies]
            del conn.notifies[:]
        except Exception:
            self.lost(Failure())
            return
        for payload in payloads:
            self._call(self.on_notify, payload)

    def lost(self, reason: Failure) -> None:
        """The connection broke: drop it and connect again (unless stopped)."""
        if self._conn is None:
            return
        self._drop()
        self._failed(reason)

    def _drop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            self.reactor.removeReader(reader)
            os.close(reader.fileno())
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                self._log.failure("Closing the LISTEN connection failed")

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception:
            self._log.failure("A {channel} notification handler failed", channel=self.channel)
