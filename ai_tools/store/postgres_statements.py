"""The statements only the PostgreSQL store has: fenced state writes, leases, workers.

Each function takes a DB-API cursor (``format`` parameters, psycopg2) and runs
on a store thread inside the transaction the store opened for it; none of them
touches Twisted.  What both SQL stores share is in
:mod:`ai_tools.store.sql_statements`, the world's statements in
:mod:`ai_tools.store.postgres_world`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeAlias

from ai_tools.errors import LeaseLost
from ai_tools.json_types import JSONObject
from ai_tools.store import sql_statements as shared
from ai_tools.store.dbapi import DBCursor
from ai_tools.store.dialect import POSTGRESQL, tsquery_clause

SharedConfig: TypeAlias = "tuple[JSONObject, JSONObject | None, bool]"
"""``(config, file_config, removed)`` of one row of ``assistant_configs``."""


class PsycopgCursor(DBCursor, Protocol):
    """A psycopg2 cursor: it also quotes a value as SQL (``mogrify``)."""

    def mogrify(self, operation: str, parameters: Sequence[object] = ..., /) -> bytes:
        """``operation`` with ``parameters`` quoted in, as the server would get it."""

# -- assistants -----------------------------------------------------------------------


# All rows in one statement (a multi-row VALUES), one round trip for a group.
_SAVE = (
    "INSERT INTO assistants (name, state, updated_at, epoch) VALUES %s"
    " ON CONFLICT (name) DO UPDATE SET state = excluded.state,"
    " updated_at = excluded.updated_at, epoch = excluded.epoch"
)

# A fenced write: only where the lease is held by this worker at this epoch (the
# lease rows locked until commit, so they cannot change hands meanwhile), and
# never over a state written under a newer epoch.  Each write is logged with its
# epoch in assistant_writes (who wrote what under which lease, checked in tests).
_SAVE_FENCED = (
    "WITH written AS ("
    " INSERT INTO assistants (name, state, updated_at, epoch, heard_seq)"
    " SELECT v.name, v.state, v.updated_at, l.epoch, v.heard_seq"
    " FROM (VALUES %s) AS v (name, state, updated_at, epoch, heard_seq)"
    " JOIN assistant_leases l ON l.name = v.name AND l.epoch = v.epoch AND l.worker = {worker}"
    " FOR SHARE OF l"
    " ON CONFLICT (name) DO UPDATE SET state = excluded.state,"
    " updated_at = excluded.updated_at, epoch = excluded.epoch,"
    " heard_seq = COALESCE(excluded.heard_seq, assistants.heard_seq)"
    " WHERE assistants.epoch IS NULL OR assistants.epoch <= excluded.epoch"
    " RETURNING name, epoch, updated_at),"
    " logged AS (INSERT INTO assistant_writes (name, worker, epoch, written_at)"
    " SELECT name, {worker}, epoch, updated_at FROM written)"
    " SELECT name FROM written"
)


def save_states(
    cursor: PsycopgCursor,
    rows: Sequence[tuple[str, str]],
    now: float,
    fence: tuple[str, Mapping[str, int]] | None,
    heard: Mapping[str, int] | None = None,
) -> None:
    """Upsert ``(name, state_json)`` rows; fenced by ``(worker, {name: epoch})``.

    A fenced write of an assistant whose lease this worker no longer holds at
    that epoch raises :class:`LeaseLost` (the store's savepoint then undoes
    the whole call).  ``heard`` gives, per assistant, the last world message
    the state holds (kept when not given; fenced writes only).
    """
    from psycopg2.extras import execute_values

    if not rows:
        return
    if fence is None:
        execute_values(cursor, _SAVE, [(name, state, now, None) for name, state in rows],
                       template="(%s, %s, %s, %s::bigint)", page_size=len(rows))
        return
    worker, epochs = fence
    missing = [name for name, _ in rows if name not in epochs]
    if missing:
        raise LeaseLost(f"no lease epoch given for {', '.join(missing)}")
    heard = heard or {}
    quoted = cursor.mogrify("%s", (worker,)).decode().replace("%", "%%")
    written = {row[0] for row in execute_values(
        cursor, _SAVE_FENCED.format(worker=quoted),
        [(name, state, now, epochs[name], heard.get(name)) for name, state in rows],
        template="(%s, %s, %s::float8, %s::bigint, %s::bigint)", page_size=len(rows),
        fetch=True)}
    lost = [name for name, _ in rows if name not in written]
    if lost:
        raise LeaseLost(f"worker {worker} no longer holds the lease of {', '.join(lost)}")


def heard_seq(cursor: DBCursor, name: str) -> int | None:
    """The last world message ``name``'s saved state holds (None: not recorded)."""
    cursor.execute("SELECT heard_seq FROM assistants WHERE name = %s", (name,))
    row = cursor.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def assistant_epochs(cursor: DBCursor) -> dict[str, int | None]:
    """The lease epoch each saved state was last written under (None: unfenced)."""
    cursor.execute("SELECT name, epoch FROM assistants")
    return {name: epoch for name, epoch in cursor.fetchall()}


