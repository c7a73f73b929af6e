"""The standalone service on PostgreSQL: two service trees (two workers) on one database,
each with its real HTTP API on 127.0.0.1; the password comes from the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer

from ai_tools.standalone.app import StandaloneService, build_service
from ai_tools.standalone.config import Overrides, parse_config
from ai_tools.world.shared import SharedWorld
from tests.integration.conftest import PostgresDatabase

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "examples" / "world.toml"


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


def worker(tmp_path: Path, db: PostgresDatabase) -> StandaloneService:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text("turns = []\n")
    config = parse_config({
        "store": {"backend": "postgres", "dsn": db.dsn},
        "world": {"file": str(WORLD)},
        "models": {"default": {"scenario": str(scenario)}},
        "assistants": [],
        "http": {"listen": "127.0.0.1:0"},
    }, source="test.toml", base=tmp_path,
        overrides=Overrides(environ={"AI_TOOLS_DB_PASSWORD": db.password}))
    return build_service(config, reactor=reactor())


@pytest_twisted.ensureDeferred
async def test_a_message_posted_to_one_worker_is_heard_on_the_other(
    tmp_path: Path, postgres_db: PostgresDatabase
) -> None:
    """Bob speaks through worker 1's API (answered once durable); worker 2's API shows
    what Pip heard; both run the shared world; stopping closes everything."""
    import treq
    from twisted.web.client import Agent, HTTPConnectionPool

    one, two = worker(tmp_path, postgres_db), worker(tmp_path, postgres_db)
    pool = HTTPConnectionPool(reactor(), persistent=False)
    client = treq.client.HTTPClient(Agent(reactor(), pool=pool))  # type: ignore[arg-type]
    try:
        one.startService()
        two.startService()
        await defer.gatherResults([one.when_ready(), two.when_ready()])
        assert isinstance(one.world, SharedWorld) and isinstance(two.world, SharedWorld)
        assert one.world.snapshot() == two.world.snapshot()
        posted = await client.post(f"http://{one.addresses['http']}/messages",
                                   json={"character": "char:bob", "text": "Soup, please."})
        assert posted.code == 200, await posted.text()
        assert (await posted.json())["heard_by"] == ["char:pip"]
        await two.world.catch_up()
        heard = await client.get(f"http://{two.addresses['http']}/characters/char:pip/heard")
        assert heard.code == 200
        lines = [m["line"] for m in (await heard.json())["messages"]]
        assert lines == ['Bob says, "Soup, please."']
    finally:
        await pool.closeCachedConnections()
        await one.stopService()
        await two.stopService()
    assert not one.store.is_open and not two.store.is_open
