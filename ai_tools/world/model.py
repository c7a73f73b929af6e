"""The sandbox world's things, and how each is written as a plain row.

A row is the JSON-serialisable dict the store keeps (see ``IWorldStore``) and
the world file produces, so seeding, saving and loading all use one format.
The classes are mutable because the world changes them in place; callers
outside the world only ever see copies (:meth:`WorldObject.as_dict`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import attrs

OBJECT_KINDS = ("room", "exit", "character", "object")

PERMISSION_HIERARCHY = ("Guest", "Player", "Helper", "Builder", "Admin", "Developer")
"""Evennia's permission hierarchy: holding one implies every one before it."""


def permission_rank(permission: str) -> int:
    """Position of ``permission`` in :data:`PERMISSION_HIERARCHY` (case-insensitive), or -1."""
    folded = permission.casefold()
    for rank, name in enumerate(PERMISSION_HIERARCHY):
        if name.casefold() == folded:
            return rank
    return -1


def normalise_tag(tag: Any, category: Any = None) -> tuple[str, str | None]:
    """A ``(tag, category)`` pair: tags are lower-cased like Evennia's; blank is refused."""
    name = str(tag or "").strip().casefold()
    if not name:
        raise ValueError("tag is empty")
    cat = str(category).strip().casefold() if category not in (None, "") else None
    return name, cat or None


@attrs.define(eq=False)
class WorldObject:
    """A room, exit, character or object."""

    id: str
    key: str
    kind: str
    description: str = ""
    location: str | None = None
    destination: str | None = None
    aliases: list[str] = attrs.field(factory=list)
    attributes: dict[str, Any] = attrs.field(factory=dict)
    tags: list[tuple[str, str | None]] = attrs.field(factory=list)
    permissions: list[str] = attrs.field(factory=list)
    owner: str | None = None
    created_at: float = 0.0

    def names(self) -> list[str]:
        """Key and aliases, case-folded (what a search matches)."""
        return [self.key.casefold(), *(a.casefold() for a in self.aliases)]

    def has_tag(self, tag: str, category: str | None = None) -> bool:
        """Whether the object carries ``tag`` (in ``category`` when given)."""
        name = tag.casefold()
        return any(t == name and (category is None or c == category) for t, c in self.tags)

    def as_dict(self, detail: str = "normal") -> dict[str, Any]:
        """The IWorld object dict (a copy).  ``detailed`` adds attributes and tags."""
        data: dict[str, Any] = {
            "id": self.id,
            "key": self.key,
            "kind": self.kind,
            "description": "" if detail == "brief" else self.description,
            "location": self.location,
            "aliases": list(self.aliases),
        }
        if self.kind == "exit":
            data["destination"] = self.destination
        if self.kind == "character":
            data["permissions"] = list(self.permissions)
        if self.owner is not None:
            data["owner"] = self.owner
        if detail == "detailed":
            data["attributes"] = copy.deepcopy(self.attributes)
            data["tags"] = [{"tag": t, "category": c} for t, c in self.tags]
        return data

    def to_row(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "id": self.id,
            "key": self.key,
            "kind": self.kind,
            "description": self.description,
            "location": self.location,
            "destination": self.destination,
            "aliases": list(self.aliases),
            "attributes": copy.deepcopy(self.attributes),
            "tags": [{"tag": t, "category": c} for t, c in self.tags],
            "permissions": list(self.permissions),
            "owner": self.owner,
            "created_at": self.created_at,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WorldObject:
        """Rebuild from :meth:`to_row`'s form."""
        return cls(
            id=str(row["id"]),
            key=str(row["key"]),
            kind=str(row["kind"]),
            description=str(row.get("description") or ""),
            location=row.get("location"),
            destination=row.get("destination"),
            aliases=[str(a) for a in row.get("aliases") or ()],
            attributes=copy.deepcopy(dict(row.get("attributes") or {})),
            tags=[normalise_tag(t["tag"], t.get("category")) for t in row.get("tags") or ()],
            permissions=[str(p) for p in row.get("permissions") or ()],
            owner=row.get("owner"),
            created_at=float(row.get("created_at") or 0.0),
        )


@attrs.define(eq=False)
class Channel:
    """A chat channel: who receives its posts and who may post."""

    key: str
    description: str = ""
    subscribers: list[str] = attrs.field(factory=list)
    send_permission: str | None = None
    auto_join: bool = False
    """New characters join it (the world file's ``subscribers = "all"``)."""

    def to_row(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "key": self.key,
            "description": self.description,
            "subscribers": list(self.subscribers),
            "send_permission": self.send_permission,
            "auto_join": self.auto_join,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Channel:
        """Rebuild from :meth:`to_row`'s form."""
        return cls(
            key=str(row["key"]),
            description=str(row.get("description") or ""),
            subscribers=[str(s) for s in row.get("subscribers") or ()],
            send_permission=row.get("send_permission"),
            auto_join=bool(row.get("auto_join", False)),
        )


@attrs.define(eq=False)
class Prototype:
    """A template objects are spawned from."""

    key: str
    description: str = ""
    name: str | None = None
    desc: str | None = None
    kind: str = "object"
    aliases: list[str] = attrs.field(factory=list)
    attributes: dict[str, Any] = attrs.field(factory=dict)
    tags: list[tuple[str, str | None]] = attrs.field(factory=list)
    permission: str = "Builder"

    def to_row(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "key": self.key,
            "description": self.description,
            "name": self.name,
            "desc": self.desc,
            "kind": self.kind,
            "aliases": list(self.aliases),
            "attributes": copy.deepcopy(self.attributes),
            "tags": [{"tag": t, "category": c} for t, c in self.tags],
            "permission": self.permission,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Prototype:
        """Rebuild from :meth:`to_row`'s form."""
        return cls(
            key=str(row["key"]),
            description=str(row.get("description") or ""),
            name=row.get("name"),
            desc=row.get("desc"),
            kind=str(row.get("kind") or "object"),
            aliases=[str(a) for a in row.get("aliases") or ()],
            attributes=copy.deepcopy(dict(row.get("attributes") or {})),
            tags=[normalise_tag(t["tag"], t.get("category")) for t in row.get("tags") or ()],
            permission=str(row.get("permission") or "Builder"),
        )


@attrs.define(eq=False)
class HelpEntry:
    """One help topic."""

    key: str
    text: str
    category: str = "General"
    aliases: list[str] = attrs.field(factory=list)

    def to_row(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "key": self.key,
            "text": self.text,
            "category": self.category,
            "aliases": list(self.aliases),
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> HelpEntry:
        """Rebuild from :meth:`to_row`'s form."""
        return cls(
            key=str(row["key"]),
            text=str(row.get("text") or ""),
            category=str(row.get("category") or "General"),
            aliases=[str(a) for a in row.get("aliases") or ()],
        )
