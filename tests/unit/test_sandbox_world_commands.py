"""SandboxWorld.execute_command: each command, its refusals, and its usage errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ai_tools.errors import NotFound
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.sandbox_world_fixtures import (  # noqa: F401 (fixtures)
    ALICE,
    BOB,
    MASON,
    PIP,
    clock_fixture,
    fired,
    store_fixture,
    world_fixture,
)


def run(world: SandboxWorld, char: str, line: str) -> dict[str, Any]:
    """Run a command line; the result dict."""
    return fired(world.execute_command(char, line))


def ok(world: SandboxWorld, char: str, line: str) -> list[str]:
    """Run a command that must succeed; its output lines."""
    result = run(world, char, line)
    assert result["success"], result
    assert result["command"] == line
    return result["output"]


def refused(world: SandboxWorld, char: str, line: str, error: str) -> list[str]:
    """Run a command that must fail with ``error``; its output lines."""
    result = run(world, char, line)
    assert not result["success"], result
    assert result["error"] == error, result
    assert result["output"]
    return result["output"]


def test_look(world: SandboxWorld) -> None:
    """look shows the room, exits, things and people; look <thing> describes it."""
    lines = ok(world, BOB, "look")
    assert lines[0] == "== The Drowned Lantern (room:inn) =="
    assert "Exits: east (to Town Plaza)" in lines
    assert "You see: soup slate" in lines
    assert "Here: Pip" in lines
    assert ok(world, BOB, "l slate")[0] == "soup slate (obj:slate)"
    assert ok(world, BOB, "look east")[-1] == "It leads to Town Plaza."
    assert ok(world, BOB, "look here")[0].startswith("== The Drowned Lantern")
    refused(world, BOB, "look fountain", "not_found")  # not in this room


def test_say_pose_emit(world: SandboxWorld) -> None:
    """say/pose reach the room (with their shortcuts); emit is for builders."""
    heard: list[Any] = []
    world.subscribe(PIP, heard.append)
    assert ok(world, BOB, "say Soup!") == ['You say, "Soup!"']
    assert ok(world, BOB, '"Bread too.') == ['You say, "Bread too."']
    assert ok(world, BOB, ":sits down.") == ["Bob sits down."]
    assert ok(world, BOB, "emote yawns.") == ["Bob yawns."]
    assert [m.kind for m in heard] == ["say", "say", "pose", "pose"]
    refused(world, BOB, "emit The fire roars.", "permission_denied")
    refused(world, BOB, "say", "usage")
    ok(world, MASON, "emit Sawdust swirls.")


def test_whisper_and_page(world: SandboxWorld) -> None:
    """whisper needs the person here; page finds anyone; usage without '='."""
    assert ok(world, BOB, "whisper pip = a secret") == ['You whisper to Pip, "a secret"']
    assert world.heard(PIP)[-1]["kind"] == "whisper"
    refused(world, BOB, "whisper mason = hi", "not_found")
    assert ok(world, BOB, "page mason = need a chair") == ["You page Mason: need a chair"]
    assert world.heard(MASON)[-1]["text"] == "need a chair"
    refused(world, BOB, "page mason", "usage")
    refused(world, BOB, "page nobody = hi", "not_found")


def test_movement(world: SandboxWorld) -> None:
    """go/move and bare exit names or aliases move the character and show the new room."""
    assert ok(world, BOB, "go east")[0] == "== Town Plaza (room:plaza) =="
    assert ok(world, BOB, "n")[0] == "== Old Library (room:library) =="
    assert ok(world, BOB, "move south")[0] == "== Town Plaza (room:plaza) =="
    assert ok(world, BOB, "INN")[0] == "== The Drowned Lantern (room:inn) =="
    refused(world, BOB, "go up", "not_found")
    refused(world, BOB, "go", "usage")


def test_unknown_and_empty_commands(world: SandboxWorld) -> None:
    """Unknown commands and blank lines are answered, not raised."""
    assert refused(world, BOB, "xyzzy", "unknown_command") == [
        "Command 'xyzzy' is not available. Type 'help' for the commands."
    ]
    refused(world, BOB, "   ", "usage")


def test_missing_character_fails(world: SandboxWorld) -> None:
    """Only an unknown acting character fails the Deferred."""
    with pytest.raises(NotFound):
        fired(world.execute_command("char:nobody", "look"))


def test_examine(world: SandboxWorld) -> None:
    """Builders (or owners) see everything; players are refused."""
    lines = ok(world, MASON, "examine obj:slate")
    assert "Owner: char:pip" in lines
    assert '  soup = "fish chowder"' in lines
    assert "Id: obj:slate" in lines
    assert ok(world, PIP, "ex slate")[0] == "Name: soup slate"
    refused(world, BOB, "examine slate", "permission_denied")
    assert "Permissions: Builder" in ok(world, MASON, "examine me")


def test_create_dig_spawn(world: SandboxWorld) -> None:
    """Builders create, dig and spawn; the world holds exactly that."""
    assert ok(world, MASON, "@create rope;coil = A coil of rope.") == [
        "Created rope (obj:rope) in Builders' Workshop."
    ]
    assert world.get_object("obj:rope")["aliases"] == ["coil"]
    lines = ok(world, MASON, "dig Cellar;cellar = down;d, up;u")
    assert lines[0] == "Created room Cellar (room:cellar)."
    assert ok(world, MASON, "d")[0] == "== Cellar (room:cellar) =="
    assert ok(world, MASON, "spawn chair = stool") == ["Spawned stool (obj:stool) from chair."]
    assert world.get_object("obj:stool")["location"] == "room:cellar"
    refused(world, BOB, "create gold", "permission_denied")
    refused(world, BOB, "dig Vault", "permission_denied")
    refused(world, BOB, "spawn chair", "permission_denied")
    refused(world, MASON, "spawn signpost", "permission_denied")
    refused(world, MASON, "spawn dragon", "not_found")
    assert "lantern" in refused(world, MASON, "spawn", "usage")[0]
    refused(world, MASON, "dig", "usage")
    refused(world, MASON, "create = nameless", "usage")


def test_set(world: SandboxWorld) -> None:
    """set parses JSON values (text otherwise), shows a value, deletes with an empty value."""
    assert ok(world, MASON, "set bench/legs = 4") == ["Set workbench (obj:workbench)/legs = 4"]
    assert world.get_attributes("obj:workbench")["legs"] == 4
    ok(world, MASON, "set bench/label = oak, old")
    assert world.get_attributes("obj:workbench")["label"] == "oak, old"
    ok(world, MASON, 'set bench/parts = ["vice", "drawer"]')
    assert world.get_attributes("obj:workbench")["parts"] == ["vice", "drawer"]
    assert ok(world, MASON, "set bench/legs") == ["workbench (obj:workbench)/legs = 4"]
    assert ok(world, MASON, "set bench/legs =") == ["Deleted workbench (obj:workbench)/legs."]
    refused(world, MASON, "set bench/legs", "not_found")
    refused(world, MASON, "set bench/legs =", "not_found")
    refused(world, MASON, "set bench = 4", "usage")
    refused(world, MASON, "set bench/_hidden = 1", "permission_denied")
    refused(world, BOB, "set obj:workbench/legs = 3", "permission_denied")
    assert "legs" not in world.get_attributes("obj:workbench")


def test_tag(world: SandboxWorld) -> None:
    """tag adds (with category), lists, and removes with /del."""
    assert ok(world, MASON, "tag bench = sturdy:quality") == [
        "Tagged workbench (obj:workbench) with sturdy:quality."
    ]
    assert ok(world, MASON, "tag bench") == ["Tags on workbench (obj:workbench): sturdy:quality"]
    ok(world, MASON, "tag/del bench = sturdy:quality")
    assert world.get_tags("obj:workbench") == []
    refused(world, MASON, "tag/del bench = sturdy", "not_found")
    refused(world, BOB, "tag slate = mine", "permission_denied")
    refused(world, MASON, "tag", "usage")


def test_desc(world: SandboxWorld) -> None:
    """desc sets one's own description, or a thing's with edit rights."""
    ok(world, BOB, "desc A fisherman with a fine beard.")
    assert world.get_object(BOB)["description"] == "A fisherman with a fine beard."
    ok(world, PIP, "desc slate = Chalk: leek soup.")
    assert world.get_object("obj:slate")["description"] == "Chalk: leek soup."
    refused(world, BOB, "desc slate = Free beer!", "permission_denied")
    refused(world, BOB, "desc", "usage")


def test_ambiguous_names(world: SandboxWorld) -> None:
    """A name matching several things equally asks for an id."""
    fired(world.create_object(MASON, "red box"))
    fired(world.create_object(MASON, "red bag"))
    output = refused(world, MASON, "examine red", "ambiguous")
    assert "obj:red-box" in output[0] and "obj:red-bag" in output[0]


def test_inventory_channel_help(world: SandboxWorld) -> None:
    """inventory, channel list/post/join/leave, help list and topic."""
    assert ok(world, BOB, "i") == ["You are not carrying anything."]
    fired(world.create_object(MASON, "hammer", location=MASON))
    assert ok(world, MASON, "inventory") == ["You are carrying: hammer"]
    assert ok(world, BOB, "channel")[0].startswith("builders:")
    assert ok(world, BOB, "channel public = hello") == ["[public] Bob: hello"]
    refused(world, BOB, "channel nowhere = hello", "not_found")
    refused(world, BOB, "channel public", "usage")
    assert ok(world, BOB, "channel/join builders") == ["You joined builders."]
    assert BOB in fired(world.channel_send(ALICE, "builders", "hi"))
    assert ok(world, BOB, "channel/leave builders") == ["You left builders."]
    assert ok(world, BOB, "channel/leave builders") == ["Nothing to do: already left."]
    assert ok(world, BOB, "help")[0].startswith("Commands: ")
    assert ok(world, BOB, "help dig")[0] == "== building =="
    refused(world, BOB, "help qwertyuiop", "not_found")


def test_the_commands_need_only_the_world_they_are_given() -> None:
    """commands does not import the sandbox module, not even for type checking (no import
    cycle): it works on any world with the CommandWorld methods and the objects' API."""
    import ast

    import ai_tools.world.commands as commands

    tree = ast.parse(Path(commands.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert "ai_tools.world.sandbox" not in imported
    assert not [name for name in imported if name and name.endswith(".sandbox")]
