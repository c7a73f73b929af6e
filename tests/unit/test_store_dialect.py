"""The SQL dialects both SQL stores' shared statements run through (ai_tools/store/dialect.py).

The statements themselves are tested on real databases by the store contract
(tests/unit/test_store_contract.py on SQLite and PostgreSQL in tests/integration/); here
are the dialects' own rules, and the shared statements on an in-memory SQLite database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from ai_tools.store import sql_statements as sql
from ai_tools.store.dialect import POSTGRESQL, SQLITE, fts5_clause, tsquery_clause
from ai_tools.store.schema import migrate
from ai_tools.store.serialization import encode_world_message
from ai_tools.store.traces import TraceFilter


@pytest.fixture
def cursor() -> Iterator[sqlite3.Cursor]:
    """A cursor on an in-memory database with the real schema."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, now=0.0)
    cursor = conn.cursor()
    yield cursor
    cursor.close()
    conn.close()


def test_placeholders_are_each_drivers() -> None:
    """SQLite runs a statement as written; PostgreSQL's gets %s, and a literal % is escaped."""
    statement = "SELECT name FROM assistants WHERE name LIKE 'a%' AND state = ?"
    assert SQLITE.sql(statement) is statement
    assert POSTGRESQL.sql(statement) == (
        "SELECT name FROM assistants WHERE name LIKE 'a%%' AND state = %s")
    assert POSTGRESQL.sql(statement) is POSTGRESQL.sql(statement)  # rewritten once, kept


def test_the_rewritten_statements_kept_are_bounded() -> None:
    """Past the bound a statement is rewritten each time, not kept (no growth without end)."""
    dialect = type(POSTGRESQL)(name="bounded", mark="%s")
    for n in range(1100):
        assert dialect.sql(f"SELECT {n} WHERE x = ?") == f"SELECT {n} WHERE x = %s"
    assert len(dialect._statements) == 1024


def test_a_row_replaced_whole_is_the_statement_each_store_ran() -> None:
    """INSERT OR REPLACE in SQLite, the upsert of every other column in PostgreSQL."""
    key, columns = ("namespace", "key"), ("value", "expires_at")
    assert SQLITE.replace_row("cache_entries", key, columns) == (
        "INSERT OR REPLACE INTO cache_entries (namespace, key, value, expires_at)"
        " VALUES (?, ?, ?, ?)")
    assert POSTGRESQL.replace_row("cache_entries", key, columns) == (
        "INSERT INTO cache_entries (namespace, key, value, expires_at) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value,"
        " expires_at = excluded.expires_at")


def test_a_new_rows_id_comes_from_lastrowid_in_sqlite(cursor: sqlite3.Cursor) -> None:
    """insert_id gives the id SQLite assigned, one more each time."""
    insert = ("INSERT INTO records (owner, collection, content, metadata, parent_id,"
              " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)")
    first = SQLITE.insert_id(cursor, insert, ("ada", "memory", "one", "{}", None, 1.0, 1.0))
    second = SQLITE.insert_id(cursor, insert, ("ada", "memory", "two", "{}", None, 1.0, 1.0))
    assert second == first + 1
    assert sql.get_record(cursor, SQLITE, second)["content"] == "two"


def test_a_query_without_words_searches_nothing() -> None:
    """Both dialects: white space only is no search at all (the store answers [])."""
    assert SQLITE.search_clause(" \t\n ") is None
    assert POSTGRESQL.search_clause(" \t\n ") is None


def test_each_dialect_searches_with_its_own_index() -> None:
    """FTS5 MATCH ranked by bm25 (lower is better) / tsvector ranked by ts_rank (higher)."""
    fts5 = SQLITE.search_clause('door "open"')
    assert fts5 == fts5_clause('"door" OR """open"""')
    assert fts5.params == ('"door" OR """open"""',) and fts5.score_sign == -1.0
    tsquery = POSTGRESQL.search_clause("door open")
    assert tsquery == tsquery_clause(["door", "open"])
    assert tsquery.params == ("door", "open") and tsquery.best_first == "rank DESC"
    assert tsquery.source.count("phraseto_tsquery('ai_tools_search'::regconfig, ?)") == 2


def test_the_shared_search_on_sqlite(cursor: sqlite3.Cursor) -> None:
    """The shared statement with SQLite's clause: best first, score higher is better."""
    for text in ("a door", "a door and a door", "a window"):
        sql.add_record(cursor, SQLITE, ("ada", "memory", text, "{}"), None, 1.0)
    clause = SQLITE.search_clause("door")
    assert clause is not None
    found = sql.search_records(cursor, SQLITE, "ada", None, clause, 10)
    assert [r["content"] for r in found] == ["a door and a door", "a door"]
    assert found[0]["score"] >= found[1]["score"] > 0
    assert sql.search_records(cursor, SQLITE, "bob", None, clause, 10) == []


def test_names_are_listed_in_byte_order(cursor: sqlite3.Cursor) -> None:
    """Upper case before lower case before accents, as PostgreSQL's COLLATE "C" does."""
    for name in ("émile", "bob", "Zed", "ada"):
        cursor.execute("INSERT INTO assistants (name, state, updated_at) VALUES (?, '{}', 0)",
                       (name,))
    assert sql.list_assistants(cursor, SQLITE) == ["Zed", "ada", "bob", "émile"]
    assert POSTGRESQL.binary_order == ' COLLATE "C"'


def test_a_trace_search_by_tool_uses_each_databases_function() -> None:
    """instr() in SQLite, strpos() in PostgreSQL; the tool is looked for between bars."""
    where, params = TraceFilter(assistant="pip", tool="look").where(SQLITE)
    assert where == " WHERE assistant = ? AND instr(tools, ?) > 0"
    assert params == ["pip", "|look|"]
    assert "strpos(tools, ?) > 0" in TraceFilter(tool="look").where(POSTGRESQL)[0]


def test_a_world_message_is_checked_field_by_field() -> None:
    """Its data a dict, its receivers a list of ids, its dedupe key a string or None."""
    assert encode_world_message({"data": {"text": "hi"}, "receivers": ["char:a"],
                                 "dedupe_key": "call_1"}) == ('{"text":"hi"}', ["char:a"],
                                                             "call_1")
    assert encode_world_message({"data": {}}) == ("{}", [], None)
    for bad in ({"data": "hi"}, {"data": {}, "receivers": "char:a"},
                {"data": {}, "dedupe_key": 7}):
        with pytest.raises(TypeError):
            encode_world_message(bad)
    with pytest.raises(ValueError):
        encode_world_message({"data": {}, "receivers": [""]})
    with pytest.raises(KeyError):
        encode_world_message({"receivers": []})
