"""What differs between SQLite and PostgreSQL in the statements both stores share.

The shared statements (:mod:`ai_tools.store.sql_statements`,
:mod:`ai_tools.store.traces`) are written once, with ``?`` placeholders, and
run on either database through its :class:`SQLDialect`:

* **paramstyle**: ``qmark`` for ``sqlite3``, ``format`` for psycopg2
  (:meth:`SQLDialect.sql` rewrites a statement once and keeps it);
* **a new row's id**: ``cursor.lastrowid`` in SQLite, ``RETURNING id`` in
  PostgreSQL (:meth:`SQLDialect.insert_id`);
* **a row replaced whole**: ``INSERT OR REPLACE`` in SQLite, an upsert
  (``ON CONFLICT ... DO UPDATE``) in PostgreSQL (:meth:`SQLDialect.replace_row`);
* **orders and functions**: byte order of text keys (``COLLATE "C"`` in
  PostgreSQL, SQLite's default), the column that keeps the insertion order of
  the world's rows (``rowid``, ``ord``), substring search (``instr``, ``strpos``);
* **full-text search**: an FTS5 table ranked by BM25 in SQLite, a ``tsvector``
  column ranked by ``ts_rank`` in PostgreSQL (:meth:`SQLDialect.search_clause`).

Both databases take ``INSERT ... ON CONFLICT (...) DO UPDATE``/``DO NOTHING``
(what must keep a row's other columns or its place uses it) and JSON as text
columns (see :mod:`ai_tools.store.postgres_schema` for why not ``jsonb``), so
those need no dialect.  What only PostgreSQL has (leases and fenced
writes, the shared world's row locks and clock) stays in its own modules.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ai_tools.store.dbapi import DBCursor
from ai_tools.store.text_search import SEARCH_CONFIG, fts5_match_expression, search_pieces

__all__ = ["POSTGRESQL", "SQLITE", "SQLDialect", "SearchClause", "fts5_clause",
           "tsquery_clause"]

_CACHED_STATEMENTS = 1024
"""Rewritten statements a dialect keeps (the stores build a few dozen distinct ones)."""


@attrs.frozen
class SearchClause:
    """The full-text part of a records search: ``records r`` joined with the index, its
    match, its rank (see :func:`ai_tools.store.sql_statements.search_records`)."""

    source: str
    """The FROM clause: ``records r`` and what the match is computed from."""
    match: str
    """The WHERE condition a matching record meets (``?`` placeholders)."""
    params: tuple[str, ...]
    """The parameters of ``source`` and ``match``, in order."""
    rank: str
    """The rank expression of a matching record."""
    best_first: str
    """How ``rank`` orders the best first (``"rank"`` or ``"rank DESC"``)."""
    score_sign: float
    """``score = score_sign * rank``: higher is better."""


@attrs.frozen
class SQLDialect:
    """One database's spelling of the shared statements (SQLite's; see :data:`POSTGRESQL`)."""

    name: str
    mark: str = "?"
    """The driver's placeholder."""
    binary_order: str = ""
    """Appended to a text key in ORDER BY for byte order (SQLite's default is byte order)."""
    insertion_order: str = "rowid"
    """The column that orders the world's rows as they were first inserted."""
    contains: str = "instr"
    """The function ``f(text, piece)`` giving the position of ``piece`` in ``text`` (0: not in)."""
    _statements: dict[str, str] = attrs.field(factory=dict, eq=False, repr=False)
    _replacements: dict[tuple[str, tuple[str, ...], tuple[str, ...]], str] = attrs.field(
        factory=dict, eq=False, repr=False)

    def sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` placeholders) in the driver's paramstyle."""
        if self.mark == "?":
            return statement
        found = self._statements.get(statement)
        if found is None:
            found = statement.replace("%", "%%").replace("?", self.mark)
            if len(self._statements) < _CACHED_STATEMENTS:
                self._statements[statement] = found
        return found

    def replace_row(self, table: str, key: tuple[str, ...], columns: tuple[str, ...]) -> str:
        """The statement that writes one whole row of ``table`` over the one with its ``key``.

        Placeholders in this dialect's paramstyle, for the key's then the
        columns' values.  Built once per table and kept.
        """
        found = self._replacements.get((table, key, columns))
        if found is None:
            found = self._replacements[table, key, columns] = self._replace(table, key, columns)
        return found

    def _replace(self, table: str, key: tuple[str, ...], columns: tuple[str, ...]) -> str:
        """``INSERT OR REPLACE``: for a table whose rows nothing else refers to, what the
        upsert of PostgreSQL does, and cheaper in SQLite (a cache entry's write: 48k
        instructions, 52k as an upsert; valgrind --tool=cachegrind, 2000 writes)."""
        names = ", ".join([*key, *columns])
        marks = ", ".join(self.mark for _ in (*key, *columns))
        return f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})"

    def insert_id(self, cursor: DBCursor, statement: str, params: tuple[object, ...]) -> int:
        """Run an ``INSERT`` of one row into a table with an ``id`` column; the new id."""
        cursor.execute(self.sql(statement), params)
        return int(cursor.lastrowid or 0)

    def search_clause(self, query: str) -> SearchClause | None:
        """The search for any word of ``query`` (None: nothing to search for)."""
        expression = fts5_match_expression(query)
        return None if expression is None else fts5_clause(expression)


def fts5_clause(expression: str) -> SearchClause:
    """SQLite's search: the FTS5 ``expression`` on ``records_fts``, ranked by BM25."""
    return SearchClause(
        source="records_fts JOIN records r ON r.id = records_fts.rowid",
        match="records_fts MATCH ?", params=(expression,),
        rank="bm25(records_fts)", best_first="rank", score_sign=-1.0)


@attrs.frozen
class PostgreSQLDialect(SQLDialect):
    """PostgreSQL's spelling (psycopg2's ``format`` paramstyle)."""

    def _replace(self, table: str, key: tuple[str, ...], columns: tuple[str, ...]) -> str:
        """``INSERT ... ON CONFLICT (key) DO UPDATE`` of every other column."""
        names = ", ".join([*key, *columns])
        marks = ", ".join(self.mark for _ in (*key, *columns))
        updates = ", ".join(f"{column} = excluded.{column}" for column in columns)
        return (f"INSERT INTO {table} ({names}) VALUES ({marks})"
                f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}")

    def insert_id(self, cursor: DBCursor, statement: str, params: tuple[object, ...]) -> int:
        """The ``INSERT`` with ``RETURNING id``; the new id."""
        cursor.execute(self.sql(statement + " RETURNING id"), params)
        return int(cursor.fetchone()[0])

    def search_clause(self, query: str) -> SearchClause | None:
        """The pieces of ``query`` (:func:`~ai_tools.store.text_search.search_pieces`) as
        phrases (:func:`tsquery_clause`)."""
        pieces = search_pieces(query)
        return tsquery_clause(pieces) if pieces else None


def tsquery_clause(pieces: Sequence[str]) -> SearchClause:
    """PostgreSQL's search: each piece a ``phraseto_tsquery`` (its words adjacent), joined by
    ``||``, through the configuration that indexed the records; ranked by ``ts_rank``.

    Nothing in the text can act as an operator, as with the FTS5 query of SQLite.
    """
    phrases = " || ".join(
        f"phraseto_tsquery('{SEARCH_CONFIG}'::regconfig, ?)" for _ in pieces)
    return SearchClause(
        source=f"(SELECT {phrases} AS query) q, records r", match="r.search @@ q.query",
        params=tuple(pieces), rank="ts_rank(r.search, q.query, 1)",
        best_first="rank DESC", score_sign=1.0)


SQLITE = SQLDialect(name="sqlite")
"""SQLite through ``sqlite3``."""

POSTGRESQL = PostgreSQLDialect(name="postgresql", mark="%s", binary_order=' COLLATE "C"',
                               insertion_order="ord", contains="strpos")
"""PostgreSQL through psycopg2 (or psycopg 3, whose default paramstyle is the same)."""
