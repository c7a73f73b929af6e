"""The parts only the PostgreSQL store has: leases of assistants, the shared world's rows.

:class:`~ai_tools.store.postgres.PostgreSQLStore` is composed of these and of
the parts both SQL stores share (:mod:`ai_tools.store.sql_parts`).  Like those,
a part checks and encodes its arguments in the reactor thread and hands its
statements (:mod:`ai_tools.store.postgres_statements`,
:mod:`ai_tools.store.postgres_world`) to the store's transaction runner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from twisted.internet import defer

from ai_tools.json_types import JSONMapping
from ai_tools.store import postgres_statements as sql
from ai_tools.store import postgres_world as world_sql
from ai_tools.store.serialization import (
    ChangeOutcome,
    check_name,
    encode_json,
    encode_world_changes,
    encode_world_message,
)
from ai_tools.store.sql_parts import SQLRunner

__all__ = ["Leases", "PostgreSQLRunner", "SharedWorldRows"]

T = TypeVar("T")


class PostgreSQLRunner(SQLRunner):
    """The PostgreSQL store's runner: reads may also be snapshots of what is committed now."""

    __slots__ = ()

    def _snapshot(self, fn: Callable[..., T], *args: object) -> defer.Deferred[T]:
        """Run ``fn(cursor, *args)`` on the committed state now, not waiting for writes."""
        raise NotImplementedError


class Leases(PostgreSQLRunner):
    """Leases with an epoch, and fenced writes: the seam for several workers (docs/scaling.md).

    Which worker runs which assistant, which workers are alive and where their
    APIs answer, and the configurations given over the API.
    """

    __slots__ = ()

    def acquire_lease(self, name: str, worker: str, ttl: float) -> defer.Deferred[int | None]:
        """Take ``name``'s lease for ``ttl`` seconds; its epoch, or None if another holds it."""
        return self._write(sql.acquire_lease, name, worker, self._now(), ttl)

    def renew_leases(
        self, worker: str, names: Sequence[str], ttl: float
    ) -> defer.Deferred[dict[str, int]]:
        """Extend the leases ``worker`` still holds; ``{name: epoch}`` of those."""
        return self._write(sql.renew_leases, worker, list(names), self._now(), ttl)

    def release_leases(
        self, worker: str, names: Sequence[str] | None = None
    ) -> defer.Deferred[int]:
        """Let ``worker``'s leases (all, or ``names``) go at once; how many."""
        return self._write(sql.release_leases, worker,
                           None if names is None else list(names))

    def list_leases(self) -> defer.Deferred[list[tuple[str, str, int, float]]]:
        """Every lease as ``(name, worker, epoch, expires_at)``."""
        return self._query(sql.list_leases)

    def assistant_epochs(self) -> defer.Deferred[dict[str, int | None]]:
        """The lease epoch each saved state was written under (None: unfenced)."""
        return self._query(sql.assistant_epochs)

    def lease_round(
        self, worker: str, names: Sequence[str], ttl: float, keep: float,
        api_url: str | None = None,
    ) -> defer.Deferred[tuple[dict[str, int], list[str], dict[str, tuple[str, float]],
                              dict[str, sql.SharedConfig]]]:
        """A lease manager's round in one transaction (``postgres_statements.lease_round``).

        ``worker`` is alive for ``ttl`` (its API at ``api_url``), its leases
        among ``names`` renewed; fires with the renewed ``{name: epoch}``, the
        live workers, every lease's owner and expiry, and the configurations
        given over the API.
        """
        return self._write(sql.lease_round, check_name(worker, "worker"), list(names),
                           self._now(), ttl, keep, api_url)

    def assistant_owners(self) -> defer.Deferred[dict[str, tuple[str, str | None]]]:
        """The live owner of each assistant and where its API answers: ``{name: (worker,
        api_url)}``; an assistant nobody runs now is not there."""
        return self._query(sql.assistant_owners, self._now())

    def live_workers(self) -> defer.Deferred[dict[str, str | None]]:
        """The live workers and their API addresses: ``{worker: api_url}``."""
        return self._query(sql.live_workers, self._now())

    def shared_configs(self) -> defer.Deferred[dict[str, sql.SharedConfig]]:
        """The configurations given over the API: ``{name: (config, file_config, removed)}``."""
        return self._query(sql.shared_configs)

    def put_shared_config(
        self, name: str, config: JSONMapping, *,
        file_config: JSONMapping | None = None, removed: bool = False,
        create: bool = False,
    ) -> defer.Deferred[bool]:
        """Keep the API's word on assistant ``name`` for every worker; whether it was kept.

        ``config`` is its configuration, ``file_config`` the config file's when
        it names the assistant too, ``removed`` whether it was removed; with
        ``create``, nothing is written over a row that is not removed.
        """
        try:
            check_name(name, "assistant name")
            config_text = encode_json(dict(config), "the configuration")
            file_text = (None if file_config is None
                         else encode_json(dict(file_config), "the file's configuration"))
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        return self._write(sql.put_shared_config, name, config_text, file_text, removed,
                           self._now(), create)

    def heard_seq(self, name: str) -> defer.Deferred[int | None]:
        """The last world message ``name``'s saved state holds (None: not recorded)."""
        return self._query(sql.heard_seq, name)

    def retire_worker(self, worker: str) -> defer.Deferred[int]:
        """``worker`` stops: its leases go at once (epochs kept); how many it held."""
        return self._write(sql.retire_worker, worker)

    def assistant_writes(self) -> defer.Deferred[list[tuple[int, str, str, int]]]:
        """The fenced writes logged, ``(seq, name, worker, epoch)`` (kept ``keep`` seconds)."""
        return self._query(sql.assistant_writes)


