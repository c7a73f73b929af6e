"""The assistant's own records in the store: collection names and how results show them.

Store-backed tools (memory, journal, entity, goals, context) keep records in
``IStore`` under the assistant's name (``actor.owner``), one collection each:

=============  ===========================================================
collection     what a record holds
=============  ===========================================================
``memories``   a fact or observation (``importance`` 1-10, ``tags``, ``about``)
``journal``    a journal entry (``title``, ``tags``)
``episodes``   a summary of a past exchange, written by the host
               (``participants``: ids or names, ``kind``)
``entities``   what the assistant thinks of someone (``entity``, ``name``,
               ``relation``, ``sentiment``)
``goals``      a goal (``status``, ``priority``, ``progress``); sub-goals have
               ``parent_id``
``session``    a scratch note kept for the current session (``key``)
=============  ===========================================================

Searches go to ``IStore.search_records`` (SQLite FTS5 with BM25 in the
embedded store), so results carry the store's ``score``.
"""

from __future__ import annotations

import datetime
from typing import Any

from ai_tools.json_types import JSONObject

MEMORIES = "memories"
JOURNAL = "journal"
EPISODES = "episodes"
ENTITIES = "entities"
GOALS = "goals"
SESSION = "session"

RECORD_ID: JSONObject = {
    "type": "integer",
    "minimum": 1,
}

SHORT_TAGS: JSONObject = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "maxLength": 40, "pattern": "^\\S(.*\\S)?$"},
    "maxItems": 10,
    "uniqueItems": True,
}

_RESERVED = frozenset({"id", "content", "created_at", "updated_at", "time", "score", "parent_id"})


def iso_time(timestamp: float) -> str:
    """UTC ISO-8601 text of a POSIX timestamp (what a model reads best)."""
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def present(record: dict[str, Any]) -> JSONObject:
    """A record as a tool result shows it: id, content, times, score, its metadata."""
    shown: JSONObject = {"id": record["id"], "content": record["content"]}
    created = float(record.get("created_at") or 0.0)
    shown["created_at"] = created
    shown["time"] = iso_time(created)
    updated = record.get("updated_at")
    if updated is not None and float(updated) != created:
        shown["updated_at"] = float(updated)
    if record.get("parent_id") is not None:
        shown["parent_id"] = record["parent_id"]
    if "score" in record:
        shown["score"] = float(record["score"])
    for key, value in (record.get("metadata") or {}).items():
        if key not in _RESERVED:
            shown[key] = value
    return shown


def has_tag(record: dict[str, Any], tag: str) -> bool:
    """Whether a record's metadata ``tags`` include ``tag`` (case-insensitive)."""
    folded = tag.casefold()
    return any(str(t).casefold() == folded for t in (record.get("metadata") or {}).get("tags", ()))
