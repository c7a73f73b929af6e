"""The SQLite file under the store: one process at a time, gone while running, full, read-only,
damaged — each reported in words naming the file, on real files."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from ai_tools.store.sqlite import SQLiteStore
from ai_tools.store.sqlite_file import DatabaseFileError


class Logged:
    """The text of log events at warn and above."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("log_level", LogLevel.info) >= LogLevel.warn:
            self.lines.append(formatEvent(event))


@pytest.fixture
def logged() -> Iterator[Logged]:
    observer = Logged()
    globalLogPublisher.addObserver(cast(Any, observer))
    yield observer
    globalLogPublisher.removeObserver(cast(Any, observer))


async def opened(path: Path, **kwargs: Any) -> SQLiteStore:
    store = SQLiteStore(str(path), **kwargs)
    await store.open()
    return store


async def fails_open(path: Path, **kwargs: Any) -> DatabaseFileError:
    store = SQLiteStore(str(path), **kwargs)
    with pytest.raises(DatabaseFileError) as caught:
        await store.open()
    assert not store.is_open
    return caught.value


# -- one process at a time ------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_second_store_on_the_same_file_is_refused(tmp_path: Path) -> None:
    """The second open fails with one line naming the file, the lock and the holder's pid;
    the first store keeps working, and once it closes the file can be opened again."""
    path = tmp_path / "state.sqlite"
    first = await opened(path)
    try:
        error = await fails_open(path)
        assert error.problem == "locked"
        message = str(error)
        assert "\n" not in message
        assert f"{path} is in use by another process (pid {os.getpid()})" in message
        assert f"{path}.lock" in message and "--db" in message
        await first.save_assistant("ada", {"history": []})  # untouched by the refused one
        assert await first.list_assistants() == ["ada"]
    finally:
        await first.close()
    second = await opened(path)
    try:
        assert await second.list_assistants() == ["ada"]
    finally:
        await second.close()
    assert (tmp_path / "state.sqlite.lock").exists()  # kept: never a lock on a new file


@pytest_twisted.ensureDeferred
async def test_the_lock_does_not_block_readers(tmp_path: Path) -> None:
    """A plain sqlite3 reader (a backup, the shell) reads while the store holds the file."""
    path = tmp_path / "state.sqlite"
    store = await opened(path)
    try:
        await store.save_assistant("ada", {"history": []})
        reader = sqlite3.connect(str(path))
        try:
            assert reader.execute("SELECT name FROM assistants").fetchall() == [("ada",)]
            await store.save_assistant("bob", {"history": []})  # the reader does not block it
        finally:
            reader.close()
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_memory_databases_take_no_lock(tmp_path: Path) -> None:
    one, two = await opened(Path(":memory:")), await opened(Path(":memory:"))
    await one.close()
    await two.close()


# -- the file deleted, moved or replaced while open ------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_deleted_file_stops_the_writes_and_shows_in_health(tmp_path: Path,
                                                                  logged: Logged) -> None:
    path = tmp_path / "state.sqlite"
    store = await opened(path)
    try:
        await store.save_assistant("ada", {"history": []})
        assert store.health()["problem"] is None
        kept = tmp_path / "kept.sqlite"
        os.link(path, kept)  # the same file under another name, to put it back later
        path.unlink()

        with pytest.raises(DatabaseFileError) as caught:
            await store.save_assistant("ada", {"history": [{"role": "user", "content": "x"}]})
        assert caught.value.problem == "gone"
        assert f"{path} was deleted or moved away while the service ran" in str(caught.value)
        assert "writes are refused" in str(caught.value)
        health = store.health()
        assert health["problem"] == f"{path} was deleted or moved away while the service ran"
        assert "deleted or moved away" in (health["last_write_error"] or "")
        with pytest.raises(DatabaseFileError):  # every write, not only the first
            await store.add_record("ada", "memory", "lost?")
        errors = [line for line in logged.lines if "deleted or moved away" in line]
        assert len(errors) == 1, logged.lines  # logged once, not once per write

        os.link(kept, path)  # put back: the same file
        await store.save_assistant("ada", {"history": [{"role": "user", "content": "back"}]})
        assert store.health() == {"backend": "sqlite", "path": str(path), "problem": None,
                                  "last_write_error": None}
    finally:
        await store.close()
    again = await opened(path)
    try:
        state = await again.load_assistant("ada")
        assert state == {"history": [{"role": "user", "content": "back"}]}
        assert await again.list_records("ada", "memory") == []  # the refused write is not there
    finally:
        await again.close()


@pytest_twisted.ensureDeferred
async def test_a_moved_or_replaced_file_stops_the_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = await opened(path)
    try:
        moved = tmp_path / "moved.sqlite"
        path.rename(moved)
        with pytest.raises(DatabaseFileError, match="deleted or moved away"):
            await store.save_assistant("ada", {"history": []})
        shutil.copy(moved, path)  # a copy is another file
        with pytest.raises(DatabaseFileError, match="no longer the file the service opened"):
            await store.save_assistant("ada", {"history": []})
        assert "replaced" in (store.health()["problem"] or "")
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_a_deleted_lock_file_stops_the_writes(tmp_path: Path) -> None:
    """Without its lock file, a second service could open the database: refuse to write."""
    path = tmp_path / "state.sqlite"
    store = await opened(path)
    try:
        (tmp_path / "state.sqlite.lock").unlink()
        with pytest.raises(DatabaseFileError, match=r"lock file .* was deleted or replaced"):
            await store.save_assistant("ada", {"history": []})
    finally:
        await store.close()


