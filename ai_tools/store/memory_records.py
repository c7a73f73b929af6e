"""The memory store's records: the same rules as the SQL stores' ``records`` table.

Metadata is kept as JSON text (encoded when written, decoded into each answer,
so callers never share mutable objects with the store); ids count up from 1 and
are never reused; a search ranks with :class:`~ai_tools.store.text_search.BM25`
over the whole corpus, as FTS5 does.  Methods answer at once (no Deferreds):
:class:`~ai_tools.store.memory.MemoryStore` wraps them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs

from ai_tools.errors import NotFound
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.store.serialization import check_content, check_limit, check_metadata, check_name
from ai_tools.store.text_search import BM25, query_terms

__all__ = ["MemoryRecords"]


@attrs.define
class _Record:
    id: int
    owner: str
    collection: str
    content: str
    metadata: str
    parent_id: int | None
    created_at: float
    updated_at: float

    def as_dict(self) -> JSONObject:
        return {
            "id": self.id,
            "owner": self.owner,
            "collection": self.collection,
            "content": self.content,
            "metadata": json.loads(self.metadata),
            "parent_id": self.parent_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@attrs.define(eq=False)
class MemoryRecords:
    """Every owner's records by id; ``now`` (given to the writes) stamps them."""

    _records: dict[int, _Record] = attrs.field(factory=dict)
    _next_id: int = 1

    def add(self, owner: str, collection: str, content: str, metadata: JSONMapping | None,
            parent_id: int | None, now: Callable[[], float]) -> JSONObject:
        """Add a record; its dict (``NotFound`` if ``parent_id`` is unknown)."""
        check_name(owner, "record owner")
        check_name(collection, "record collection")
        content = check_content(content)
        encoded = check_metadata(metadata)
        if parent_id is not None and parent_id not in self._records:
            raise NotFound(f"parent record {parent_id!r} does not exist")
        stamp = now()
        record = _Record(self._next_id, owner, collection, content, encoded, parent_id,
                         stamp, stamp)
        self._next_id += 1
        self._records[record.id] = record
        return record.as_dict()

    def update(self, record_id: int, content: str | None, metadata: JSONMapping | None,
               now: Callable[[], float]) -> JSONObject | None:
        """Replace the content and/or metadata of a record; None if unknown."""
        new_content = check_content(content) if content is not None else None
        new_metadata = check_metadata(metadata) if metadata is not None else None
        record = self._records.get(record_id)
        if record is None:
            return None
        if new_content is not None:
            record.content = new_content
        if new_metadata is not None:
            record.metadata = new_metadata
        record.updated_at = now()
        return record.as_dict()

    def get(self, record_id: int) -> JSONObject | None:
        """One record dict, or None."""
        record = self._records.get(record_id)
        return record.as_dict() if record else None

    def delete(self, record_id: int) -> bool:
        """Remove a record (its children keep existing, with no parent); True if it existed."""
        record = self._records.pop(record_id, None)
        if record is not None:
            for other in self._records.values():
                if other.parent_id == record_id:
                    other.parent_id = None
        return record is not None

    def _select(self, owner: str, collection: str | None) -> list[_Record]:
        return [
            r
            for r in self._records.values()
            if r.owner == owner and (collection is None or r.collection == collection)
        ]

    def in_order(self, owner: str, collection: str | None, limit: int, newest_first: bool,
             parent_id: int | None) -> list[JSONObject]:
        """Records of one collection (None: every collection) in time order."""
        check_limit(limit)
        rows = [
            r
            for r in self._select(owner, collection)
            if parent_id is None or r.parent_id == parent_id
        ]
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=newest_first)
        return [r.as_dict() for r in rows[:limit]]

    def search(self, owner: str, collection: str | None, query: str, limit: int
               ) -> list[JSONObject]:
        """BM25-ranked records containing any word of ``query``, best first, with ``score``."""
        check_limit(limit)
        terms = query_terms(query)
        if not terms:
            return []
        # Like FTS5, document frequencies come from the whole corpus.
        corpus = list(self._records.values())
        scores = BM25([r.content for r in corpus]).scores(terms)
        hits = [
            (score, r)
            for score, r in zip(scores, corpus, strict=True)
            if score > 0 and r.owner == owner and (collection is None or r.collection == collection)
        ]
        hits.sort(key=lambda hit: (-hit[0], -hit[1].created_at, -hit[1].id))
        results = []
        for score, record in hits[:limit]:
            found = record.as_dict()
            found["score"] = score
            results.append(found)
        return results
