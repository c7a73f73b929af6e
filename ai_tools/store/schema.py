"""The SQLite schema as an ordered list of migrations.

A database records the migrations applied to it in ``schema_migrations``.
Opening a store applies the missing ones in order, each in its own
transaction, so a database is always at one well-defined version even if the
process dies during an upgrade.  To change the schema, append a
:class:`Migration` with the next version number; never edit a released one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

import attrs

from ai_tools.errors import AIToolsError
from ai_tools.store.traces import SQLITE_TABLE


class SchemaVersionError(AIToolsError):
    """The database was written by a newer version of ai_tools than this one."""


@attrs.frozen
class Migration:
    """One schema step: SQL statements run in one transaction."""

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "assistant state, persistent cache, records with an FTS5 index",
        (
            """CREATE TABLE assistants (
                name TEXT PRIMARY KEY,
                state TEXT NOT NULL,           -- JSON: history, pending events, mode...
                updated_at REAL NOT NULL
            )""",
            """CREATE TABLE cache_entries (
                namespace TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,           -- JSON
                expires_at REAL,               -- NULL: never expires
                PRIMARY KEY (namespace, key)
            ) WITHOUT ROWID""",
            "CREATE INDEX cache_entries_expiry ON cache_entries (expires_at)"
            " WHERE expires_at IS NOT NULL",
            """CREATE TABLE records (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                owner TEXT NOT NULL,
                collection TEXT NOT NULL,
                content TEXT NOT NULL,
                metadata TEXT NOT NULL DEFAULT '{}',  -- JSON object
                parent_id INTEGER REFERENCES records (id) ON DELETE SET NULL,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL
            )""",
            "CREATE INDEX records_by_collection ON records (owner, collection, created_at)",
            "CREATE INDEX records_by_parent ON records (parent_id) WHERE parent_id IS NOT NULL",
            # External-content FTS5 index: the text lives once, in records.
            """CREATE VIRTUAL TABLE records_fts USING fts5 (
                content, content='records', content_rowid='id',
                tokenize='porter unicode61'
            )""",
            """CREATE TRIGGER records_fts_insert AFTER INSERT ON records BEGIN
                INSERT INTO records_fts (rowid, content) VALUES (new.id, new.content);
            END""",
            """CREATE TRIGGER records_fts_delete AFTER DELETE ON records BEGIN
                INSERT INTO records_fts (records_fts, rowid, content)
                VALUES ('delete', old.id, old.content);
            END""",
            """CREATE TRIGGER records_fts_update AFTER UPDATE OF content ON records BEGIN
                INSERT INTO records_fts (records_fts, rowid, content)
                VALUES ('delete', old.id, old.content);
                INSERT INTO records_fts (rowid, content) VALUES (new.id, new.content);
            END""",
        ),
    ),
    Migration(
        2,
        "sandbox world: objects, channels, prototypes, help entries, meta",
        (
            "CREATE TABLE world_objects (id TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE world_channels (key TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE world_prototypes (key TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE world_help (key TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE world_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ),
    ),
    Migration(
        3,
        "sandbox world: what the characters heard, kept across restarts",
        (
            "CREATE TABLE world_heard (seq INTEGER PRIMARY KEY, data TEXT NOT NULL,"
            " receivers TEXT NOT NULL)",
        ),
    ),
    Migration(4, "loop traces: the newest of each assistant, for the console", SQLITE_TABLE),
)

LATEST_VERSION = MIGRATIONS[-1].version

WORLD_TABLES = {
    "objects": ("world_objects", "id"),
    "channels": ("world_channels", "key"),
    "prototypes": ("world_prototypes", "key"),
    "help": ("world_help", "key"),
}
"""World section → (table, key column)."""


def current_version(cursor: sqlite3.Cursor) -> int:
    """The highest migration applied (0 for a new database)."""
    cursor.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            description TEXT NOT NULL,
            applied_at REAL NOT NULL
        )"""
    )
    cursor.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
    return int(cursor.fetchone()[0])


def migrate(
    connection: sqlite3.Connection,
    now: float,
    migrations: Sequence[Migration] = MIGRATIONS,
    on_applied: Callable[[Migration], None] | None = None,
) -> int:
    """Bring the database to the latest version; return the version reached.

    ``connection`` must be in autocommit mode (``isolation_level=None``): each
    migration opens and commits its own transaction.  Raises
    :class:`SchemaVersionError` if the database is newer than ``migrations``.
    """
    cursor = connection.cursor()
    try:
        version = current_version(cursor)
        latest = migrations[-1].version if migrations else 0
        if version > latest:
            raise SchemaVersionError(
                f"database schema version {version} is newer than this ai_tools"
                f" (knows up to {latest}); upgrade ai_tools to open it"
            )
        for migration in migrations:
            if migration.version <= version:
                continue
            cursor.execute("BEGIN IMMEDIATE")
            try:
                # Re-check under the write lock: another process may have migrated.
                if current_version(cursor) >= migration.version:
                    cursor.execute("COMMIT")
                    continue
                for statement in migration.statements:
                    cursor.execute(statement)
                cursor.execute(
                    "INSERT INTO schema_migrations (version, description, applied_at)"
                    " VALUES (?, ?, ?)",
                    (migration.version, migration.description, now),
                )
                cursor.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    cursor.execute("ROLLBACK")
                raise
            version = migration.version
            if on_applied is not None:
                on_applied(migration)
        return version
    finally:
        cursor.close()
