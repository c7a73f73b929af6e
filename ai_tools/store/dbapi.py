"""The DB-API cursor and connection both SQL stores' statements are written against.

``sqlite3`` and ``psycopg2`` (PEP 249 drivers) both satisfy these protocols, so one
statement function runs on either; what differs in the SQL itself is the
:class:`~ai_tools.store.dialect.SQLDialect`'s business.  A row's values are whatever
the driver decoded (``str``, ``int``, ``float``, ``bool``, ``None``, a list for a
PostgreSQL array): the drivers type them as ``Any``, and so do these protocols, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = ["DBConnection", "DBCursor"]


class DBCursor(Protocol):
    """What the statements use of a PEP 249 cursor."""

    @property
    def rowcount(self) -> int:
        """Rows the last statement changed (``-1``: not known)."""

    @property
    def lastrowid(self) -> int | None:
        """The rowid of the row the last ``INSERT`` added (SQLite; PostgreSQL has no rowid)."""

    def execute(self, operation: str, parameters: Sequence[object] = ..., /) -> object:
        """Run one statement with its parameters (in the driver's paramstyle)."""

    def executemany(self, operation: str, seq_of_parameters: Iterable[Sequence[object]], /
                    ) -> object:
        """Run one statement once per parameter row."""

    def fetchone(self) -> Any:
        """The next row of the last query (a sequence of its columns), or None."""

    def fetchall(self) -> list[Any]:
        """The remaining rows of the last query (each a sequence of its columns)."""

    def close(self) -> object:
        """Release the cursor."""


class DBConnection(Protocol):
    """What the stores use of a PEP 249 connection (adbapi hands it to the store thread)."""

    def cursor(self) -> DBCursor:
        """A new cursor on this connection."""
