"""Ranking help entries for ``help_search``: small, deterministic, no index to build.

A word of the query found in an entry's key counts most, then in its aliases,
then in its category; occurrences in the text count with diminishing returns.
An exact key (or alias) match always ranks first.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

from ai_tools.json_types import JSONObject
from ai_tools.world.model import HelpEntry

_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``."""
    return [w.casefold() for w in _WORD.findall(text)]


def score_entry(entry: HelpEntry, query: str) -> float:
    """How well ``entry`` answers ``query`` (0: not at all)."""
    terms = list(dict.fromkeys(words(query)))
    if not terms:
        return 0.0
    folded = query.strip().casefold()
    key_words = set(words(entry.key))
    alias_words = {w for alias in entry.aliases for w in words(alias)}
    category_words = set(words(entry.category))
    text_counts = Counter(words(entry.text))
    score = 0.0
    if folded == entry.key.casefold() or folded in (a.casefold() for a in entry.aliases):
        score += 10.0
    for term in terms:
        if term in key_words:
            score += 3.0
        if term in alias_words:
            score += 2.0
        if term in category_words:
            score += 1.0
        if text_counts[term]:
            score += 1.0 + math.log(text_counts[term])
    return score


def rank_help(entries: Iterable[HelpEntry], query: str, limit: int) -> list[JSONObject]:
    """``[{"key", "text", "score", "category"}]`` best first (ties by key), at most ``limit``."""
    scored = [(score_entry(entry, query), entry) for entry in entries]
    hits = sorted(
        ((s, e) for s, e in scored if s > 0), key=lambda hit: (-hit[0], hit[1].key.casefold())
    )
    return [
        {"key": e.key, "text": e.text, "score": round(s, 4), "category": e.category}
        for s, e in hits[: max(limit, 0)]
    ]
