"""FTS5 query sanitising (property-tested against real FTS5) and the memory store's BM25."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.store import sqlite as sqlite_store
from ai_tools.store.schema import migrate
from ai_tools.store.text_search import (
    BM25,
    MAX_QUERY_TERMS,
    fts5_match_expression,
    query_terms,
    tokenize,
)


@pytest.fixture(scope="module")
def db() -> Iterator[sqlite3.Connection]:
    """An in-memory database with the real schema and a few records."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, now=0.0)
    for n, text in enumerate(
        ["the door and the gate", "running by the harbour", "ünïcödé wörds ok", "NEAR AND OR"]
    ):
        conn.execute(
            "INSERT INTO records (owner, collection, content, created_at, updated_at)"
            " VALUES ('ada', 'memory', ?, ?, ?)",
            (text, n, n),
        )
    yield conn
    conn.close()


def search(conn: sqlite3.Connection, text: str) -> list[dict[str, object]]:
    """Run the store's own search statement synchronously."""
    expression = fts5_match_expression(text)
    if expression is None:
        return []
    cursor = conn.cursor()
    try:
        return sqlite_store._search_records(cursor, "ada", "memory", expression, 10)
    finally:
        cursor.close()


def test_tokens_are_words_only() -> None:
    """Punctuation and FTS5 operators' symbols are dropped; words are case-folded."""
    assert tokenize('Hello, "World"! col:x* (a_b)') == ["hello", "world", "col", "x", "a", "b"]
    assert query_terms("the The THE cat") == ["the", "cat"]
    assert query_terms(" ".join(f"w{n}" for n in range(100))) == [
        f"w{n}" for n in range(MAX_QUERY_TERMS)
    ]


def test_expression_quotes_every_piece() -> None:
    """Each piece is a quoted string joined by OR; quotes doubled; controls dropped."""
    assert fts5_match_expression("door AND gate") == '"door" OR "AND" OR "gate"'
    assert fts5_match_expression('say "hi" say') == '"say" OR """hi"""'
    assert fts5_match_expression("a\x00b") == '"a" OR "b"'
    assert fts5_match_expression(" \t\n") is None
    assert fts5_match_expression("") is None


def test_operators_are_plain_words(db: sqlite3.Connection) -> None:
    """'AND', 'NEAR' in a query are words to find, not operators."""
    results = search(db, "NEAR")
    assert [r["content"] for r in results] == ["NEAR AND OR"]


def test_porter_stemming_in_sqlite(db: sqlite3.Connection) -> None:
    """The SQLite index stems: 'runs' finds 'running'."""
    assert [r["content"] for r in search(db, "runs")] == ["running by the harbour"]


def test_score_is_negated_bm25(db: sqlite3.Connection) -> None:
    """score == -bm25() and is positive for a match."""
    results = search(db, "door gate")
    raw = db.execute(
        "SELECT bm25(records_fts) FROM records_fts WHERE records_fts MATCH ?",
        ('"door" OR "gate"',),
    ).fetchone()[0]
    assert results[0]["score"] == pytest.approx(-raw)
    assert results[0]["score"] > 0


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text: str) -> None:
    """Property: any text is a valid query, and it finds a record holding that very text.

    (Unless the text has no indexable token at all, or over 32 pieces.)
    """
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(conn, now=0.0)
        stored = text.encode("utf-8", "replace").decode("utf-8")  # SQLite needs valid UTF-8
        conn.execute(
            "INSERT INTO records (owner, collection, content, created_at, updated_at)"
            " VALUES ('ada', 'memory', ?, 0, 0)",
            (stored,),
        )
        conn.execute("CREATE VIRTUAL TABLE vocab USING fts5vocab(records_fts, 'row')")
        indexed = conn.execute("SELECT COUNT(*) FROM vocab").fetchone()[0]
        results = search(conn, text)
        if fts5_match_expression(text) is None or not indexed:
            assert results == []
        elif len(text.split()) <= MAX_QUERY_TERMS:
            assert len(results) == 1, (text, fts5_match_expression(text))
    finally:
        conn.close()


@given(st.lists(st.sampled_from(["door", "gate", "key", "lamp", "rope"]), max_size=6))
def test_bm25_prefers_documents_with_more_query_words(words: list[str]) -> None:
    """Property: a document holding every query word never scores below one holding fewer."""
    documents = ["door gate key lamp rope", "door", "unrelated text"]
    scores = BM25(documents).scores(words)
    assert scores[2] == 0
    assert scores[0] >= 0
    if not words:
        assert scores == [0.0, 0.0, 0.0]


def test_bm25_zero_for_no_match_and_empty_corpus() -> None:
    """No match scores 0; an empty corpus gives no scores."""
    assert BM25(["a b c"]).scores(["z"]) == [0.0]
    assert BM25([]).scores(["z"]) == []
    scores = BM25(["rare common", "common", "common"]).scores(["rare", "common"])
    assert scores[0] > scores[1] == scores[2] > 0
