"""Changes to the objects of a sandbox world: attributes, tags, spawning, building, moving.

One part of :class:`~ai_tools.world.sandbox.SandboxWorld` (which composes it as
``world.building``): each change checks the acting character's rights, changes
the objects in memory, and returns the world's ``write`` of the rows it changed
(a Deferred that fires once they are durable).  The world calls these through
``maybeDeferred``, so a refusal fails its Deferred.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping

import attrs
from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.world.channels import Channels
from ai_tools.world.model import Prototype, WorldObject, normalise_tag
from ai_tools.world.objects import WorldObjects
from ai_tools.world.permissions import BUILDER, DEVELOPER, SYSTEM_TAG_CATEGORY, holds, may_edit
from ai_tools.world.speech import Speech
from ai_tools.world.worldfile import slug, unique_id

MAX_VALUE_CHARS = 8192
"""Largest JSON encoding of an attribute value :meth:`Building.set_attribute` accepts."""

FORBIDDEN_OVERRIDES = frozenset(
    {"id", "kind", "location", "destination", "owner", "permissions", "created_at"}
)
"""Spawn overrides that would change identity or rights, refused."""

Write = Callable[[JSONMapping], defer.Deferred[None]]
"""The world's write-through of changed rows (``{section: [rows]}``)."""


def _check_attribute_name(name: object) -> str:
    text = str(name or "").strip() if isinstance(name, str) else ""
    if not text:
        raise ValueError("attribute name is empty")
    if text.startswith("_"):
        raise PermissionDenied(f"attribute {text!r} is internal (names starting with '_')")
    return text


def _json_copy(value: object, what: str) -> JSONValue:
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} is not JSON-serialisable: {exc}") from None
    if len(encoded) > MAX_VALUE_CHARS:
        raise ValueError(f"{what} too large ({len(encoded)} > {MAX_VALUE_CHARS} characters)")
    return json.loads(encoded)



def _items(value: object) -> Iterable[object]:
    """``value`` as the iterable an override must be (TypeError as iterating it raises)."""
    if not isinstance(value, Iterable):
        raise TypeError(f"'{type(value).__name__}' object is not iterable")
    return value


def _field(tag: object, name: str) -> object:
    """``tag[name]`` of a tag given as a mapping (AttributeError as ``.get`` raises)."""
    if not isinstance(tag, Mapping):
        raise AttributeError(f"'{type(tag).__name__}' object has no attribute 'get'")
    return tag.get(name)


@attrs.define
class _Spawned:
    """What a spawn makes of a prototype: its fields, then each override applied."""

    key: str
    description: str
    aliases: list[str]
    attributes: dict[str, JSONValue]
    tags: list[tuple[str, str | None]]

    @classmethod
    def of(cls, proto: Prototype) -> _Spawned:
        return cls(
            key=proto.name or proto.key,
            description=proto.desc if proto.desc is not None else proto.description,
            aliases=list(proto.aliases),
            attributes=copy.deepcopy(proto.attributes),
            tags=list(proto.tags),
        )

    def override(self, name: str, value: object, developer: bool) -> None:
        """Apply one override; ``developer``: may add tags of the system category."""
        if name in FORBIDDEN_OVERRIDES:
            raise PermissionDenied(f"a spawn may not override {name!r}")
        if name == "key":
            self.key = str(value).strip() or self.key
        elif name == "aliases":
            self.aliases = [str(a) for a in _items(value)]
        elif name in ("description", "desc"):
            self.description = str(value)
        elif name == "tags":
            self.add_tags(_items(value), developer)
        elif name == "attributes":
            if not isinstance(value, Mapping):
                raise ValueError("attributes must be a mapping of name to value")
            for attr, attr_value in value.items():
                self.set_attribute(attr, attr_value)
        else:
            self.set_attribute(name, value)

    def add_tags(self, tags: Iterable[object], developer: bool) -> None:
        for tag in tags:
            pair = (normalise_tag(tag) if isinstance(tag, str)
                    else normalise_tag(_field(tag, "tag"), _field(tag, "category")))
            if pair[1] == SYSTEM_TAG_CATEGORY and not developer:
                raise PermissionDenied("tags in category 'system' need Developer rights")
            if pair not in self.tags:
                self.tags.append(pair)

    def set_attribute(self, name: object, value: object) -> None:
        self.attributes[_check_attribute_name(name)] = _json_copy(value, f"attribute {name!r}")



