"""Full-text search at parity: the same searches, the same answers, on SQLite (FTS5) and
PostgreSQL (text search).  Both stem English words, fold case and accents, keep every
word (no stop words) and read operators and punctuation in a query as plain text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai_tools.store.postgres import PostgreSQLStore
from ai_tools.store.sqlite import SQLiteStore
from tests.unit.test_store_contract import make_clock

CORPUS = [
    "the door and the gate",
    "running by the harbour",
    "ünïcödé wörds ok",
    "NEAR AND OR",
    "Marta keeps the lighthouse by the harbour",
    "brass lanterns; brass is Bob's trade",
]


@pytest_twisted.async_yield_fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A store holding CORPUS as ada's memories."""
    if request.param == "sqlite":
        store: Any = SQLiteStore(str(tmp_path / "s.sqlite"), clock=make_clock())
    else:
        db = request.getfixturevalue("postgres_db")
        store = PostgreSQLStore(db.dsn, password=db.password, clock=make_clock())
    await store.open()
    for text in CORPUS:
        await store.add_record("ada", "memory", text)
    yield store
    await store.close()


async def found(store: Any, query: str) -> list[str]:
    return [r["content"] for r in await store.search_records("ada", "memory", query)]


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize(("query", "expected"), [
    ("runs", ["running by the harbour"]),                  # stemming
    ("RUNNING", ["running by the harbour"]),                # case
    ("unicode words", ["ünïcödé wörds ok"]),               # accents
    ("NEAR", ["NEAR AND OR"]),                              # operators are words
    ("lanterns", ["brass lanterns; brass is Bob's trade"]),
    ("lantern", ["brass lanterns; brass is Bob's trade"]),
    ("'; DROP TABLE records; --", []),
    ('"unbalanced (((', []),
    ("", []),
])
async def test_the_same_searches_find_the_same_records(
    store: Any, query: str, expected: list[str]
) -> None:
    """Each query finds exactly the expected records on both stores."""
    assert await found(store, query) == expected


@pytest_twisted.ensureDeferred
async def test_no_stop_words(store: Any) -> None:
    """'the' is a word like any other (FTS5 has no stop words; neither has our configuration)."""
    assert set(await found(store, "the")) == {
        "the door and the gate", "running by the harbour",
        "Marta keeps the lighthouse by the harbour"}


@pytest_twisted.ensureDeferred
async def test_more_matching_words_rank_higher(store: Any) -> None:
    """A record matching every word comes first; scores are positive and decrease."""
    results = await store.search_records("ada", "memory", "lighthouse harbour")
    assert results[0]["content"] == "Marta keeps the lighthouse by the harbour"
    assert [r["content"] for r in results[1:]] == ["running by the harbour"]
    assert results[0]["score"] > results[1]["score"] > 0


@pytest_twisted.ensureDeferred
async def test_a_phrase_piece_matches_where_its_words_stand_together(store: Any) -> None:
    """A piece with punctuation inside ("door-and") is a phrase: its words, adjacent."""
    assert await found(store, "door-and") == ["the door and the gate"]
    assert await found(store, "door-gate") == []


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_any_text_is_a_safe_query_on_postgres(postgres_search: Any, text: str) -> None:
    """Property: whatever the text, PostgreSQL answers (no syntax error, no NUL error).

    (The same property holds for FTS5: tests/unit/test_store_text_search.py.)
    """
    cursor, search = postgres_search
    results = search(cursor, "ada", "memory", text, 10)
    assert isinstance(results, list)


@pytest.fixture
def postgres_search(postgres_db: Any) -> Any:
    """A synchronous cursor on a migrated database and the store's search statement."""
    import psycopg2

    from ai_tools.store import postgres_statements
    from ai_tools.store.postgres_schema import migrate
    from ai_tools.store.text_search import search_pieces

    conn = psycopg2.connect(postgres_db.dsn, password=postgres_db.password)
    conn.autocommit = True
    migrate(conn, 0.0)

    def search(cursor: Any, owner: str, collection: str, text: str, limit: int) -> Any:
        pieces = search_pieces(text)
        if not pieces:
            return []
        return postgres_statements.search_records(cursor, owner, collection, pieces, limit)

    with conn.cursor() as cursor:
        cursor.execute("INSERT INTO records (owner, collection, content, created_at,"
                       " updated_at) VALUES ('ada', 'memory', 'the door', 0, 0)")
        yield cursor, search
    conn.close()
