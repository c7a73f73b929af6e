"""WorldObjects: the objects of a world, where they are, and the reads a lookup relied on."""

from __future__ import annotations

import pytest

from ai_tools.errors import NotFound
from ai_tools.world.model import WorldObject
from ai_tools.world.objects import WorldObjects


def world() -> WorldObjects:
    objects = WorldObjects()
    lost = objects.replace([
        WorldObject(id="room:inn", key="Inn", kind="room"),
        WorldObject(id="char:pip", key="Pip", kind="character", location="room:inn"),
        WorldObject(id="obj:mug", key="mug", kind="object", location="char:pip"),
        WorldObject(id="exit:inn-east", key="east", kind="exit", location="room:inn",
                    destination="room:yard", aliases=["e"]),
        WorldObject(id="obj:ghost", key="ghost", kind="object", location="room:gone"),
    ])
    assert [o.id for o in lost] == ["obj:ghost"]  # its place is missing: now nowhere
    return objects


def test_lookups() -> None:
    objects = world()
    pip = objects.character("char:pip")
    assert objects.room_of(pip).id == "room:inn"
    assert [o.id for o in objects.inside("room:inn")] == ["char:pip", "exit:inn-east"]
    assert objects.find_exit(pip, "E") is objects.get("exit:inn-east")
    assert [o.id for o in objects.search("mu", "char:pip", None, None, 5)] == ["obj:mug"]
    assert objects.get(3) is None and "obj:ghost" in objects and len(objects) == 5
    with pytest.raises(NotFound, match="'obj:mug' is a object, not a character"):
        objects.character("obj:mug")
    with pytest.raises(NotFound, match="no location with id 'room:nowhere'"):
        objects.require("room:nowhere", "location")


def test_on_read_hears_what_a_lookup_relied_on() -> None:
    objects = world()
    reads: list[str | None] = []
    objects.on_read = reads.append
    pip = objects.character("char:pip")
    objects.room_of(pip)
    objects.find_exit(pip, "east")
    objects.search("mug", "char:pip", "char:pip", None, 5)
    objects.get("obj:mug")  # a plain get is not a read anything relies on
    assert reads == ["char:pip", "room:inn", "room:inn", "char:pip", "room:inn", "char:pip",
                     "char:pip"]


def test_put_and_remove_keep_the_contents_right() -> None:
    objects = world()
    moved = WorldObject(id="obj:mug", key="mug", kind="object", location="room:inn")
    objects.put(moved)  # a newer version of the mug, now on the floor
    assert [o.id for o in objects.inside("char:pip")] == []
    assert [o.id for o in objects.inside("room:inn")][-1] == "obj:mug"
    objects.put(WorldObject(id="obj:mug", key="big mug", kind="object", location="room:inn"))
    assert [o.id for o in objects.inside("room:inn")].count("obj:mug") == 1
    assert objects.remove("obj:mug") is not None and objects.remove("obj:mug") is None
    assert "obj:mug" not in [o.id for o in objects.inside("room:inn")]
    objects.place(objects.require("char:pip"), None)
    assert objects.inside("room:inn") == [objects.require("exit:inn-east")]
