"""The replica a shared world keeps of the world in the database: rows, versions, places.

Part of :class:`~ai_tools.world.shared.SharedWorld` (which composes it as
``world.replica``).  A :class:`Change` is what one operation did to the world
(the rows it wrote, what it said, the rows it read); :class:`Replica` keeps the
version of every row as the database last gave it, takes a full load, applies
what a catch-up brought or a commit wrote, and works out which places a change
moves objects in or out of (their contents change: they get a new version too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TypedDict

import attrs
from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.interfaces import WORLD_SECTIONS
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.world.messages import WorldMessage
from ai_tools.world.model import Channel, HelpEntry, Prototype, WorldObject
from ai_tools.world.persistence import SEQ_FLOOR_KEY

if TYPE_CHECKING:
    from ai_tools.world.sandbox import SandboxWorld

Key = tuple[str, str]
"""A row: ``(section, key)`` (``("meta", key)`` for a meta value)."""


Versioned = list[tuple[JSONObject, int]]
"""Rows of one section with their versions."""
Said = list[tuple[int, JSONObject, list[str]]]
"""Messages as the store gives them: ``(seq, data, receivers)``."""


class SharedLoad(TypedDict):
    """A full load (``ISharedWorldStore.load_shared_world``)."""

    clock: int
    objects: Versioned
    channels: Versioned
    prototypes: Versioned
    help: Versioned
    meta: dict[str, tuple[JSONValue, int]]
    messages: Said


class SharedSince(TypedDict):
    """A catch-up (``ISharedWorldStore.world_since``)."""

    clock: int
    rows: dict[str, Versioned]
    meta: dict[str, tuple[JSONValue, int]]
    deleted: list[tuple[str, str]]
    messages: Said
    dirty_rows: dict[Key, tuple[JSONValue, int] | None]


class _Row(Protocol):
    def to_row(self) -> JSONObject: ...


_ROW_TYPES: dict[str, type[Channel] | type[Prototype] | type[HelpEntry]] = {
    "channels": Channel, "prototypes": Prototype, "help": HelpEntry}


@attrs.define(eq=False)
class Change:
    """What one operation did to the replica: rows, messages, rows read; its waiters."""

    rows: dict[str, dict[str, JSONObject]] = attrs.field(factory=dict)
    meta: JSONObject = attrs.field(factory=dict)
    deletes: dict[str, list[str]] = attrs.field(factory=dict)
    reads: set[Key] = attrs.field(factory=set)
    messages: list[tuple[WorldMessage, list[str]]] = attrs.field(factory=list)
    waiters: list[defer.Deferred[None]] = attrs.field(factory=list)
    dedupe_key: str | None = None
    """The operation's effect key: the database keeps its messages once (None: no key)."""

    def add(self, put: JSONMapping, delete: Mapping[str, Iterable[str]] | None) -> None:
        for section, items in put.items():
            if section == "meta":
                self.meta.update(items)  # type: ignore[call-overload]  # (a mapping)
                continue
            field = WORLD_SECTIONS[section]
            rows = self.rows.setdefault(section, {})
            for row in items:  # type: ignore[attr-defined]
                rows[str(row[field])] = dict(row)
        for section, keys in (delete or {}).items():
            self.deletes.setdefault(section, []).extend(keys)

    def empty(self) -> bool:
        return not (self.rows or self.meta or self.deletes or self.messages)

    def written(self) -> set[Key]:
        keys = {(section, key) for section, rows in self.rows.items() for key in rows}
        keys.update(("meta", key) for key in self.meta)
        keys.update((section, key) for section, items in self.deletes.items() for key in items)
        return keys

    def message_rows(self) -> list[JSONObject]:
        """The messages as the store takes them; the ``n``-th one keyed ``key`` or ``key/n``."""
        key = self.dedupe_key
        return [{"data": _message_data(message), "receivers": _json_list(receivers),
                 "dedupe_key": None if key is None else key if n == 0 else f"{key}/{n}"}
                for n, (message, receivers) in enumerate(self.messages)]

    def settle(self, failure: Failure | None) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if failure is None:
                waiter.callback(None)
            else:
                waiter.errback(failure)


def _json_list(items: list[str]) -> list[JSONValue]:
    copied: list[JSONValue] = list(items)
    return copied


def _message(data: JSONObject, seq: int) -> WorldMessage:
    """A message the store kept (its fields but ``seq``) as a WorldMessage again."""
    return WorldMessage(**data, seq=seq)  # type: ignore[arg-type]


def _message_data(message: WorldMessage) -> JSONObject:
    data: JSONObject = attrs.asdict(message)
    data.pop("seq")
    return data


