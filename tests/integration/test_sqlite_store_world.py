"""The sandbox world on a real SQLite file: seeded once, changed, reopened intact."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest_twisted

from ai_tools.store.sqlite import SQLiteStore
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.sandbox_world_fixtures import BOB, EXAMPLE, MASON


@pytest_twisted.ensureDeferred
async def test_world_survives_restart_on_sqlite(tmp_path: Path) -> None:
    """Seed from the example file, change the world, close; a new store and world see it."""
    path = str(tmp_path / "world.sqlite")
    store = SQLiteStore(path)
    await store.open()
    try:
        world = await SandboxWorld.load(store, seed=EXAMPLE)
        await world.set_attribute(MASON, "obj:fountain", "wishes", {"granted": 2})
        await world.execute_command(MASON, "dig Cellar;cellar = down, up")
        spawned = await world.spawn_prototype(MASON, "lantern", overrides={"key": "red lamp"})
        await world.move_character(BOB, "east")
        await world.add_tag(MASON, spawned["id"], "lit", "state")
        before = world.snapshot()
    finally:
        await store.close()

    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT json_extract(data, '$.location') FROM world_objects WHERE id = ?", (BOB,)
        ).fetchall()
        assert rows == [("room:plaza",)]
    finally:
        conn.close()

    again = SQLiteStore(path)
    await again.open()
    try:
        # A different seed is ignored: the saved world is the truth.
        world2 = await SandboxWorld.load(again, seed={"objects": []})
        assert world2.snapshot() == before
        assert world2.get_attributes("obj:fountain")["wishes"] == {"granted": 2}
        assert world2.find_exit(MASON, "down")["destination"] == "room:cellar"
        assert world2.get_tags(spawned["id"]) == [
            {"tag": "light", "category": None},  # from the prototype
            {"tag": "lit", "category": "state"},
        ]
        assert world2.get_object(BOB)["location"] == "room:plaza"
        assert await again.integrity_check() == "ok"
    finally:
        await again.close()
