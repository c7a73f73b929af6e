"""Reading a sandbox world file (TOML) into world rows.

The file declares rooms, exits, objects, characters, channels, prototypes
and help entries (see docs/store-and-world.md and examples/world.toml).
:func:`load_world_file` checks everything — unknown keys, wrong types,
duplicate ids, references to things that do not exist — and reports the first
mistake as a :class:`~ai_tools.errors.ConfigError` with one line naming the
file and the key, so a typo never produces a half-built world.

The result is the world-data dict the stores keep (``IWorldStore``):
``{"objects": [...], "channels": [...], "prototypes": [...], "help": [...],
"meta": {...}}``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Container, Mapping
from pathlib import Path
from typing import Any

from ai_tools.errors import ConfigError
from ai_tools.world.model import (
    OBJECT_KINDS,
    Channel,
    HelpEntry,
    Prototype,
    WorldObject,
    normalise_tag,
)

Check = Callable[[Any], bool]


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_tags(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    for tag in value:
        if isinstance(tag, str) and tag.strip():
            continue
        if (
            isinstance(tag, dict)
            and set(tag) <= {"tag", "category"}
            and _is_text(tag.get("tag"))
            and isinstance(tag.get("category", ""), str)
        ):
            continue
        return False
    return True


def _is_subscribers(value: Any) -> bool:
    return value == "all" or _is_str_list(value)


_TYPE_NAMES: dict[Check, str] = {
    _is_str: "a string",
    _is_text: "a non-empty string",
    _is_str_list: "a list of non-empty strings",
    _is_table: "a table",
    _is_tags: 'a list of tags ("name" or {tag = "name", category = "cat"})',
    _is_subscribers: '"all" or a list of character ids',
}

_COMMON: dict[str, Check] = {
    "id": _is_text,
    "key": _is_text,
    "aliases": _is_str_list,
    "description": _is_str,
    "tags": _is_tags,
    "attributes": _is_table,
}

SECTIONS: dict[str, tuple[dict[str, Check], tuple[str, ...]]] = {
    "rooms": ({**_COMMON, "owner": _is_text}, ("key",)),
    "exits": (
        {
            **_COMMON,
            "from": _is_text,
            "to": _is_text,
            "back": _is_text,
            "back_aliases": _is_str_list,
            "back_id": _is_text,
        },
        ("key", "from", "to"),
    ),
    "objects": ({**_COMMON, "location": _is_text, "owner": _is_text}, ("key",)),
    "characters": ({**_COMMON, "location": _is_text, "permissions": _is_str_list}, ("key",)),
    "channels": (
        {
            "key": _is_text,
            "description": _is_str,
            "subscribers": _is_subscribers,
            "send_permission": _is_text,
        },
        ("key",),
    ),
    "prototypes": (
        {
            "key": _is_text,
            "description": _is_str,
            "name": _is_text,
            "desc": _is_str,
            "kind": _is_text,
            "aliases": _is_str_list,
            "attributes": _is_table,
            "tags": _is_tags,
            "permission": _is_text,
        },
        ("key",),
    ),
    "help": (
        {"key": _is_text, "text": _is_text, "category": _is_text, "aliases": _is_str_list},
        ("key", "text"),
    ),
}

WORLD_TABLE: dict[str, Check] = {"name": _is_text, "description": _is_str, "start_room": _is_text}

_PREFIX = {"rooms": "room", "exits": "exit", "objects": "obj", "characters": "char"}
_KIND = {"rooms": "room", "exits": "exit", "objects": "object", "characters": "character"}


def slug(text: str) -> str:
    """A lower-case id fragment of ``text`` (letters, digits, dashes)."""
    return re.sub(r"[^a-z0-9]+", "-", text.casefold()).strip("-") or "thing"


def unique_id(base: str, taken: Container[str]) -> str:
    """``base``, or ``base-2``, ``base-3``… whichever is not in ``taken``."""
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


class _Reader:
    """Checks one parsed file and builds its rows; ``fail`` raises the ConfigError."""

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data = data
        self.source = source
        self.objects: dict[str, WorldObject] = {}

    def fail(self, where: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where}: {problem}")

    def entries(self, section: str) -> list[dict[str, Any]]:
        fields, required = SECTIONS[section]
        raw = self.data.get(section, [])
        if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
            raise self.fail(section, f"must be an array of tables ([[{section}]])")
        for index, entry in enumerate(raw):
            where = f"{section}[{index}]"
            for name, value in entry.items():
                check = fields.get(name)
                if check is None:
                    allowed = ", ".join(sorted(fields))
                    raise self.fail(f"{where}.{name}", f"unknown key (allowed: {allowed})")
                if not check(value):
                    raise self.fail(f"{where}.{name}", f"must be {_TYPE_NAMES[check]}")
            for name in required:
                if name not in entry:
                    raise self.fail(f"{where}", f"missing required key {name!r}")
        return raw

    def tags(self, raw: list[Any]) -> list[tuple[str, str | None]]:
        pairs: list[tuple[str, str | None]] = []
        for tag in raw:
            pair = (
                normalise_tag(tag)
                if isinstance(tag, str)
                else normalise_tag(tag["tag"], tag.get("category"))
            )
            if pair not in pairs:
                pairs.append(pair)
        return pairs

    def add_object(self, section: str, index: int, entry: Mapping[str, Any]) -> WorldObject:
        where = f"{section}[{index}]"
        obj_id = entry.get("id") or unique_id(
            f"{_PREFIX[section]}:{slug(entry['key'])}", self.objects
        )
        if obj_id in self.objects:
            raise self.fail(f"{where}.id", f"duplicate id {obj_id!r}")
        if any(ch.isspace() for ch in obj_id):
            raise self.fail(f"{where}.id", "must not contain white space")
        obj = WorldObject(
            id=obj_id,
            key=entry["key"].strip(),
            kind=_KIND[section],
            description=entry.get("description", ""),
            aliases=[a.strip() for a in entry.get("aliases", [])],
            attributes=dict(entry.get("attributes", {})),
            tags=self.tags(entry.get("tags", [])),
            permissions=list(entry.get("permissions", [])),
            owner=entry.get("owner"),
        )
        self.objects[obj_id] = obj
        return obj

    def require(self, where: str, ref: str, kinds: tuple[str, ...]) -> None:
        target = self.objects.get(ref)
        if target is None:
            raise self.fail(where, f"no {' or '.join(kinds)} with id {ref!r}")
        if target.kind not in kinds:
            raise self.fail(where, f"{ref!r} is a {target.kind}, not a {' or '.join(kinds)}")

    def build(self) -> dict[str, Any]:
        """The world data (rows) of the file, every reference checked."""
        world = self.world_table()
        rooms = self.entries("rooms")
        objects = self.entries("objects")
        characters = self.entries("characters")
        exits = self.entries("exits")
        for index, entry in enumerate(rooms):
            self.add_object("rooms", index, entry)
        if not rooms and (objects or characters or exits):
            raise self.fail("rooms", "a world with things in it needs at least one room")
        start_room = world.get("start_room") or (next(iter(self.objects)) if rooms else None)
        if world.get("start_room"):
            self.require("world.start_room", world["start_room"], ("room",))
        self.place_things(characters, objects, start_room)
        self.check_no_containment_loop()
        for index, entry in enumerate(exits):
            self.add_exits(index, entry)
        characters_ids = [o.id for o in self.objects.values() if o.kind == "character"]
        for obj in self.objects.values():
            if obj.owner is not None and obj.owner not in characters_ids:
                raise self.fail(f"{obj.id}.owner", f"no character with id {obj.owner!r}")
        return {
            "objects": [o.to_row() for o in self.objects.values()],
            "channels": self.channels(characters_ids),
            "prototypes": self.prototypes(),
            "help": self.help(),
            "meta": {
                "name": world.get("name", "Sandbox"),
                "description": world.get("description", ""),
                "start_room": start_room,
                "seeded_from": Path(self.source).name,
            },
        }

    def world_table(self) -> dict[str, Any]:
        """The ``[world]`` table, checked (and the file's sections are all known ones)."""
        known = {"world", *SECTIONS}
        for name in self.data:
            if name not in known:
                raise self.fail(name, f"unknown section (allowed: {', '.join(sorted(known))})")
        world = self.data.get("world", {})
        if not isinstance(world, dict):
            raise self.fail("world", "must be a table ([world])")
        for name, value in world.items():
            check = WORLD_TABLE.get(name)
            if check is None:
                raise self.fail(
                    f"world.{name}", "unknown key (allowed: description, name, start_room)"
                )
            if not check(value):
                raise self.fail(f"world.{name}", f"must be {_TYPE_NAMES[check]}")
        return world

    def place_things(self, characters: list[dict[str, Any]], objects: list[dict[str, Any]],
                     start_room: str | None) -> None:
        """Add the characters and objects, then put each where it says (characters
        without a location in the start room); locations may name things added later."""
        placed = [
            ("characters", characters, ("room",)),
            ("objects", objects, ("room", "object", "character")),
        ]
        added: dict[str, list[WorldObject]] = {}
        for section, entries, _ in placed:
            added[section] = [
                self.add_object(section, index, entry) for index, entry in enumerate(entries)
            ]
        for section, entries, kinds in placed:
            for obj, (index, entry) in zip(added[section], enumerate(entries), strict=True):
                if "location" in entry:
                    self.require(f"{section}[{index}].location", entry["location"], kinds)
                    obj.location = entry["location"]
                elif section == "characters":
                    obj.location = start_room

    def check_no_containment_loop(self) -> None:
        """No object is (through others) inside itself."""
        for obj in self.objects.values():
            seen = {obj.id}
            here = obj.location
            while here is not None:
                if here in seen:
                    raise self.fail(f"{obj.id}.location", "objects contain each other in a loop")
                seen.add(here)
                here = self.objects[here].location

    def add_exits(self, index: int, entry: dict[str, Any]) -> None:
        """One ``[[exits]]`` entry: the exit, and its way back when ``back`` names one."""
        where = f"exits[{index}]"
        self.require(f"{where}.from", entry["from"], ("room",))
        self.require(f"{where}.to", entry["to"], ("room",))
        if "id" not in entry:
            entry = {**entry, "id": self.exit_id(entry["from"], entry["key"])}
        exit_ = self.add_object("exits", index, entry)
        exit_.location, exit_.destination = entry["from"], entry["to"]
        if "back" in entry:
            back = self.add_object("exits", index, {
                "id": entry.get("back_id") or self.exit_id(entry["to"], entry["back"]),
                "key": entry["back"],
                "aliases": entry.get("back_aliases", []),
            })
            back.location, back.destination = entry["to"], entry["from"]
        elif "back_aliases" in entry or "back_id" in entry:
            raise self.fail(where, "back_aliases/back_id need 'back' (the return exit's name)")

    def exit_id(self, room: str, key: str) -> str:
        """A new exit's id from its room and name (``exit:inn-east``), unique in the file."""
        return unique_id(f"exit:{slug(room.split(':')[-1])}-{slug(key)}", self.objects)

    def channels(self, characters: list[str]) -> list[dict[str, Any]]:
        rows: dict[str, Channel] = {}
        for index, entry in enumerate(self.entries("channels")):
            key = entry["key"].strip()
            if key.casefold() in (k.casefold() for k in rows):
                raise self.fail(f"channels[{index}].key", f"duplicate channel {key!r}")
            subscribers = entry.get("subscribers", "all")
            auto_join = subscribers == "all"
            if auto_join:
                subscribers = list(characters)
            for ref in subscribers:
                if ref not in characters:
                    raise self.fail(
                        f"channels[{index}].subscribers", f"no character with id {ref!r}"
                    )
            rows[key] = Channel(
                key=key,
                description=entry.get("description", ""),
                subscribers=list(subscribers),
                send_permission=entry.get("send_permission"),
                auto_join=auto_join,
            )
        return [c.to_row() for c in rows.values()]

    def prototypes(self) -> list[dict[str, Any]]:
        rows: dict[str, Prototype] = {}
        for index, entry in enumerate(self.entries("prototypes")):
            key = entry["key"].strip()
            if key.casefold() in (k.casefold() for k in rows):
                raise self.fail(f"prototypes[{index}].key", f"duplicate prototype {key!r}")
            kind = entry.get("kind", "object")
            if kind not in ("object", "character") or kind not in OBJECT_KINDS:
                raise self.fail(f"prototypes[{index}].kind", "must be 'object' or 'character'")
            rows[key] = Prototype(
                key=key,
                description=entry.get("description", ""),
                name=entry.get("name"),
                desc=entry.get("desc"),
                kind=kind,
                aliases=list(entry.get("aliases", [])),
                attributes=dict(entry.get("attributes", {})),
                tags=self.tags(entry.get("tags", [])),
                permission=entry.get("permission", "Builder"),
            )
        return [p.to_row() for p in rows.values()]

    def help(self) -> list[dict[str, Any]]:
        rows: dict[str, HelpEntry] = {}
        for index, entry in enumerate(self.entries("help")):
            key = entry["key"].strip()
            if key.casefold() in (k.casefold() for k in rows):
                raise self.fail(f"help[{index}].key", f"duplicate help entry {key!r}")
            rows[key] = HelpEntry(
                key=key,
                text=entry["text"].strip(),
                category=entry.get("category", "General"),
                aliases=list(entry.get("aliases", [])),
            )
        return [h.to_row() for h in rows.values()]


def parse_world(data: Mapping[str, Any], source: str = "<world>") -> dict[str, Any]:
    """Check parsed world-file ``data`` and return the world rows; ConfigError on a mistake."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a world file must be a TOML table")
    return _Reader(data, source).build()


def load_world_file(path: str | Path) -> dict[str, Any]:
    """Read and check the TOML world file at ``path``; ConfigError names any mistake."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{source}: world file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory, not a world file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return parse_world(data, source)
