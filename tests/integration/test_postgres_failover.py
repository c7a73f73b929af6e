"""Failover with real processes: two ``twistd ai-assistant`` workers on one throwaway
PostgreSQL, players speaking through the workers' HTTP APIs, one worker SIGKILLed
with a model call in flight.  Its assistant resumes on the other worker once the
lease expires, with a valid history and every message answered; the epochs logged
with each write (in the database) show no assistant written by two workers at once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest_twisted

from tests.integration.conftest import PostgresDatabase
from tests.integration.test_postgres_workers import assert_one_owner_at_a_time
from tests.integration.twistd_process import (
    WORLD,
    Twistd,
    assert_stopped_by,
    get_json,
    http,
    post_json,
    processes,
    sleep,
    until,
)

__all__ = ["http", "processes"]

# Every model request takes 0.6 s (a model call in flight is easy to hit), and the
# answer is one `say` (which ends the turn) quoting what was heard.  The call's id is
# the same in every answer, as with models that number their calls per answer: the
# engine renumbers it where the history holds it already, and a say the new owner
# makes again after a failover (the same answer to the same saved history) keeps
# its effect key, so it is not delivered twice.
SCENARIO = """
[default]
latency = 0.6

[[default.tool_calls]]
id = "call_say"
name = "say"
arguments = { message = "About {user_message}: noted." }
"""

TTL = 2.0


def write_worker(directory: Path, db: PostgresDatabase) -> Path:
    directory.mkdir()
    (directory / "scenario.toml").write_text(SCENARIO)
    config = directory / "assistant.toml"
    config.write_text(f"""
[service]
tick_interval = 0.1
min_tick_rate = 0.05
stop_grace = 3.0

[store]
backend = "postgres"
dsn = {json.dumps(db.dsn)}

[workers]
lease_ttl = {TTL}
lease_interval = 0.4

[world]
file = {json.dumps(str(WORLD))}

[models.default]
scenario = "scenario.toml"

[http]
listen = "127.0.0.1:0"

[[assistants]]
name = "pip"
character_id = "char:pip"
tick_rate = 0.2

[[assistants]]
name = "mason"
character_id = "char:mason"
tick_rate = 0.2
""")
    return config


def start_worker(start: Callable[..., Twistd], tmp_path: Path, name: str,
                 db: PostgresDatabase) -> Twistd:
    directory = tmp_path / name
    config = write_worker(directory, db)
    return start(directory, config, "--worker-name", name,
                 env={"AI_TOOLS_DB_PASSWORD": db.password})


async def api_of(proc: Twistd) -> str:
    """The worker's API address, once it is ready."""
    match = await proc.wait_for(r"HTTP API listening on http://(127\.0\.0\.1:\d+)/")
    await proc.wait_for(r"ai_tools service ready")
    return f"http://{match.group(1)}"


def owners(db: PostgresDatabase) -> dict[str, str]:
    """The live lease of each assistant: ``{assistant: worker}`` (read in the database)."""
    rows = db.sql("SELECT name, worker FROM assistant_leases WHERE expires_at > 0")
    return dict(rows)


def said(heard: dict[str, Any], speaker: str) -> list[str]:
    return [m["text"] for m in heard["messages"] if m.get("sender_id") == speaker]


def assert_valid_history(history: list[dict[str, Any]]) -> None:
    """Every tool call the model made has exactly one answer."""
    asked = [c["id"] for m in history if m.get("role") == "assistant"
             for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in history if m.get("role") == "tool"]
    assert sorted(asked) == sorted(answered), history


def assert_no_world_effect_twice(db: PostgresDatabase) -> None:
    """In the database: no assistant's words stored twice.

    Each answer of the scenario quotes the line it answers, so one text twice
    from one speaker would be one call delivered twice."""
    twice = db.sql("SELECT data::json ->> 'sender_id', data::json ->> 'text', count(*)"
                   " FROM world_messages WHERE data::json ->> 'sender_id' = ANY(%s)"
                   " GROUP BY 1, 2 HAVING count(*) > 1", (["char:pip", "char:mason"],))
    assert twice == [], twice