@attrs.define(eq=False)
class Replica:
    """The versions of the rows of ``world`` as the database gave them, and the world
    clock this replica caught up to (see the module)."""

    world: SandboxWorld
    versions: dict[Key, int] = attrs.field(factory=dict)
    placed: dict[str, str | None] = attrs.field(factory=dict)
    """Where each object is in the database (the replica may be ahead)."""
    clock: int = 0
    delivered: int = 0
    """The number of the last message the world's hearing was given."""

    def take(self, data: SharedLoad) -> None:
        """Replace the replica with a full load (rows with versions, heard messages)."""
        world = self.world
        sections: dict[str, Versioned] = {"objects": data["objects"],
                                          "channels": data["channels"],
                                          "prototypes": data["prototypes"], "help": data["help"]}
        meta: JSONObject = {key: value for key, (value, _) in data["meta"].items()}
        world.populate({**{s: [row for row, _ in rows] for s, rows in sections.items()},
                        "meta": meta})
        self.versions = {(s, str(row[WORLD_SECTIONS[s]])): version
                         for s, rows in sections.items() for row, version in rows}
        self.versions.update((("meta", key), version)
                             for key, (_, version) in data["meta"].items())
        self.placed = {obj.id: obj.location for obj in world.objects.values()}
        self.clock = self.delivered = int(data["clock"])
        world.hearing.forget_all()
        for seq, message, receivers in data["messages"]:
            world.hearing.hear(_message(message, seq), receivers)

    def moved_places(self, change: Change) -> set[Key]:
        """Places whose contents the change alters (an object arrives or leaves)."""
        places: set[Key] = set()
        for key, row in change.rows.get("objects", {}).items():
            before = self.placed.get(key) if ("objects", key) in self.versions else None
            after = row.get("location")
            if before != after:
                places.update(("objects", str(p)) for p in (before, after) if p is not None)
        return places

    def committed(self, change: Change, clock: int, touch: set[Key]) -> None:
        """The replica takes the rows as committed; versions move to ``clock``."""
        for section, rows in change.rows.items():
            for row in rows.values():
                self.apply_row(section, row, clock, force=True)
        for key, value in change.meta.items():
            self.world.meta[key] = value
            self.versions["meta", key] = clock
        for section, keys in change.deletes.items():
            for key in keys:
                self.remove_row(section, key)
        for place in touch:
            if place in self.versions:
                self.versions[place] = max(self.versions[place], clock)
        change.settle(None)

    def apply_since(self, data: SharedSince, batch: int) -> bool:
        """Apply a catch-up: rows, meta, deletions, dirty rows, then the messages in order.

        Returns True when a backlog is left (a full batch of messages).
        """
        for section, rows in data["rows"].items():
            for row, version in rows:
                self.apply_row(section, row, version)
        self._apply_meta(data["meta"])
        for section, key in data["deleted"]:
            self.remove_row(section, key)
        for (section, key), found in data["dirty_rows"].items():
            if found is None:
                self.remove_row(section, key)
            elif section == "meta":
                self.world.meta[key], self.versions["meta", key] = found
            elif isinstance(found[0], Mapping):
                self.apply_row(section, found[0], found[1], force=True)
        self.clock = max(self.clock, int(data["clock"]))
        for seq, message, receivers in data["messages"]:
            if seq > self.delivered:
                self.delivered = seq
                self.world.hearing.hear(_message(message, seq), receivers)
        return len(data["messages"]) >= batch

    def _apply_meta(self, meta: Mapping[str, tuple[JSONValue, int]]) -> None:
        for key, (value, version) in meta.items():
            if key == SEQ_FLOOR_KEY:  # a single-process world's numbering, not world content
                continue
            if version > self.versions.get(("meta", key), -1):
                self.world.meta[key] = value
                self.versions["meta", key] = version

    def apply_row(self, section: str, row: JSONMapping, version: int,
                  force: bool = False) -> None:
        """Take one row at ``version`` (an older one is ignored unless ``force``)."""
        key = str(row[WORLD_SECTIONS[section]])
        if not force and version <= self.versions.get((section, key), -1):
            return
        self.versions[section, key] = version
        if section == "objects":
            obj = WorldObject.from_row(row)
            self.world.objects.put(obj)
            self.placed[obj.id] = obj.location
            return
        self._table(section)[key.casefold()] = _ROW_TYPES[section].from_row(row)

    def _table(self, section: str) -> dict[str, _Row]:
        """The world's mapping of channels, prototypes or help entries (by folded key)."""
        tables: dict[str, dict[str, _Row]] = {
            "channels": self.world.channels.by_key,  # type: ignore[dict-item]
            "prototypes": self.world.prototypes,  # type: ignore[dict-item]
            "help": self.world.help_entries}  # type: ignore[dict-item]
        return tables[section]

    def remove_row(self, section: str, key: str) -> None:
        """Forget one row (deleted in the database)."""
        self.versions.pop((section, key), None)
        if section == "meta":
            self.world.meta.pop(key, None)
        elif section == "objects":
            self.world.objects.remove(key)
            self.placed.pop(key, None)
        else:
            self._table(section).pop(key.casefold(), None)
