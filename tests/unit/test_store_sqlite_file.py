"""SQLite's errors about the file, told apart from a statement's, and put in words."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ai_tools.store.sqlite_file import explain, file_problem


def error_of(action: object) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as caught:
        action()  # type: ignore[operator]
    return caught.value


def test_a_file_that_cannot_be_opened(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    path = str(tmp_path / "file" / "db.sqlite")
    exc = error_of(lambda: sqlite3.connect(path).execute("SELECT 1"))
    assert file_problem(exc) == "cannot_open"
    explained = explain(exc, path)
    assert explained is not None and explained.problem == "cannot_open"
    assert str(explained).startswith(f"cannot open {path} (SQLite: unable to open database")


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"junk" * 1000)
    exc = error_of(lambda: sqlite3.connect(str(path)).execute("SELECT * FROM sqlite_master"))
    explained = explain(exc, str(path))
    assert explained is not None and explained.problem == "damaged"
    assert f"sqlite3 {path} .recover | sqlite3 NEW.sqlite" in str(explained)


def test_statement_errors_are_not_the_files() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    for action in (lambda: conn.execute("INSERT INTO t VALUES (1)"),
                   lambda: conn.execute("SELEC 1"),
                   lambda: conn.execute("SELECT * FROM nothing")):
        exc = error_of(action)
        assert file_problem(exc) is None and explain(exc, "db") is None
    assert file_problem(ValueError("no")) is None
    assert file_problem(OSError(28, "No space left on device")) is None
