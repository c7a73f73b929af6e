"""Who may do what in the sandbox world.

Characters hold permissions from Evennia's hierarchy
(Guest < Player < Helper < Builder < Admin < Developer); holding one implies
all below it.  Other strings (e.g. ``"emit"``) are custom permissions held
exactly.  The rules:

* **edit an object** (set/delete attributes, add/remove tags, change its
  description): the character itself, the object's owner (whoever created or
  spawned it, or the ``owner`` the world file gives), a Builder for rooms,
  exits and objects, an Admin for other characters;
* **tags in the ``system`` category**: Developer only;
* **build** (create, dig, spawn, emit): Builder; a prototype may ask for a
  higher permission with its ``permission`` field;
* **post on a channel**: anyone, unless the channel has a ``send_permission``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ai_tools.world.model import PERMISSION_HIERARCHY, WorldObject, permission_rank

BUILDER = "Builder"
ADMIN = "Admin"
DEVELOPER = "Developer"
SYSTEM_TAG_CATEGORY = "system"


def highest_rank(permissions: Iterable[str]) -> int:
    """The rank of the highest hierarchical permission held (-1 when none)."""
    return max((permission_rank(p) for p in permissions), default=-1)


def holds(permissions: Iterable[str], permission: str) -> bool:
    """Whether a holder of ``permissions`` has ``permission`` (hierarchy applies)."""
    held = list(permissions)
    needed = permission_rank(permission)
    if needed >= 0:
        return highest_rank(held) >= needed
    folded = permission.casefold()
    return any(p.casefold() == folded for p in held)


def may_edit(char: WorldObject, obj: WorldObject) -> bool:
    """Whether ``char`` may change ``obj`` (the edit rule above)."""
    if obj.id == char.id or (obj.owner is not None and obj.owner == char.id):
        return True
    if obj.kind == "character":
        return holds(char.permissions, ADMIN)
    return holds(char.permissions, BUILDER)


__all__ = [
    "ADMIN",
    "BUILDER",
    "DEVELOPER",
    "PERMISSION_HIERARCHY",
    "SYSTEM_TAG_CATEGORY",
    "highest_rank",
    "holds",
    "may_edit",
]
