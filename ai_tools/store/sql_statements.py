"""The statements both SQL stores share: assistants' states, the cache, records, the world.

Each function takes a DB-API cursor and the database's
:class:`~ai_tools.store.dialect.SQLDialect`, and runs on a store thread inside the
transaction the store opened for it (a grouped write, or a read); none of them
touches Twisted.  The statements are written once, with ``?`` placeholders; the
dialect spells them for its driver.  What only one database has stays in its own
module: the heard log and the plain world writes of SQLite in
:mod:`ai_tools.store.sqlite`, leases, fenced state writes and the shared world of
PostgreSQL in :mod:`ai_tools.store.postgres_statements` and
:mod:`ai_tools.store.postgres_world`.
"""

from __future__ import annotations

import json

from ai_tools.errors import NotFound
from ai_tools.history_format import RepairReport, repair_state
from ai_tools.json_types import JSONObject, JSONValue
from ai_tools.store.dbapi import DBCursor
from ai_tools.store.dialect import SearchClause, SQLDialect
from ai_tools.store.schema import WORLD_TABLES
from ai_tools.store.serialization import RECORD_FIELDS, record_dict

_RECORD_COLUMNS = ", ".join(f"r.{field}" for field in RECORD_FIELDS)

_ID_RANGE = range(-(2**63), 2**63)
"""The ids both databases can hold (a 64-bit integer): any other id is simply unknown."""

# -- assistants -----------------------------------------------------------------------


def load_assistant(cursor: DBCursor, dialect: SQLDialect, name: str
                   ) -> tuple[dict[str, object], RepairReport] | None:
    """The saved state of ``name`` decoded and repaired, or None."""
    cursor.execute(dialect.sql("SELECT state FROM assistants WHERE name = ?"), (name,))
    row = cursor.fetchone()
    if row is None:
        return None
    return repair_state(json.loads(row[0]))


def delete_assistant(cursor: DBCursor, dialect: SQLDialect, name: str) -> bool:
    """Forget ``name``; True if it had saved state."""
    cursor.execute(dialect.sql("DELETE FROM assistants WHERE name = ?"), (name,))
    return cursor.rowcount > 0


def list_assistants(cursor: DBCursor, dialect: SQLDialect) -> list[str]:
    """Names of the assistants with saved state, in byte order."""
    cursor.execute(f"SELECT name FROM assistants ORDER BY name{dialect.binary_order}")
    return [str(row[0]) for row in cursor.fetchall()]


# -- cache ----------------------------------------------------------------------------


def cache_get(cursor: DBCursor, dialect: SQLDialect, namespace: str, key: str, now: float
              ) -> JSONValue:
    """The cached value, or None when absent or expired (``expires_at <= now``)."""
    cursor.execute(
        dialect.sql("SELECT value, expires_at FROM cache_entries WHERE namespace = ? AND key = ?"),
        (namespace, key))
    row = cursor.fetchone()
    if row is None or (row[1] is not None and row[1] <= now):
        return None
    value: JSONValue = json.loads(row[0])
    return value


_CACHE_KEY = ("namespace", "key")
_CACHE_COLUMNS = ("value", "expires_at")


def cache_put(cursor: DBCursor, dialect: SQLDialect,
              row: tuple[str, str, str, float | None]) -> None:
    """Insert or replace one entry ``(namespace, key, value_json, expires_at)``."""
    cursor.execute(dialect.replace_row("cache_entries", _CACHE_KEY, _CACHE_COLUMNS), row)


def cache_invalidate(cursor: DBCursor, dialect: SQLDialect, namespace: str) -> int:
    """Drop a namespace; how many entries went."""
    cursor.execute(dialect.sql("DELETE FROM cache_entries WHERE namespace = ?"), (namespace,))
    return cursor.rowcount


def cache_purge(cursor: DBCursor, dialect: SQLDialect, now: float) -> int:
    """Drop the expired entries; how many went."""
    cursor.execute(dialect.sql(
        "DELETE FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at <= ?"), (now,))
    return cursor.rowcount


# -- records --------------------------------------------------------------------------


def _fetch_record(cursor: DBCursor, dialect: SQLDialect, record_id: int) -> JSONObject | None:
    cursor.execute(dialect.sql(f"SELECT {_RECORD_COLUMNS} FROM records r WHERE r.id = ?"),
                   (record_id,))
    row = cursor.fetchone()
    return record_dict(row) if row else None


def get_record(cursor: DBCursor, dialect: SQLDialect, record_id: int) -> JSONObject | None:
    """One record, or None (an id beyond 64 bits is simply unknown)."""
    if record_id not in _ID_RANGE:
        return None
    return _fetch_record(cursor, dialect, record_id)


