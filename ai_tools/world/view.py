"""The sandbox world as read: lookups, descriptions, searches, the rights a character holds.

:class:`WorldView` holds what a sandbox world is made of — its objects
(:class:`~ai_tools.world.objects.WorldObjects`), channels
(:class:`~ai_tools.world.channels.Channels`), prototypes, help entries and
meta — and answers every read of :class:`~ai_tools.interfaces.IWorld` with a
plain value, synchronously.  :class:`~ai_tools.world.sandbox.SandboxWorld` is a
view that also changes the world (its parts ``building``, ``speech``,
``hearing``) and keeps it in a store.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import attrs

from ai_tools.json_types import JSONObject, JSONValue
from ai_tools.world.channels import Channels
from ai_tools.world.help_index import rank_help
from ai_tools.world.model import HelpEntry, Prototype, normalise_tag
from ai_tools.world.objects import WorldObjects
from ai_tools.world.permissions import holds, may_edit


@attrs.define(eq=False)
class WorldView:
    """The parts of a world and the reads over them (see the module)."""

    name: str = attrs.field(default="sandbox", init=False)
    meta: dict[str, JSONValue] = attrs.field(factory=dict, init=False)
    objects: WorldObjects = attrs.field(factory=WorldObjects, init=False)
    """Every object and where it is (the internal API the commands share)."""
    channels: Channels = attrs.field(factory=Channels, init=False)
    """The channels and their rules."""
    prototypes: dict[str, Prototype] = attrs.field(factory=dict, init=False)
    """The prototypes to spawn, by folded key."""
    help_entries: dict[str, HelpEntry] = attrs.field(factory=dict, init=False)
    """The help entries, by folded key."""

    def snapshot(self) -> JSONObject:
        """The whole world as world data (rows), e.g. to export it."""
        return {
            "objects": [o.to_row() for o in self.objects.values()],
            "channels": [c.to_row() for c in self.channels],
            "prototypes": [p.to_row() for p in self.prototypes.values()],
            "help": [h.to_row() for h in self.help_entries.values()],
            "meta": copy.deepcopy(self.meta),
        }

    def contents(self, location_id: str) -> list[JSONObject]:
        """Object dicts of what is directly in ``location_id`` (NotFound if unknown)."""
        self.objects.require(location_id, "location")
        return [obj.as_dict() for obj in self.objects.inside(location_id)]

    def get_object(self, obj_id: object) -> JSONObject | None:
        """The object dict of ``obj_id``, or None."""
        obj = self.objects.get(obj_id)
        return obj.as_dict() if obj is not None else None

    def character_ids(self) -> list[str]:
        """The ids of every character in the world, sorted (start-up checks, messages)."""
        return sorted(obj.id for obj in self.objects.values() if obj.kind == "character")

    def room_ids(self) -> list[str]:
        """The ids of every room in the world, sorted (the operator's API lists them)."""
        return sorted(obj.id for obj in self.objects.values() if obj.kind == "room")

    def describe_location(self, char_id: str, detail: str = "normal") -> JSONObject:
        """The room ``char_id`` stands in, its exits, things and other characters."""
        if detail not in ("brief", "normal", "detailed"):
            raise ValueError(f"detail must be brief, normal or detailed, not {detail!r}")
        char = self.objects.character(char_id)
        room = self.objects.room_of(char)
        exits: list[JSONValue] = []
        contents: list[JSONValue] = []
        characters: list[JSONValue] = []
        for obj in self.objects.inside(room.id):
            if obj.id == char.id:
                continue
            if obj.kind == "exit":
                aliases: list[JSONValue] = list(obj.aliases)
                exits.append(
                    {
                        "id": obj.id,
                        "key": obj.key,
                        "aliases": aliases,
                        "destination": obj.destination,
                    }
                )
            elif obj.kind == "character":
                characters.append(obj.as_dict(detail))
            else:
                contents.append(obj.as_dict(detail))
        return {
            "room": room.as_dict(detail),
            "exits": exits,
            "contents": contents,
            "characters": characters,
        }

    def search(
        self,
        query: str,
        *,
        char_id: str | None = None,
        location: str | None = None,
        kind: str | None = None,
        limit: int = 10,
    ) -> list[JSONObject]:
        """Objects whose key or aliases match ``query``: exact, then prefix, then substring.

        An exact id finds that object.  Ties go to what is in ``char_id``'s
        room (or carried), then to the oldest object.
        """
        return [o.as_dict() for o in self.objects.search(query, char_id, location, kind, limit)]

    def get_tags(self, obj_id: str, category: str | None = None) -> list[JSONObject]:
        """``[{"tag", "category"}]`` on ``obj_id`` (only ``category``'s when given)."""
        obj = self.objects.require(obj_id)
        cat = category.casefold() if category else None
        return [{"tag": t, "category": c} for t, c in obj.tags if cat is None or c == cat]

    def search_by_tag(
        self, tag: str, category: str | None = None, limit: int = 50
    ) -> list[JSONObject]:
        """Objects carrying ``tag`` (in ``category`` if given), oldest first."""
        name, cat = normalise_tag(tag, category)
        found = [
            o.as_dict()
            for o in self.objects.values()
            if any(t == name and (cat is None or c == cat) for t, c in o.tags)
        ]
        return found[: max(limit, 0)]

    def has_permission(self, char_id: str, permission: str) -> bool:
        """Whether ``char_id`` holds ``permission`` or one above it in the hierarchy."""
        char = self.objects.get(char_id)
        if char is None or char.kind != "character":
            return False
        return holds(char.permissions, str(permission))

    def get_attributes(self, obj_id: str, names: Iterable[str] | None = None) -> JSONObject:
        """``{name: value}`` of the object's attributes (all, or those in ``names``)."""
        obj = self.objects.require(obj_id)
        wanted = set(names) if names is not None else None
        return {
            k: copy.deepcopy(v) for k, v in obj.attributes.items() if wanted is None or k in wanted
        }

    def can_edit(self, char_id: str, obj_id: str) -> bool:
        """Whether ``char_id`` may change ``obj_id`` (see :mod:`ai_tools.world.permissions`)."""
        return may_edit(self.objects.character(char_id), self.objects.require(obj_id))

    def list_prototypes(self) -> list[JSONObject]:
        """``[{"key", "description", "permission"}]`` sorted by key."""
        return sorted(
            (
                {"key": p.key, "description": p.description, "permission": p.permission}
                for p in self.prototypes.values()
            ),
            key=lambda p: str(p["key"]).casefold(),
        )

    def find_exit(self, char_id: str, name: str) -> JSONObject | None:
        """The exit of ``char_id``'s room called ``name`` (id, key or alias), or None."""
        exit_ = self.objects.find_exit(self.objects.character(char_id), name)
        return exit_.as_dict() if exit_ is not None else None

    def list_channels(self) -> list[JSONObject]:
        """``[{"key", "description", "subscribers"}]`` sorted by key."""
        return self.channels.listing()

    def channel_key(self, channel: str) -> str:
        """The name of the channel ``channel`` names (any case); NotFound if there is none."""
        return self.channels.named(channel).key

    def help_search(self, query: str, limit: int = 5) -> list[JSONObject]:
        """Help entries for ``query``: ``[{"key", "text", "score", "category"}]`` best first."""
        return rank_help(self.help_entries.values(), str(query or ""), limit)

    def help_topics(self) -> list[str]:
        """Keys of every help entry, sorted."""
        return sorted((h.key for h in self.help_entries.values()), key=str.casefold)