@attrs.define(eq=False)
class Building:
    """The object changes of a world: checked against the acting character's rights,
    applied in memory, written with ``write``; a move is announced through ``speech``.

    ``meta`` is the world's meta (its ``start_room`` places new characters).
    """

    objects: WorldObjects
    channels: Channels
    prototypes: dict[str, Prototype]
    meta: Callable[[], JSONMapping]
    now: Callable[[], float]
    write: Write
    speech: Speech

    _log = Logger()

    def _persist(self, *objects: WorldObject) -> defer.Deferred[None]:
        return self.write({"objects": [o.to_row() for o in objects]})

    def _persisted(self, obj: WorldObject) -> defer.Deferred[JSONObject]:
        return self._persist(obj).addCallback(lambda _: obj.as_dict())

    def check_edit(self, char: WorldObject, obj: WorldObject, action: str) -> None:
        """PermissionDenied unless ``char`` may change ``obj`` (see ``permissions``)."""
        if not may_edit(char, obj):
            needs = "Admin" if obj.kind == "character" else BUILDER
            raise PermissionDenied(
                f"{char.key} may not {action} on {obj.key} ({obj.id}): needs {needs} rights"
                " or ownership"
            )

    def check_builder(self, char: WorldObject, action: str, permission: str = BUILDER) -> None:
        """PermissionDenied unless ``char`` holds ``permission`` (Builder by default)."""
        if not holds(char.permissions, permission):
            raise PermissionDenied(f"{char.key} may not {action}: needs {permission} rights")

    def set_attribute(self, char_id: str, obj_id: str, name: str,
                      value: object) -> defer.Deferred[JSONObject]:
        """Set attribute ``name`` of ``obj_id`` to a JSON value, as ``char_id``."""
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        name = _check_attribute_name(name)
        self.check_edit(char, obj, f"set attribute {name!r}")
        obj.attributes[name] = _json_copy(value, f"attribute {name!r}")
        self._log.info("{char} set attribute {name} on {obj}", char=char.id, name=name, obj=obj.id)
        return self._persisted(obj)

    def delete_attribute(self, char_id: str, obj_id: str, name: str) -> defer.Deferred[bool]:
        """Remove attribute ``name`` of ``obj_id`` as ``char_id``; fires True if it existed."""
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        name = _check_attribute_name(name)
        self.check_edit(char, obj, f"delete attribute {name!r}")
        if name not in obj.attributes:
            return defer.succeed(False)
        del obj.attributes[name]
        return self._persist(obj).addCallback(lambda _: True)

    def _check_tag(self, char: WorldObject, obj: WorldObject, tag: object,
                   category: object) -> tuple[str, str | None]:
        pair = normalise_tag(tag, category)
        self.check_edit(char, obj, f"change tag {pair[0]!r}")
        if pair[1] == SYSTEM_TAG_CATEGORY and not holds(char.permissions, DEVELOPER):
            raise PermissionDenied(
                f"tags in category {SYSTEM_TAG_CATEGORY!r} need Developer rights"
            )
        return pair

    def add_tag(self, char_id: str, obj_id: str, tag: str,
                category: str | None) -> defer.Deferred[JSONObject]:
        """Add a tag as ``char_id``; fires with the object dict."""
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        pair = self._check_tag(char, obj, tag, category)
        if pair in obj.tags:
            return defer.succeed(obj.as_dict())
        obj.tags.append(pair)
        return self._persisted(obj)

    def remove_tag(self, char_id: str, obj_id: str, tag: str,
                   category: str | None) -> defer.Deferred[bool]:
        """Remove a tag as ``char_id``; fires True if it was there."""
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        pair = self._check_tag(char, obj, tag, category)
        if pair not in obj.tags:
            return defer.succeed(False)
        obj.tags.remove(pair)
        return self._persist(obj).addCallback(lambda _: True)

    def spawn(self, char_id: str, prototype_key: str, location: str | None,
              overrides: JSONMapping | None) -> defer.Deferred[JSONObject]:
        """Create an object from a prototype as ``char_id`` (Builder, or its permission)."""
        char = self.objects.character(char_id)
        self.check_builder(char, "spawn prototypes")
        proto = self.prototypes.get(str(prototype_key or "").strip().casefold())
        if proto is None:
            raise NotFound(f"no prototype called {prototype_key!r}")
        self.check_builder(char, f"spawn {proto.key!r}", proto.permission)
        target = self._place_for(char, location)
        if target.kind == "exit":
            raise ValueError("an exit cannot hold objects")
        spawned = _Spawned.of(proto)
        developer = holds(char.permissions, DEVELOPER)
        for name, value in (overrides or {}).items():
            spawned.override(name, value, developer)
        prefix = "char" if proto.kind == "character" else "obj"
        obj = WorldObject(
            id=unique_id(f"{prefix}:{slug(spawned.key)}", self.objects),
            key=spawned.key, kind=proto.kind, description=spawned.description,
            aliases=spawned.aliases, attributes=spawned.attributes, tags=spawned.tags,
            owner=char.id, created_at=self.now(),
        )
        self.objects.add(obj, target.id)
        self._log.info("{char} spawned {proto} as {obj} in {location}", char=char.id,
                       proto=proto.key, obj=obj.id, location=target.id)
        return self._persisted(obj)

    def _place_for(self, char: WorldObject, location: str | None) -> WorldObject:
        """Where a new thing goes: ``location``, or else the character's room."""
        if location:
            return self.objects.require(location, "location")
        return self.objects.room_of(char)

    def create_object(self, char_id: str, key: str, description: str,
                      aliases: Iterable[str], location: str | None) -> defer.Deferred[JSONObject]:
        """Create a plain object as ``char_id`` (Builder) in ``location`` or its room."""
        char = self.objects.character(char_id)
        self.check_builder(char, "create objects")
        name = str(key or "").strip()
        if not name:
            raise ValueError("an object needs a name")
        target = self._place_for(char, location)
        obj = WorldObject(
            id=unique_id(f"obj:{slug(name)}", self.objects),
            key=name,
            kind="object",
            description=str(description),
            aliases=[a.strip() for a in aliases if a.strip()],
            owner=char.id,
            created_at=self.now(),
        )
        self.objects.add(obj, target.id)
        return self._persisted(obj)

    def dig(self, char_id: str, room_key: str, room_aliases: Iterable[str],
            exit_key: str | None, exit_aliases: Iterable[str], back_key: str | None,
            back_aliases: Iterable[str]) -> defer.Deferred[JSONObject]:
        """Create a room as ``char_id`` (Builder), with an exit to it and one back."""
        char = self.objects.character(char_id)
        self.check_builder(char, "dig rooms")
        name = str(room_key or "").strip()
        if not name:
            raise ValueError("a room needs a name")
        here = self.objects.room_of(char) if (exit_key or back_key) else None
        now = self.now()
        room = WorldObject(
            id=unique_id(f"room:{slug(name)}", self.objects),
            key=name,
            kind="room",
            aliases=[a.strip() for a in room_aliases if a.strip()],
            owner=char.id,
            created_at=now,
        )
        self.objects.add(room, None)
        created = [room]
        if here is not None and exit_key:
            created.append(self._new_exit(char, here, room, exit_key, exit_aliases, now))
        if here is not None and back_key:
            created.append(self._new_exit(char, room, here, back_key, back_aliases, now))
        return self._persist(*created).addCallback(
            lambda _: {"room": room.as_dict(), "exits": [e.as_dict() for e in created[1:]]}
        )

    def _new_exit(self, char: WorldObject, source: WorldObject, destination: WorldObject,
                  key: str, aliases: Iterable[str], now: float) -> WorldObject:
        exit_ = WorldObject(
            id=unique_id(f"exit:{slug(source.id.split(':')[-1])}-{slug(key)}", self.objects),
            key=key.strip(),
            kind="exit",
            destination=destination.id,
            aliases=[a.strip() for a in aliases if a.strip()],
            owner=char.id,
            created_at=now,
        )
        self.objects.add(exit_, source.id)
        return exit_

    def set_description(self, char_id: str, obj_id: str,
                        text: str) -> defer.Deferred[JSONObject]:
        """Change ``obj_id``'s description as ``char_id`` (edit rights)."""
        char = self.objects.character(char_id)
        obj = self.objects.require(obj_id)
        self.check_edit(char, obj, "describe")
        obj.description = str(text)
        return self._persisted(obj)

    def create_character(self, key: str, location: str | None, permissions: Iterable[str],
                         char_id: str | None, description: str) -> defer.Deferred[JSONObject]:
        """Add a character (an operator action) in ``location`` or the start room."""
        name = str(key or "").strip()
        if not name:
            raise ValueError("a character needs a name")
        if char_id is not None and char_id in self.objects:
            raise ValueError(f"id {char_id!r} is taken")
        start = self.meta().get("start_room")
        place = location or (str(start) if start is not None else None)
        if place is not None:
            target = self.objects.require(place, "location")
            if target.kind != "room":
                raise ValueError(f"{place!r} is not a room")
        char = WorldObject(
            id=char_id or unique_id(f"char:{slug(name)}", self.objects),
            key=name,
            kind="character",
            description=str(description),
            permissions=list(permissions),
            created_at=self.now(),
        )
        self.objects.add(char, place)
        joined = self.channels.join_auto(char.id)
        put = {"objects": [char.to_row()], "channels": [c.to_row() for c in joined]}
        return self.write(put).addCallback(lambda _: char.as_dict())

    def move_character(self, char_id: str, destination: str) -> defer.Deferred[JSONObject]:
        """Move ``char_id`` through an exit of its room; both rooms hear it."""
        char = self.objects.character(char_id)
        self.objects.room_of(char)
        exit_ = self.objects.find_exit(char, destination)
        if exit_ is None:
            raise NotFound(f"there is no exit {destination!r} here")
        target = self.objects.get(exit_.destination or "")
        if target is None:
            raise NotFound(f"the exit {exit_.key!r} leads nowhere")
        old_room = char.location
        self.speech.announce(char, old_room, f"{char.key} leaves {exit_.key}.")
        self.objects.place(char, target.id)
        self.speech.announce(char, target.id, f"{char.key} arrives.")
        return self._persist(char).addCallback(lambda _: target.as_dict())