# -- disk full ---------------------------------------------------------------------------------


def cap_pages(cursor: sqlite3.Cursor) -> None:
    """Make this connection's database full at its current size (SQLite's own SQLITE_FULL)."""
    cursor.execute("PRAGMA page_count")
    (pages,) = cursor.fetchone()
    cursor.execute(f"PRAGMA max_page_count = {pages}")


def uncap_pages(cursor: sqlite3.Cursor) -> None:
    cursor.execute("PRAGMA max_page_count = 1073741823")


@pytest_twisted.ensureDeferred
async def test_disk_full_is_reported_as_disk_full(tmp_path: Path, logged: Logged) -> None:
    """Grouped writes on a full disk all fail with "full" — not "no such savepoint"."""
    path = tmp_path / "state.sqlite"
    store = await opened(path)
    try:
        await store.run_in_transaction(cap_pages)
        big = {"history": [{"role": "user", "content": "x" * 200_000}]}
        writes = [store.save_assistant(f"a{i}", big) for i in range(3)]  # 1 alone, then 2 grouped
        for write in writes:
            with pytest.raises(DatabaseFileError) as caught:
                await write
            assert caught.value.problem == "disk_full"
            assert f"the disk holding {path} is full" in str(caught.value)
            assert "savepoint" not in str(caught.value)
        assert "is full" in (store.health()["last_write_error"] or "")
        assert len([line for line in logged.lines if "is full" in line]) == 1  # not one a write

        await store.run_in_transaction(uncap_pages)  # space again
        await store.save_assistant("a0", big)
        assert store.health()["last_write_error"] is None
        assert await store.list_assistants() == ["a0"]
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_a_failing_write_in_a_group_still_fails_alone(tmp_path: Path) -> None:
    """Statement errors (not the file's) keep failing only their own write."""
    store = await opened(tmp_path / "state.sqlite")
    try:
        def bad(cursor: sqlite3.Cursor) -> None:
            cursor.execute("INSERT INTO no_such_table VALUES (1)")

        first = store.save_assistant("a", {"history": []})
        grouped = [store.save_assistant("b", {"history": []}), store.run_in_transaction(bad),
                   store.save_assistant("c", {"history": []})]
        await first
        await grouped[0]
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await grouped[1]
        await grouped[2]
        assert await store.list_assistants() == ["a", "b", "c"]
    finally:
        await store.close()


# -- read-only and damaged files at open -------------------------------------------------------


def make_read_only(path: Path) -> Any:
    """Make ``path`` unwritable for this process; returns the undo (skips where impossible).

    As root, permissions do not stop writes: the file is made immutable instead.
    """
    if os.geteuid() != 0:
        path.chmod(0o444)
        return lambda: path.chmod(0o644)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)],
                                        capture_output=True).returncode != 0:
        pytest.skip("running as root where files cannot be made immutable")
    return lambda: subprocess.run([chattr, "-i", str(path)], check=True)


@pytest_twisted.ensureDeferred
async def test_a_read_only_database_stops_the_open_in_words(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = await opened(path)
    await store.close()
    undo = make_read_only(path)
    try:
        error = await fails_open(path)
    finally:
        undo()
    assert error.problem == "read_only"
    assert str(error).startswith(f"{path} is read-only for this process")
    assert "write access" in str(error) and "\n" not in str(error)


def damage(path: Path) -> None:
    """Overwrite the root page of the records table (the header and the rest stay good)."""
    conn = sqlite3.connect(str(path))
    try:
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'records'"
                               ).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    with path.open("r+b") as handle:
        handle.seek(size * (root - 1))
        handle.write(b"\xde\xad\xbe\xef" * (size // 4))


@pytest_twisted.ensureDeferred
async def test_a_partly_damaged_database_stops_the_open_in_words(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = await opened(path)
    for number in range(200):
        await store.add_record("ada", "memory", f"memory number {number} " * 20)
    await store.close()
    damage(path)

    error = await fails_open(path)
    assert error.problem == "damaged"
    message = str(error)
    assert message.startswith(f"{path} is damaged or not a database (SQLite: quick_check: ")
    assert f"sqlite3 {path} .recover" in message and "\n" not in message
    # the check at open is what finds it: without it the file opens, and fails later
    unchecked = await opened(path, quick_check=False)
    try:
        with pytest.raises(DatabaseFileError, match="is damaged"):
            await unchecked.list_records("ada", "memory", limit=500)
    finally:
        await unchecked.close()


@pytest_twisted.ensureDeferred
async def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database, just some text" * 100)
    error = await fails_open(path)
    assert error.problem == "damaged"
    assert str(error).startswith(f"{path} is damaged or not a database (SQLite: file is not a "
                                 "database)")
    again = await fails_open(path)  # the lock was released by the failed open
    assert again.problem == "damaged"