def search_records(cursor: DBCursor, owner: str, collection: str | None, pieces: Sequence[str],
                   limit: int) -> list[JSONObject]:
    """The records of ``owner`` matching any of ``pieces`` (for tests of the search)."""
    return shared.search_records(cursor, POSTGRESQL, owner, collection, tsquery_clause(pieces),
                                 limit)


# -- leases ---------------------------------------------------------------------------


def acquire_lease(cursor: DBCursor, name: str, worker: str, now: float, ttl: float) -> int | None:
    """Take the lease of ``name`` for ``worker`` if free, expired or already its own.

    Returns the lease's epoch (raised by one whenever the owner changes), or
    None when another worker holds a live lease.  A lease row is never
    deleted, so an epoch is never handed out twice.
    """
    cursor.execute(
        "INSERT INTO assistant_leases (name, worker, epoch, expires_at)"
        " VALUES (%s, %s, 1 + COALESCE((SELECT epoch FROM assistants WHERE name = %s), 0), %s)"
        " ON CONFLICT (name) DO UPDATE SET worker = excluded.worker,"
        " expires_at = excluded.expires_at,"
        " epoch = CASE WHEN assistant_leases.worker = excluded.worker"
        " THEN assistant_leases.epoch ELSE assistant_leases.epoch + 1 END"
        " WHERE assistant_leases.worker = excluded.worker OR assistant_leases.expires_at <= %s"
        " RETURNING epoch",
        (name, worker, name, now + ttl, now),
    )
    row = cursor.fetchone()
    return None if row is None else int(row[0])


def renew_leases(
    cursor: DBCursor, worker: str, names: Sequence[str], now: float, ttl: float
) -> dict[str, int]:
    """Extend the leases ``worker`` still holds among ``names``; ``{name: epoch}`` of those."""
    cursor.execute(
        "UPDATE assistant_leases SET expires_at = %s WHERE worker = %s"
        " AND name = ANY(%s::text[])"
        " RETURNING name, epoch",
        (now + ttl, worker, list(names)),
    )
    return {name: int(epoch) for name, epoch in cursor.fetchall()}


def release_leases(cursor: DBCursor, worker: str, names: Sequence[str] | None) -> int:
    """Expire ``worker``'s leases (all, or ``names``) at once; how many.  Epochs are kept."""
    if names is None:
        cursor.execute("UPDATE assistant_leases SET expires_at = 0 WHERE worker = %s", (worker,))
    else:
        cursor.execute(
            "UPDATE assistant_leases SET expires_at = 0 WHERE worker = %s"
            " AND name = ANY(%s::text[])",
            (worker, list(names)),
        )
    return int(cursor.rowcount)


def list_leases(cursor: DBCursor) -> list[tuple[str, str, int, float]]:
    """Every lease: ``(name, worker, epoch, expires_at)`` by name."""
    cursor.execute(
        "SELECT name, worker, epoch, expires_at FROM assistant_leases ORDER BY name COLLATE \"C\"")
    return [(name, worker, int(epoch), float(expires)) for name, worker, epoch, expires
            in cursor.fetchall()]


