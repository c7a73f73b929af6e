"""The sandbox world's objects by id and what each place holds, with the lookups on them.

An internal API shared by :class:`~ai_tools.world.sandbox.SandboxWorld` and its
commands (:mod:`ai_tools.world.commands`): both find objects, characters,
rooms, exits and search results the same way, through these methods.  The
objects are :class:`~ai_tools.world.model.WorldObject` values held in memory;
writing them to a store is the world's business, not this module's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import attrs

from ai_tools.errors import NotFound
from ai_tools.world.model import WorldObject

__all__ = ["WorldObjects"]


@attrs.define(eq=False)
class WorldObjects:
    """Every object of one world, and the ids each location holds (in arrival order).

    ``on_read(obj_id)``, when set, hears which objects a lookup relied on:
    the one :meth:`require` found, the room :meth:`room_of` answered, the
    place :meth:`inside` listed (None for no place).  A world replicated from
    a shared database records them to check, when it commits a change, that
    nobody changed them meanwhile.
    """

    _by_id: dict[str, WorldObject] = attrs.field(factory=dict)
    _contents: dict[str, list[str]] = attrs.field(factory=dict)
    on_read: Callable[[str | None], None] | None = attrs.field(default=None, kw_only=True)

    def replace(self, objects: Iterable[WorldObject]) -> list[WorldObject]:
        """Hold ``objects`` instead; returns those whose location was missing (now nowhere)."""
        self._by_id = {obj.id: obj for obj in objects}
        self._contents = {}
        lost = []
        for obj in self._by_id.values():
            if obj.location is not None and obj.location not in self._by_id:
                lost.append(obj)
                obj.location = None
            if obj.location is not None:
                self._contents.setdefault(obj.location, []).append(obj.id)
        return lost

    def __contains__(self, obj_id: object) -> bool:
        return obj_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def values(self) -> Iterable[WorldObject]:
        """Every object, oldest first."""
        return self._by_id.values()

    def get(self, obj_id: object) -> WorldObject | None:
        """The object with id ``obj_id`` (any value: a non-string finds nothing), or None."""
        return self._by_id.get(obj_id) if isinstance(obj_id, str) else None

    def require(self, obj_id: object, what: str = "object") -> WorldObject:
        """The object with id ``obj_id``; NotFound naming ``what`` was looked for."""
        obj = self.get(obj_id)
        if obj is None:
            raise NotFound(f"no {what} with id {obj_id!r}")
        if self.on_read is not None:
            self.on_read(obj.id)
        return obj

    def character(self, char_id: object) -> WorldObject:
        """The character with id ``char_id`` (NotFound for anything else)."""
        char = self.require(char_id, "character")
        if char.kind != "character":
            raise NotFound(f"{char_id!r} is a {char.kind}, not a character")
        return char

    def room_of(self, char: WorldObject) -> WorldObject:
        """The room ``char`` is in (NotFound when it is nowhere)."""
        if char.location is None:
            raise NotFound(f"{char.key} ({char.id}) is not in any room")
        if self.on_read is not None:
            self.on_read(char.location)
        return self._by_id[char.location]

    def inside(self, location_id: str | None) -> list[WorldObject]:
        """What is directly in ``location_id`` (nothing for None), in arrival order."""
        if self.on_read is not None:
            self.on_read(location_id)
        if location_id is None:
            return []
        return [self._by_id[i] for i in self._contents.get(location_id, ())]

    def add(self, obj: WorldObject, location: str | None) -> None:
        """A new object, put in ``location``."""
        self._by_id[obj.id] = obj
        obj.location = location
        if location is not None:
            self._contents.setdefault(location, []).append(obj.id)

    def place(self, obj: WorldObject, location: str | None) -> None:
        """Move ``obj`` to ``location`` (None: nowhere)."""
        self._leave(obj)
        obj.location = location
        if location is not None:
            self._contents.setdefault(location, []).append(obj.id)

    def put(self, obj: WorldObject) -> None:
        """Hold ``obj``, new or in place of the object with its id, where it says it is."""
        old = self._by_id.get(obj.id)
        self._by_id[obj.id] = obj
        if old is not None and old.location == obj.location:
            return
        if old is not None:
            self._leave(old)
        if obj.location is not None:
            self._contents.setdefault(obj.location, []).append(obj.id)

    def remove(self, obj_id: str) -> WorldObject | None:
        """Forget the object ``obj_id`` (what it holds stays where it is); it, or None."""
        obj = self._by_id.pop(obj_id, None)
        if obj is not None:
            self._leave(obj)
        return obj

    def _leave(self, obj: WorldObject) -> None:
        """Take ``obj``'s id out of its location's contents."""
        if obj.location is None:
            return
        siblings = self._contents.get(obj.location, [])
        if obj.id in siblings:
            siblings.remove(obj.id)

    def find_exit(self, char: WorldObject, name: str) -> WorldObject | None:
        """The exit of ``char``'s room called ``name`` (its id, key or an alias), or None."""
        folded = str(name or "").strip().casefold()
        if not folded or char.location is None:
            return None
        for obj in self.inside(char.location):
            if obj.kind == "exit" and (obj.id == name or folded in obj.names()):
                return obj
        return None

    def search(self, query: object, char_id: str | None, location: str | None,
               kind: str | None, limit: int) -> list[WorldObject]:
        """Objects whose key or aliases match ``query``: exact, then prefix, then substring.

        An exact id finds that object.  Only what is in ``location`` when
        given, only of ``kind`` when given.  Ties go to what is in
        ``char_id``'s room (or carried), then to the oldest object.
        """
        text = str(query or "").strip()
        if not text or limit <= 0:
            return []
        if location is not None:
            self.require(location, "location")
        direct = self._by_id.get(text)
        if direct is not None:
            found = [direct] if location is None or direct.location == location else []
            return [o for o in found if kind is None or o.kind == kind][:limit]
        nearby = self._near(char_id)
        candidates = self.inside(location) if location is not None else self._by_id.values()
        folded = text.casefold()
        ranked: list[tuple[int, int, int, WorldObject]] = []
        for order, obj in enumerate(candidates):
            rank = _match_rank(folded, obj) if kind is None or obj.kind == kind else None
            if rank is not None:
                ranked.append((rank, 0 if obj.id in nearby else 1, order, obj))
        ranked.sort(key=lambda item: item[:3])
        return [item[3] for item in ranked[:limit]]

    def _near(self, char_id: str | None) -> set[str]:
        """The ids in ``char_id``'s room and in its hands."""
        looker = self.get(char_id)
        if looker is None:
            return set()
        nearby = {o.id for o in self.inside(looker.location)}
        nearby.update(o.id for o in self.inside(looker.id))
        return nearby


def _match_rank(folded: str, obj: WorldObject) -> int | None:
    """0 for a name equal to ``folded``, 1 for a prefix, 2 for a substring, None: no match."""
    names = obj.names()
    if folded in names:
        return 0
    if any(n.startswith(folded) for n in names):
        return 1
    if any(folded in n for n in names):
        return 2
    return None
