"""The world file loader: the example loads; each kind of mistake is one clear line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ai_tools.errors import ConfigError
from ai_tools.world.worldfile import load_world_file, parse_world
from tests.unit.sandbox_world_fixtures import EXAMPLE

BASE = """
[world]
name = "Tiny"
start_room = "room:a"

[[rooms]]
id = "room:a"
key = "A"

[[rooms]]
id = "room:b"
key = "B"
"""


def write(tmp_path: Path, text: str) -> Path:
    """A world file with ``text``."""
    path = tmp_path / "world.toml"
    path.write_text(text, encoding="utf-8")
    return path


def objects_by_id(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The object rows by id."""
    return {o["id"]: o for o in data["objects"]}


def test_example_world_loads() -> None:
    """examples/world.toml is valid and has what the docs promise."""
    data = load_world_file(EXAMPLE)
    objects = objects_by_id(data)
    kinds = [o["kind"] for o in data["objects"]]
    assert kinds.count("room") >= 3
    assert kinds.count("exit") >= 4
    assert objects["char:mason"]["permissions"] == ["Builder"]
    assert {"tag": "assistant", "category": "role"} in objects["char:pip"]["tags"]
    assert [c["key"] for c in data["channels"]] == ["public", "builders"]
    assert len(data["prototypes"]) >= 2
    assert len(data["help"]) >= 2
    assert data["meta"]["name"] == "Saltmarsh"
    assert data["meta"]["seeded_from"] == "world.toml"


def test_defaults_ids_back_exits_and_subscribers(tmp_path: Path) -> None:
    """Ids default from keys; 'back' makes the return exit; characters start in start_room."""
    data = load_world_file(
        write(
            tmp_path,
            BASE
            + """
[[exits]]
key = "East Gate"
from = "room:a"
to = "room:b"
back = "west"
back_aliases = ["w"]

[[characters]]
key = "Zed Smith"

[[objects]]
key = "Lamp"
location = "char:zed-smith"

[[channels]]
key = "ooc"
""",
        ),
    )
    objects = objects_by_id(data)
    assert objects["exit:a-east-gate"]["destination"] == "room:b"
    assert objects["exit:b-west"]["destination"] == "room:a"
    assert objects["exit:b-west"]["aliases"] == ["w"]
    assert objects["char:zed-smith"]["location"] == "room:a"
    assert objects["obj:lamp"]["location"] == "char:zed-smith"
    assert data["channels"] == [
        {
            "key": "ooc",
            "description": "",
            "subscribers": ["char:zed-smith"],
            "send_permission": None,
            "auto_join": True,
        }
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            '[[rooms]]\nid = "room:c"\nkey = "C"\ndescripton = "typo"\n',
            "rooms[2].descripton: unknown key",
        ),
        ('[[rooms]]\nid = "room:c"\nkey = 3\n', "rooms[2].key: must be a non-empty string"),
        ('[[rooms]]\nid = "room:c"\n', "rooms[2]: missing required key 'key'"),
        ('[[rooms]]\nid = "room:a"\nkey = "Again"\n', "rooms[2].id: duplicate id 'room:a'"),
        ('[[rooms]]\nid = "room c"\nkey = "C"\n', "rooms[2].id: must not contain white space"),
        (
            '[[exits]]\nkey = "up"\nfrom = "room:a"\nto = "room:zzz"\n',
            "exits[0].to: no room with id 'room:zzz'",
        ),
        (
            '[[objects]]\nid = "obj:x"\nkey = "x"\nlocation = "room:a"\n'
            '[[exits]]\nkey = "in"\nfrom = "room:a"\nto = "obj:x"\n',
            "exits[0].to: 'obj:x' is a object, not a room",
        ),
        (
            '[[exits]]\nkey = "up"\nfrom = "room:a"\nto = "room:b"\nback_aliases = ["d"]\n',
            "back_aliases/back_id need 'back'",
        ),
        (
            '[[characters]]\nkey = "Q"\nlocation = "room:nowhere"\n',
            "characters[0].location: no room with id 'room:nowhere'",
        ),
        (
            '[[characters]]\nkey = "Q"\npermissions = "Builder"\n',
            "characters[0].permissions: must be a list of non-empty strings",
        ),
        (
            '[[objects]]\nid = "obj:a"\nkey = "a"\nlocation = "obj:b"\n'
            '[[objects]]\nid = "obj:b"\nkey = "b"\nlocation = "obj:a"\n',
            "contain each other in a loop",
        ),
        ('[[objects]]\nkey = "x"\nowner = "char:ghost"\n', "no character with id 'char:ghost'"),
        ('[[objects]]\nkey = "x"\ntags = [3]\n', "objects[0].tags: must be a list of tags"),
        (
            '[[channels]]\nkey = "c"\nsubscribers = ["char:ghost"]\n',
            "channels[0].subscribers: no character with id 'char:ghost'",
        ),
        ('[[channels]]\nkey = "c"\n[[channels]]\nkey = "C"\n', "duplicate channel 'C'"),
        (
            '[[prototypes]]\nkey = "p"\nkind = "room"\n',
            "prototypes[0].kind: must be 'object' or 'character'",
        ),
        ('[[help]]\nkey = "h"\n', "help[0]: missing required key 'text'"),
        ("[[monsters]]\nkey = 'orc'\n", "monsters: unknown section"),
        ("rooms = 3\n", "rooms: must be an array of tables"),
    ],
)
def test_mistakes_are_one_clear_line(tmp_path: Path, extra: str, message: str) -> None:
    """Each mistake raises ConfigError naming the file and the key."""
    path = write(tmp_path, extra if extra.startswith("rooms =") else BASE + extra)
    with pytest.raises(ConfigError) as info:
        load_world_file(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(str(path) + ": ")
    assert message in text


def test_world_table_mistakes(tmp_path: Path) -> None:
    """Unknown [world] keys and a start_room that is not a room."""
    with pytest.raises(ConfigError, match=r"world\.colour: unknown key"):
        load_world_file(write(tmp_path, BASE.replace('name = "Tiny"', 'colour = "red"')))
    bad_start = BASE.replace('start_room = "room:a"', 'start_room = "room:zz"')
    with pytest.raises(ConfigError, match=r"world\.start_room: no room"):
        load_world_file(write(tmp_path, bad_start))


def test_file_problems(tmp_path: Path) -> None:
    """Missing file, a directory, broken TOML."""
    with pytest.raises(ConfigError, match="world file not found"):
        load_world_file(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_world_file(tmp_path)
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_world_file(write(tmp_path, "[[rooms]\nkey = "))


def test_things_need_a_room() -> None:
    """Characters without any room are refused; an empty world is fine."""
    with pytest.raises(ConfigError, match="needs at least one room"):
        parse_world({"characters": [{"key": "Lonely"}]}, "inline")
    empty = parse_world({}, "inline")
    assert empty["objects"] == []
    assert empty["meta"]["start_room"] is None
