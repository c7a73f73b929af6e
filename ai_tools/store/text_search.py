"""Turning user text into safe full-text queries, and a small BM25 for memory.

Text typed by a player or produced by a model goes into SQLite FTS5 ``MATCH``.
FTS5 has its own query language (``AND``, ``NEAR(...)``, ``col:``, ``*``,
quotes), so raw text can raise a syntax error or change the query's meaning.
:func:`fts5_match_expression` quotes every white-space separated piece of
the text and joins them with ``OR``, so that any word may match and BM25 ranks
records matching more (and rarer) words higher.  The PostgreSQL store turns
the same pieces (:func:`search_pieces`) into ``phraseto_tsquery`` phrases
joined with ``||``.

:class:`BM25` scores documents the same way in pure Python for the in-memory
store, so both stores rank alike (the memory store does no stemming).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

SEARCH_CONFIG = "ai_tools_search"
"""PostgreSQL's text search configuration the records' index and queries use
(created by :mod:`ai_tools.store.postgres_schema`)."""

MAX_QUERY_TERMS = 32
"""Words beyond this many are ignored (a query is a handful of keywords)."""

_WORD = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` (letters and digits, like FTS5 unicode61)."""
    return [token.casefold() for token in _WORD.findall(text)]


def query_terms(text: str) -> list[str]:
    """The distinct search words of ``text`` in order, at most :data:`MAX_QUERY_TERMS`."""
    seen: dict[str, None] = {}
    for token in tokenize(text if isinstance(text, str) else str(text)):
        seen.setdefault(token, None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


def search_pieces(text: str) -> list[str]:
    """The distinct white-space separated pieces of ``text`` a search looks for, in order.

    Control characters (a NUL ends an FTS5 string early; PostgreSQL text
    cannot hold one) and lone surrogates are replaced by spaces first; at
    most :data:`MAX_QUERY_TERMS` pieces are kept.  Both stores' full-text
    searches start here, so they look for the same pieces.
    """
    if not isinstance(text, str):
        text = str(text)
    cleaned = "".join(" " if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in text)
    pieces: dict[str, None] = {}
    for piece in cleaned.split():
        pieces.setdefault(piece, None)
        if len(pieces) >= MAX_QUERY_TERMS:
            break
    return list(pieces)


def fts5_match_expression(text: str) -> str | None:
    """A syntactically valid FTS5 query for ``text``, or None if it has nothing to search.

    Each of :func:`search_pieces` becomes a quoted FTS5 string (inner quotes
    doubled), joined with ``OR``.  Inside quotes FTS5 applies the very
    tokenizer that indexed the records, so a piece matches exactly where it
    occurs in a record, and no character of the input can act as an operator.
    """
    pieces = search_pieces(text)
    if not pieces:
        return None
    return " OR ".join('"' + piece.replace('"', '""') + '"' for piece in pieces)


class BM25:
    """Okapi BM25 over a small in-memory corpus (k1=1.2, b=0.75 as in FTS5)."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self._k1 = k1
        self._b = b
        self._docs = [Counter(tokenize(doc)) for doc in documents]
        self._lengths = [sum(doc.values()) for doc in self._docs]
        self._avg = (sum(self._lengths) / len(self._docs)) if self._docs else 0.0
        self._df: Counter[str] = Counter()
        for doc in self._docs:
            self._df.update(doc.keys())

    def _idf(self, term: str) -> float:
        n = len(self._docs)
        df = self._df.get(term, 0)
        # FTS5's formula, floored at a small positive value like FTS5 does.
        return max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)

    def scores(self, terms: Iterable[str]) -> list[float]:
        """Score of every document for ``terms`` (0.0 when no term occurs)."""
        terms = list(terms)
        result: list[float] = []
        for doc, length in zip(self._docs, self._lengths, strict=True):
            score = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if not tf:
                    continue
                norm = 1 - self._b + self._b * (length / self._avg if self._avg else 0.0)
                score += self._idf(term) * (tf * (self._k1 + 1)) / (tf + self._k1 * norm)
            result.append(score)
        return result
