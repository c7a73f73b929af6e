"""The world rows of the memory store: IWorldStore and ISharedWorldStore in one process.

The same contract as the PostgreSQL store's world (versions from a world
clock raised once per change, expectations checked before anything is
applied, messages numbered by the clock, listeners told after each change),
so the shared world's logic runs in unit tests without a database.  Rows are
kept as JSON text, in insertion order (an update keeps its place).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import attrs

from ai_tools.errors import WorldConflict
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.store.serialization import (
    WORLD_SECTIONS,
    ChangeOutcome,
    encode_world_changes,
    encode_world_message,
)

Key = tuple[str, str]
_SECTIONS = (*WORLD_SECTIONS, "meta")


@attrs.define(eq=False)
class MemoryWorldRows:
    """The world's rows, versions, clock and messages; methods answer at once (no Deferreds)."""

    _rows: dict[str, dict[str, str]] = attrs.field(
        factory=lambda: {section: {} for section in _SECTIONS})
    _versions: dict[Key, int] = attrs.field(factory=dict)
    _deleted: dict[Key, int] = attrs.field(factory=dict)
    _messages: list[tuple[int, str, list[str], str | None]] = attrs.field(factory=list)
    _clock: int = 0
    _listeners: list[Callable[[int], None]] = attrs.field(factory=list)

    def load_world(self) -> JSONObject | None:
        """IWorldStore.load_world."""
        if not any(self._rows.values()):
            return None
        world: JSONObject = {section: [json.loads(text) for text in self._rows[section]
                                           .values()] for section in WORLD_SECTIONS}
        world["meta"] = {key: json.loads(text) for key, text in self._rows["meta"].items()}
        return world

    def change_world(
        self,
        put: JSONMapping | None = None,
        delete: Mapping[str, Sequence[str]] | None = None,
        expect: Mapping[Key, int | None] | None = None,
        touch: Sequence[Key] = (),
        messages: Sequence[JSONMapping] = (),
    ) -> ChangeOutcome:
        """ISharedWorldStore.change_world, all or nothing; then the listeners are told."""
        rows, meta, deletes = encode_world_changes(put, delete)
        encoded = [encode_world_message(message) for message in messages]
        conflicts = [f"{section} {key!r}" for (section, key), version in (expect or {}).items()
                     if self._version(section, key) != version]
        if conflicts:
            raise WorldConflict(f"changed meanwhile: {', '.join(conflicts[:10])}")
        first = self._clock + 1
        self._clock += len(encoded) + 1
        for section, keys in deletes.items():
            for key in keys:
                self._rows[section].pop(key, None)
                self._versions.pop((section, key), None)
                self._deleted[section, key] = self._clock
        items = {**rows, "meta": list(meta.items())}
        for section, pairs in items.items():
            for key, text in pairs:
                self._rows[section][key] = text
                self._versions[section, key] = self._clock
                self._deleted.pop((section, key), None)
        for section, key in touch:
            if key in self._rows[section]:
                self._versions[section, key] = self._clock
        seqs = self._add_messages(first, encoded)
        for listener in list(self._listeners):
            listener(self._clock)
        return {"clock": self._clock, "seqs": seqs}

    def _version(self, section: str, key: str) -> int | None:
        return self._versions.get((section, key)) if key in self._rows[section] else None

    def _add_messages(self, first: int,
                      encoded: list[tuple[str, list[str], str | None]]) -> list[int]:
        seqs = []
        known = {m[3] for m in self._messages if m[3] is not None}
        for seq, (text, receivers, dedupe_key) in enumerate(encoded, start=first):
            seqs.append(seq)
            if dedupe_key is None:
                self._messages.append((seq, text, receivers, dedupe_key))
            elif dedupe_key not in known:
                self._messages.append((seq, text, receivers, dedupe_key))
                known.add(dedupe_key)
        return seqs

    def _versioned(self, section: str, low: int, high: int) -> list[tuple[JSONValue, int]]:
        return [(json.loads(text), self._versions[section, key])
                for key, text in self._rows[section].items()
                if low < self._versions[section, key] <= high]

    def load_shared_world(self, log_size: int) -> dict[str, object] | None:
        """ISharedWorldStore.load_shared_world."""
        if not any(self._rows.values()):
            return None
        world: dict[str, object] = {"clock": self._clock}
        for section in WORLD_SECTIONS:
            world[section] = self._versioned(section, -1, self._clock)
        world["meta"] = {key: (json.loads(text), self._versions["meta", key])
                         for key, text in self._rows["meta"].items()}
        last: dict[str, list[int]] = {}
        for seq, _, receivers, _ in self._messages:
            for receiver in receivers:
                last.setdefault(receiver, []).append(seq)
        wanted = {seq for seqs in last.values() for seq in seqs[-log_size:]}
        world["messages"] = [(seq, json.loads(text), list(receivers))
                             for seq, text, receivers, _ in self._messages if seq in wanted]
        return world

    def world_since(self, clock: int, dirty: Sequence[Key] = (),
                    limit: int = 1000) -> dict[str, object]:
        """ISharedWorldStore.world_since."""
        newer = [(seq, json.loads(text), list(receivers))
                 for seq, text, receivers, _ in self._messages if seq > clock]
        upto = self._clock
        if len(newer) > limit:
            newer = newer[:limit]
            upto = newer[-1][0]
        dirty_rows: dict[Key, tuple[JSONValue, int] | None] = {}
        for section, key in dirty:
            text = self._rows[section].get(key)
            dirty_rows[section, key] = (None if text is None
                                        else (json.loads(text), self._versions[section, key]))
        return {
            "clock": upto,
            "rows": {section: self._versioned(section, clock, upto) for section in WORLD_SECTIONS},
            "meta": {key: (json.loads(text), self._versions["meta", key])
                     for key, text in self._rows["meta"].items()
                     if clock < self._versions["meta", key] <= upto},
            "deleted": [key for key, version in self._deleted.items() if clock < version <= upto],
            "messages": newer,
            "dirty_rows": dirty_rows,
        }

    def prune_world_messages(self, keep: int) -> int:
        """Keep the newest ``keep`` messages; how many went."""
        gone = max(0, len(self._messages) - keep)
        del self._messages[:gone]
        return gone

    def listen_world(
        self, on_change: Callable[[int], None], on_connect: Callable[[], None]
    ) -> Callable[[], None]:
        """Tell ``on_change(clock)`` after each change; ``on_connect()`` at once."""
        self._listeners.append(on_change)
        on_connect()

        def stop() -> None:
            if on_change in self._listeners:
                self._listeners.remove(on_change)

        return stop
