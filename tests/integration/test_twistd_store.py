"""The SQLite file under a real ``twistd ai-assistant``: two services on one file, a file
deleted while running, damaged or read-only files at start — each one clear line."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from tests.integration.test_sqlite_store_file import damage, make_read_only
from tests.integration.twistd_process import (
    SCENARIO_MODEL,
    TWISTD,
    assert_one_line_failure,
    assert_stopped_by,
    get_json,
    http,
    post_json,
    processes,
    read_db,
    start_and_wait,
    write_config,
    write_scenario,
)

__all__ = ["http", "processes"]  # fixtures

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")


def service_config(directory: Path, db: Path | None = None) -> Path:
    """A config with the scripted model in ``directory``; its store at ``db`` if given."""
    write_scenario(directory)
    if db is None:
        return write_config(directory, models=SCENARIO_MODEL)
    return write_config(directory, models=SCENARIO_MODEL, db=str(db))


@pytest_twisted.ensureDeferred
async def test_a_second_service_on_the_same_file_refuses_to_start(tmp_path: Path,
                                                                  processes: Any,
                                                                  http: Any) -> None:
    """Two real processes: the second says in one line who holds the file and exits 1; the
    first goes on serving, its state untouched."""
    db = tmp_path / "shared.sqlite"
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first, base = await start_and_wait(processes, first_dir, service_config(first_dir, db))
    pid = int((tmp_path / "shared.sqlite.lock").read_text())
    assert pid == first.transport.pid

    second = processes(second_dir, service_config(second_dir, db))
    await second.wait_ended()
    line = assert_one_line_failure(
        second, f"cannot open the store: {db} is in use by another process (pid {pid})",
        f"{db}.lock", "--db")
    assert second.exit_code == 1, line
    assert "ai_tools service stopped" in second.stdout  # it closed what it had started

    await post_json(http, f"{base}/messages", {"character": "char:bob", "text": "still there?"})
    status = await get_json(http, f"{base}/assistants")
    assert status["service"]["store"]["problem"] is None
    first.signal("TERM")
    await first.wait_ended()
    assert_stopped_by(first, signal.SIGTERM)
    integrity, state, _ = read_db(db)
    assert integrity == "ok"
    assert "still there?" in str(state)


@pytest_twisted.ensureDeferred
async def test_a_database_deleted_while_running_is_noticed(tmp_path: Path, processes: Any,
                                                          http: Any) -> None:
    """Deleted: logged as an error, shown in the status, and every write fails loudly
    instead of going to the unlinked file; put back, the service writes again."""
    config = service_config(tmp_path)
    proc, base = await start_and_wait(processes, tmp_path, config)
    db = tmp_path / "state" / "assistants.sqlite"
    kept = tmp_path / "kept.sqlite"
    os.link(db, kept)
    db.unlink()

    # spoken, but not acknowledged: what Pip heard cannot be saved (503, saying why)
    said = await http.post(f"{base}/messages", headers={"Content-Type": "application/json"},
                           data=json.dumps({"character": "char:bob", "text": "hello?"}).encode())
    assert said.code == 503
    assert "deleted or moved away" in (await said.json())["error"]
    await proc.wait_for(r"Could not save the state of pip: .*deleted or moved away")
    status = await get_json(http, f"{base}/assistants")
    store = status["service"]["store"]
    assert store["problem"] == f"{db} was deleted or moved away while the service ran"
    assert "writes are refused" in store["last_write_error"]
    errors = re.findall(r"#error\] SQLite store: .*deleted or moved away", proc.stdout)
    assert len(errors) == 1, proc.stdout  # one error when it went, not one per write
    assert not db.exists()  # nothing made a new, empty database behind the service's back

    os.link(kept, db)
    status = await get_json(http, f"{base}/assistants")  # the status looks again
    assert status["service"]["store"]["problem"] is None
    await proc.wait_for(r"the database file is back; writes go on")
    proc.signal("TERM")
    await proc.wait_ended()
    # (not assert_stopped_by: the tick logs its refused episode write with a traceback)
    assert (proc.exit_code, proc.exit_signal) == (None, signal.SIGTERM), proc.stdout
    integrity, state, _ = read_db(db)
    assert integrity == "ok" and "hello?" in str(state)  # saved once the file was back


@pytest_twisted.ensureDeferred
async def test_a_damaged_database_stops_the_start_with_one_line(tmp_path: Path,
                                                                processes: Any) -> None:
    config = service_config(tmp_path)
    proc, _ = await start_and_wait(processes, tmp_path, config)
    proc.signal("TERM")
    await proc.wait_ended()
    db = tmp_path / "state" / "assistants.sqlite"
    damage(db)

    again = processes(tmp_path, config)
    await again.wait_ended()
    assert_one_line_failure(again, f"cannot open the store: {db} is damaged",
                            f"sqlite3 {db} .recover")


@pytest_twisted.ensureDeferred
async def test_a_read_only_database_stops_the_start_with_one_line(tmp_path: Path,
                                                                  processes: Any) -> None:
    config = service_config(tmp_path)
    proc, _ = await start_and_wait(processes, tmp_path, config)
    proc.signal("TERM")
    await proc.wait_ended()
    db = tmp_path / "state" / "assistants.sqlite"
    undo = make_read_only(db)
    try:
        again = processes(tmp_path, config)
        await again.wait_ended()
    finally:
        undo()
    assert_one_line_failure(again, f"cannot open the store: {db} is read-only for this "
                                   "process", "write access")