@pytest_twisted.ensureDeferred
async def test_a_killed_workers_assistants_resume_on_the_other(
    tmp_path: Path, postgres_db: PostgresDatabase, processes: Any, http: Any
) -> None:
    one = start_worker(processes, tmp_path, "w1", postgres_db)
    two = start_worker(processes, tmp_path, "w2", postgres_db)  # both start at once
    url_one, url_two = await api_of(one), await api_of(two)
    try:
        await until(lambda: sorted(owners(postgres_db).values()) == ["w1", "w2"],
                    "one assistant on each worker", limit=20)
    except AssertionError:
        raise AssertionError(f"{owners(postgres_db)}\n{one.stdout}\n{two.stdout}") from None
    lease = owners(postgres_db)
    victim, survivor = (one, two) if lease["pip"] == "w1" else (two, one)
    victim_url, survivor_url = (url_one, url_two) if victim is one else (url_two, url_one)
    survivor_name = "w2" if victim is one else "w1"

    # Bob speaks through the survivor's API; the victim (Pip's owner) hears it and
    # starts a model call: kill it while that call is in flight.
    await post_json(http, f"{survivor_url}/messages",
                    {"character": "char:bob", "text": "first soup"})
    await post_json(http, f"{victim_url}/messages", {"character": "char:alice",
                                                     "kind": "page", "target": "char:mason",
                                                     "text": "first nails"})

    async def pip_in_a_model_call() -> bool:
        status = await get_json(http, f"{victim_url}/assistants/pip")
        return bool(status["ticking"]) and status["pending_events"] == 0

    for _ in range(400):
        if await pip_in_a_model_call():
            break
        await sleep(0.01)
    else:
        raise AssertionError("Pip never started its model call")
    victim.signal("KILL")
    await victim.wait_ended()
    # While nobody runs Pip (its lease not expired yet), Bob speaks again.
    await post_json(http, f"{survivor_url}/messages",
                    {"character": "char:bob", "text": "second soup"})

    async def bob_heard_both() -> bool:
        heard = await get_json(http, f"{survivor_url}/characters/char:bob/heard?limit=50")
        return any("second soup" in t for t in said(heard, "char:pip"))

    answered = False
    for _ in range(400):  # bounded: the lease expires after TTL, then one model call each
        answered = await bob_heard_both()
        if answered:
            break
        await sleep(0.05)
    assert answered, survivor.stdout
    assert owners(postgres_db) == {"pip": survivor_name, "mason": survivor_name}

    history = (await get_json(http, f"{survivor_url}/assistants/pip/history"))["messages"]
    assert_valid_history(history)
    # Each of Bob's lines reached Pip's model exactly once: the first one heard (and
    # saved) by the killed worker, the second one, spoken while nobody ran Pip, heard
    # again by the new owner from the world's log after the saved state's last message.
    heard_lines = [m["content"] for m in history if m.get("role") == "user"]
    assert sum("first soup" in str(t) for t in heard_lines) == 1, history
    assert sum("second soup" in str(t) for t in heard_lines) == 1, history
    mason = (await get_json(http, f"{survivor_url}/assistants/mason/history"))["messages"]
    assert "first nails" in json.dumps(mason)  # paged through the victim, kept by the survivor
    assert_valid_history(mason)

    assert_no_world_effect_twice(postgres_db)
    writes = postgres_db.sql("SELECT seq, name, worker, epoch FROM assistant_writes ORDER BY seq")
    assert_one_owner_at_a_time(writes)
    pip_writers = [(w, e) for _, n, w, e in writes if n == "pip"]
    assert pip_writers[-1] == (survivor_name, max(e for _, e in pip_writers))
    assert len({w for w, _ in pip_writers}) == 2  # written by both, one after the other

    # A rolling restart: SIGTERM saves, then releases the leases at once.
    survivor.signal("TERM")
    await survivor.wait_ended()
    assert_stopped_by(survivor, 15)
    assert owners(postgres_db) == {}
    assert "released 2 lease(s)" in survivor.stdout