_ADD_RECORD = (
    "INSERT INTO records (owner, collection, content, metadata, parent_id,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def add_record(cursor: DBCursor, dialect: SQLDialect, row: tuple[str, str, str, str],
               parent_id: int | None, now: float) -> JSONObject:
    """Insert a record ``(owner, collection, content, metadata_json)``; its dict as written.

    :class:`~ai_tools.errors.NotFound` if ``parent_id`` is unknown.  The dict is
    built from the row as written, not read back: every tick that answered
    someone adds one.
    """
    if parent_id is not None:
        known = parent_id in _ID_RANGE
        if known:
            cursor.execute(dialect.sql("SELECT 1 FROM records WHERE id = ?"), (parent_id,))
            known = cursor.fetchone() is not None
        if not known:
            raise NotFound(f"parent record {parent_id!r} does not exist")
    record_id = dialect.insert_id(cursor, _ADD_RECORD, (*row, parent_id, now, now))
    return record_dict((record_id, *row, parent_id, now, now))


def update_record(cursor: DBCursor, dialect: SQLDialect, record_id: int,
                  content: str | None, metadata: str | None, now: float) -> JSONObject | None:
    """Replace content and/or metadata (JSON text); the updated dict, or None if unknown.

    Only the columns given are written (SQLite's full-text index is rewritten
    only when the content is).
    """
    if get_record(cursor, dialect, record_id) is None:
        return None
    columns = [column for column, value in (("content", content), ("metadata", metadata))
               if value is not None]
    values = [value for value in (content, metadata) if value is not None]
    assignments = "".join(f"{column} = ?, " for column in columns)
    cursor.execute(dialect.sql(f"UPDATE records SET {assignments}updated_at = ? WHERE id = ?"),
                   (*values, now, record_id))
    return _fetch_record(cursor, dialect, record_id)


def delete_record(cursor: DBCursor, dialect: SQLDialect, record_id: int) -> bool:
    """Remove a record (children keep existing without parent); True if it existed."""
    if record_id not in _ID_RANGE:
        return False
    cursor.execute(dialect.sql("DELETE FROM records WHERE id = ?"), (record_id,))
    return cursor.rowcount > 0


def list_records(cursor: DBCursor, dialect: SQLDialect, owner: str, collection: str | None,
                 limit: int, newest_first: bool, parent_id: int | None) -> list[JSONObject]:
    """Records of one collection (None: all) in time order."""
    where = ["r.owner = ?"]
    params: list[object] = [owner]
    if collection is not None:
        where.append("r.collection = ?")
        params.append(collection)
    if parent_id is not None:
        where.append("r.parent_id = ?")
        params.append(parent_id)
    order = "DESC" if newest_first else "ASC"
    cursor.execute(
        dialect.sql(f"SELECT {_RECORD_COLUMNS} FROM records r WHERE {' AND '.join(where)}"
                    f" ORDER BY r.created_at {order}, r.id {order} LIMIT ?"),
        (*params, limit))
    return [record_dict(row) for row in cursor.fetchall()]


def search_records(cursor: DBCursor, dialect: SQLDialect, owner: str, collection: str | None,
                   search: SearchClause, limit: int) -> list[JSONObject]:
    """Full-text search of one owner's records, best first; each with its ``score``.

    ``search`` is the dialect's :meth:`~ai_tools.store.dialect.SQLDialect.search_clause`
    for the query; ties go to the newest record.
    """
    where = f"{search.match} AND r.owner = ?"
    params: list[object] = [*search.params, owner]
    if collection is not None:
        where += " AND r.collection = ?"
        params.append(collection)
    cursor.execute(
        dialect.sql(f"SELECT {_RECORD_COLUMNS}, {search.rank} AS rank FROM {search.source}"
                    f" WHERE {where} ORDER BY {search.best_first}, r.created_at DESC,"
                    " r.id DESC LIMIT ?"),
        (*params, limit))
    results = []
    for row in cursor.fetchall():
        record = record_dict(row[:-1])
        record["score"] = search.score_sign * float(row[-1])
        results.append(record)
    return results


# -- the world's rows -------------------------------------------------------------------


def load_world(cursor: DBCursor, dialect: SQLDialect) -> JSONObject | None:
    """IWorldStore.load_world: every section's rows in insertion order, or None."""
    world: JSONObject = {}
    for section, (table, _column) in WORLD_TABLES.items():
        cursor.execute(f"SELECT data FROM {table} ORDER BY {dialect.insertion_order}")
        world[section] = [json.loads(row[0]) for row in cursor.fetchall()]
    cursor.execute("SELECT key, value FROM world_meta")
    world["meta"] = {key: json.loads(value) for key, value in cursor.fetchall()}
    if not world["meta"] and not any(world[section] for section in WORLD_TABLES):
        return None
    return world
