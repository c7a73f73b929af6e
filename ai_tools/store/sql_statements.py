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

from ai_tools.history_format import RepairReport, repair_state
from ai_tools.json_types import JSONObject, JSONValue
from ai_tools.store.dbapi import DBCursor
from ai_tools.store.dialect import SQLDialect
from ai_tools.store.serialization import RECORD_FIELDS

_RECORD_COLUMNS = ", ".join(f"r.{field}" for field in RECORD_FIELDS)

_ID_RANGE = range(-(2**63), 2**63)
"""The ids both databases can hold (a 64-bit integer): any other id is simply unknown."""

# -- assistants -----------------------------------------------------------------------


def load_assistant(cursor: DBCursor, dialect: SQLDialect, name: str
                   ) -> tuple[JSONObject, RepairReport] | None:
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


_CACHE_PUT = (
    "INSERT INTO cache_entries (namespace, key, value, expires_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value,"
    " expires_at = excluded.expires_at"
)


def cache_put(cursor: DBCursor, dialect: SQLDialect,
              row: tuple[str, str, str, float | None]) -> None:
    """Insert or replace one entry ``(namespace, key, value_json, expires_at)``."""
    cursor.execute(dialect.sql(_CACHE_PUT), row)


def cache_invalidate(cursor: DBCursor, dialect: SQLDialect, namespace: str) -> int:
    """Drop a namespace; how many entries went."""
    cursor.execute(dialect.sql("DELETE FROM cache_entries WHERE namespace = ?"), (namespace,))
    return cursor.rowcount


def cache_purge(cursor: DBCursor, dialect: SQLDialect, now: float) -> int:
    """Drop the expired entries; how many went."""
    cursor.execute(dialect.sql(
        "DELETE FROM cache_entries WHERE expires_at IS NOT NULL AND expires_at <= ?"), (now,))
    return cursor.rowcount
