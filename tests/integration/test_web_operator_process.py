"""The operator's API against real ``twistd ai-assistant`` processes restarted on one SQLite file.

What is created, reconfigured and removed over HTTP is what the next start
brings back (the store keeps it; the config file only seeds), and an edit of
the config file is applied at the next start without undoing the API's
changes to other keys.  Message numbers rise across restarts; a changed world
file is said at start-up and applied only on purpose.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import treq

from tests.integration.web_processes import (
    TWISTD,
    WORLD,
    assert_stopped_by,
    disabled_pip,
    start_and_wait,
    twistd_processes,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")


async def call(method: str, url: str, **kw: Any) -> tuple[int, Any]:
    response = await treq.request(method, url, **kw)
    return response.code, await response.json()


async def restart(proc: Any, start: Any, tmp_path: Path, config: Path, kill: bool) -> Any:
    proc.signal("KILL" if kill else "TERM")
    await proc.wait_ended()
    if not kill:
        assert_stopped_by(proc, signal.SIGTERM)
    return await start_and_wait(start, tmp_path, config)


@pytest_twisted.ensureDeferred
async def test_the_store_keeps_what_the_api_did(tmp_path: Path,
                                                twistd_processes: Any) -> None:  # noqa: F811
    config = disabled_pip(tmp_path)
    proc, base = await start_and_wait(twistd_processes, tmp_path, config)
    code, created = await call("POST", f"{base}/assistants", json={
        "name": "ada", "character_id": "char:alice", "persona": "You are Ada.",
        "enabled": False})
    assert code == 201, created
    code, changed = await call("PATCH", f"{base}/assistants/pip", json={"tick_rate": 11.0})
    assert code == 200 and changed["changed"] == ["tick_rate"], changed

    # SIGKILL: what was answered is saved
    proc, base = await restart(proc, twistd_processes, tmp_path, config, kill=True)
    code, listed = await call("GET", f"{base}/assistants")
    assert sorted(a["name"] for a in listed["assistants"]) == ["ada", "pip"]
    code, pip = await call("GET", f"{base}/assistants/pip/config")
    assert pip["config"]["tick_rate"] == 11.0  # the store's, not the file's 5.0
    code, removed = await call("DELETE", f"{base}/assistants/pip")
    assert code == 200 and removed["removed"] is True

    proc, base = await restart(proc, twistd_processes, tmp_path, config, kill=False)
    code, listed = await call("GET", f"{base}/assistants")
    assert [a["name"] for a in listed["assistants"]] == ["ada"]  # the file's pip stays removed
    assert "removed over the API" in proc.stdout
    code, again = await call("POST", f"{base}/assistants",
                             json={"name": "pip", "character_id": "char:pip",
                                   "enabled": False})
    assert code == 201 and again["config"]["tick_rate"] == 5.0

    # an edit of the file is applied at the next start; the API's keys stay
    await call("PATCH", f"{base}/assistants/pip", json={"tick_rate": 12.0})
    config.write_text(config.read_text().replace('persona = "You are Pip, the innkeeper."',
                                                 'persona = "You are Pip. Be brief."'))
    proc, base = await restart(proc, twistd_processes, tmp_path, config, kill=False)
    code, pip = await call("GET", f"{base}/assistants/pip/config")
    assert pip["config"]["persona"] == "You are Pip. Be brief."
    assert pip["config"]["tick_rate"] == 12.0
    assert "the config file changed persona" in proc.stdout
    proc.signal("TERM")
    await proc.wait_ended()
    assert_stopped_by(proc, signal.SIGTERM)


async def page_bob(base: str, text: str) -> int:
    code, _ = await call("POST", f"{base}/messages", json={
        "character": "char:alice", "kind": "page", "target": "char:bob", "text": text})
    return code


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
@pytest_twisted.ensureDeferred
async def test_heard_after_seq_never_misses_a_message_across_a_restart(
        tmp_path: Path, twistd_processes: Any, kill: bool) -> None:  # noqa: F811
    """A player polls with the last seq it saw; the service restarts; what it heard before
    is still there (each message was acknowledged once in the store's heard log), and the
    next message it is paged has a higher seq, so the same poll shows it (before: numbering
    restarted at 1 and ``after=SEQ`` hid every new message until the count caught up)."""
    config = disabled_pip(tmp_path)
    proc, base = await start_and_wait(twistd_processes, tmp_path, config)
    for n in range(3):
        assert await page_bob(base, f"before {n}") == 200
    code, heard = await call("GET", f"{base}/characters/char:bob/heard")
    last = heard["messages"][-1]["seq"]
    assert [m["text"] for m in heard["messages"]] == ["before 0", "before 1", "before 2"]

    proc, base = await restart(proc, twistd_processes, tmp_path, config, kill=kill)
    code, kept = await call("GET", f"{base}/characters/char:bob/heard")
    assert kept["messages"] == heard["messages"]  # acknowledged, so kept: even by SIGKILL
    assert await page_bob(base, "after the restart") == 200
    code, heard = await call("GET", f"{base}/characters/char:bob/heard?after={last}")
    assert code == 200
    assert [m["text"] for m in heard["messages"]] == ["after the restart"]
    assert heard["messages"][0]["seq"] > last
    proc.signal("TERM")
    await proc.wait_ended()


@pytest_twisted.ensureDeferred
async def test_a_changed_world_file_is_said_then_applied_on_purpose(
        tmp_path: Path, twistd_processes: Any) -> None:  # noqa: F811
    """Start-up says the file changed and does not apply it; POST /world/apply merges it;
    Pip keeps what it heard; the next start says nothing."""
    world = tmp_path / "world.toml"
    world.write_text(WORLD.read_text())
    config = disabled_pip(tmp_path)
    config.write_text(config.read_text().replace(json.dumps(str(WORLD)),
                                                 json.dumps(str(world))))
    proc, base = await start_and_wait(twistd_processes, tmp_path, config)
    code, _ = await call("POST", f"{base}/messages",
                         json={"character": "char:bob", "text": "Remember me, Pip"})
    assert code == 200
    world.write_text(world.read_text() + '\n[[rooms]]\nid = "room:cellar2"\n'
                     'key = "Wine Cellar"\ndescription = "Casks."\n')

    proc, base = await restart(proc, twistd_processes, tmp_path, config, kill=False)
    assert "changed since the world was seeded" in proc.stdout
    code, index = await call("GET", f"{base}/")
    assert index["world_file_changed"] is True
    code, rooms = await call("GET", f"{base}/world/rooms")
    assert "room:cellar2" not in [r["id"] for r in rooms["rooms"]]
    code, bad = await call("POST", f"{base}/world/apply", json={"mode": "replace"})
    assert code == 422 and bad["field"] == "mode"
    code, applied = await call("POST", f"{base}/world/apply", json={"mode": "merge"})
    assert code == 200 and applied["mode"] == "merge", applied
    code, rooms = await call("GET", f"{base}/world/rooms")
    assert "room:cellar2" in [r["id"] for r in rooms["rooms"]]
    code, pip = await call("GET", f"{base}/assistants/pip")
    assert pip["pending_events"] == 1  # what Pip heard is kept

    proc, base = await restart(proc, twistd_processes, tmp_path, config, kill=False)
    assert "changed since the world was seeded" not in proc.stdout
    code, rooms = await call("GET", f"{base}/world/rooms")
    assert "room:cellar2" in [r["id"] for r in rooms["rooms"]]
    proc.signal("TERM")
    await proc.wait_ended()