class SharedWorldRows(PostgreSQLRunner):
    """ISharedWorldStore but ``listen_world`` (the store's own connection), and the world's
    writes of IWorldStore: versioned rows, one message sequence, the world clock."""

    __slots__ = ()

    def write_world(
        self,
        put: JSONMapping | None = None,
        delete: Mapping[str, Sequence[str]] | None = None,
    ) -> defer.Deferred[None]:
        """Upsert and delete world rows in one transaction (deletes first)."""
        d = self.change_world(put, delete)
        d.addCallback(lambda _: None)
        return d  # type: ignore[return-value]

    def change_world(
        self,
        put: JSONMapping | None = None,
        delete: Mapping[str, Sequence[str]] | None = None,
        *,
        expect: Mapping[tuple[str, str], int | None] | None = None,
        touch: Sequence[tuple[str, str]] = (),
        messages: Sequence[JSONMapping] = (),
    ) -> defer.Deferred[ChangeOutcome]:
        """One shared-world change (see ISharedWorldStore); fires with ``{"clock", "seqs"}``."""
        try:
            rows, meta, deletes = encode_world_changes(put, delete)
            encoded = [encode_world_message(message) for message in messages]
        except (TypeError, ValueError) as exc:
            return defer.fail(exc)
        change = world_sql.WorldChange(rows=rows, meta=meta, deletes=deletes,
                                       expect=dict(expect or {}), touch=list(touch),
                                       messages=encoded)
        d = self._write(world_sql.apply_world_change, change)
        d.addCallback(world_sql.AppliedChange.outcome)
        return d  # type: ignore[return-value]

    def load_shared_world(self, log_size: int) -> defer.Deferred[dict[str, object] | None]:
        """The world with row versions, the clock and what each character heard last."""
        return self._query(world_sql.load_shared_world, log_size)

    def world_since(
        self, clock: int, dirty: Sequence[tuple[str, str]] = (), limit: int = 1000
    ) -> defer.Deferred[dict[str, object]]:
        """What changed after ``clock``: rows, deletions and messages (see ISharedWorldStore)."""
        return self._snapshot(world_sql.world_since, clock, list(dirty), limit)

    def prune_world_messages(self, keep: int) -> defer.Deferred[int]:
        """Keep only the newest ``keep`` world messages; how many went."""
        return self._write(world_sql.prune_messages, keep)