def lease_round(
    cursor: DBCursor, worker: str, names: Sequence[str], now: float, ttl: float, keep: float,
    api_url: str | None = None,
) -> tuple[dict[str, int], list[str], dict[str, tuple[str, float]],
           dict[str, SharedConfig]]:
    """One round of a worker's lease manager, in one transaction.

    Marks ``worker`` alive until ``now + ttl`` (answering at ``api_url``),
    renews the leases it still holds among ``names`` and forgets workers and
    write-log rows older than ``keep`` seconds.  Returns the renewed ``{name:
    epoch}``, the live workers (sorted), every lease as ``{name: (worker,
    expires_at)}`` and the configurations given over the API
    (:func:`shared_configs`).
    """
    cursor.execute(
        "INSERT INTO lease_workers (worker, expires_at, api_url) VALUES (%s, %s, %s)"
        " ON CONFLICT (worker) DO UPDATE SET expires_at = excluded.expires_at,"
        " api_url = excluded.api_url",
        (worker, now + ttl, api_url))
    renewed = renew_leases(cursor, worker, names, now, ttl)
    cursor.execute("DELETE FROM lease_workers WHERE expires_at < %s", (now - keep,))
    cursor.execute("DELETE FROM assistant_writes WHERE written_at < %s", (now - keep,))
    cursor.execute("SELECT worker FROM lease_workers WHERE expires_at > %s"
                   " ORDER BY worker COLLATE \"C\"", (now,))
    live = [row[0] for row in cursor.fetchall()]
    cursor.execute("SELECT name, worker, expires_at FROM assistant_leases")
    leases = {name: (owner, float(expires)) for name, owner, expires in cursor.fetchall()}
    return renewed, live, leases, shared_configs(cursor)


def assistant_owners(cursor: DBCursor, now: float) -> dict[str, tuple[str, str | None]]:
    """The live owner of each assistant: ``{name: (worker, api_url)}``.

    Only leases not expired whose worker is alive count (a worker marks itself
    alive at each round); ``api_url`` is None until the worker's API listens.
    """
    cursor.execute(
        "SELECT l.name, l.worker, w.api_url FROM assistant_leases l"
        " JOIN lease_workers w ON w.worker = l.worker"
        " WHERE l.expires_at > %s AND w.expires_at > %s", (now, now))
    return {name: (worker, url) for name, worker, url in cursor.fetchall()}


def live_workers(cursor: DBCursor, now: float) -> dict[str, str | None]:
    """The live workers and where their APIs answer: ``{worker: api_url}``."""
    cursor.execute("SELECT worker, api_url FROM lease_workers WHERE expires_at > %s", (now,))
    return dict(cursor.fetchall())


# -- the configurations given over the API --------------------------------------------

def shared_configs(cursor: DBCursor) -> dict[str, SharedConfig]:
    """Every configuration given over the API: ``{name: (config, file_config, removed)}``."""
    cursor.execute("SELECT name, config, file_config, removed FROM assistant_configs")
    return {name: (json.loads(config), None if file_config is None else json.loads(file_config),
                   bool(removed))
            for name, config, file_config, removed in cursor.fetchall()}


def put_shared_config(cursor: DBCursor, name: str, config: str, file_config: str | None,
                      removed: bool, now: float, create: bool) -> bool:
    """Write the API's word on ``name`` (JSON texts); whether it was written.

    With ``create``, only where no row is, or the row says removed: two workers
    creating one name at once, one wins.
    """
    condition = " WHERE assistant_configs.removed" if create else ""
    cursor.execute(
        "INSERT INTO assistant_configs (name, config, file_config, removed, updated_at)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET"
        " config = excluded.config, file_config = excluded.file_config,"
        " removed = excluded.removed, updated_at = excluded.updated_at" + condition,
        (name, config, file_config, removed, now))
    return bool(cursor.rowcount > 0)


def retire_worker(cursor: DBCursor, worker: str) -> int:
    """``worker`` stops: its leases expire now (epochs kept) and it is no longer alive."""
    released = release_leases(cursor, worker, None)
    cursor.execute("DELETE FROM lease_workers WHERE worker = %s", (worker,))
    return released


def assistant_writes(cursor: DBCursor) -> list[tuple[int, str, str, int]]:
    """The fenced writes logged, ``(seq, name, worker, epoch)`` by ``seq``.

    For one assistant ``seq`` follows commit order: a write holds its lease row
    (``FOR SHARE``) until it commits, and the lease cannot change hands meanwhile.
    """
    cursor.execute("SELECT seq, name, worker, epoch FROM assistant_writes ORDER BY seq")
    return [(int(seq), name, worker, int(epoch)) for seq, name, worker, epoch
            in cursor.fetchall()]
