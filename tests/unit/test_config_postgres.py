"""``[store] backend = "postgres"``: the DSN, and the password from the environment only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ai_tools.standalone.config import Overrides, parse_config
from tests.unit.test_config import ROOT, base_config, error_of, with_change

DSN = "host=127.0.0.1 port=5432 dbname=ai_tools user=ai_tools"


def postgres(**store: object) -> dict[str, object]:
    data = base_config()
    data["store"] = {"backend": "postgres", **store}
    return data


def test_postgres_store_with_the_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The DSN comes from the file, the password from AI_TOOLS_DB_PASSWORD; repr hides it."""
    monkeypatch.setenv("AI_TOOLS_DB_PASSWORD", "s3cret-pw")
    monkeypatch.delenv("AI_TOOLS_DB_PASSWORD_FILE", raising=False)
    config = parse_config(postgres(dsn=DSN), base=ROOT)
    assert (config.store.backend, config.store.dsn) == ("postgres", DSN)
    assert config.store.password == "s3cret-pw"
    assert "s3cret-pw" not in repr(config)


def test_the_password_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """AI_TOOLS_DB_PASSWORD_FILE: a private file; a readable one is refused up front."""
    secret = tmp_path / "pw"
    secret.write_text("from-a-file\n")
    os.chmod(secret, 0o600)
    monkeypatch.delenv("AI_TOOLS_DB_PASSWORD", raising=False)
    monkeypatch.setenv("AI_TOOLS_DB_PASSWORD_FILE", str(secret))
    assert parse_config(postgres(dsn=DSN), base=ROOT).store.password == "from-a-file"
    os.chmod(secret, 0o644)
    with pytest.raises(Exception, match="readable by others"):
        parse_config(postgres(dsn=DSN), base=ROOT)


def test_no_password_at_all_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """libpq's own password file or a trust rule may do without one."""
    monkeypatch.delenv("AI_TOOLS_DB_PASSWORD", raising=False)
    monkeypatch.delenv("AI_TOOLS_DB_PASSWORD_FILE", raising=False)
    assert parse_config(postgres(dsn=DSN), base=ROOT).store.password is None


@pytest.mark.parametrize(("data", "expected"), [
    (postgres(), 'store.dsn is required with backend = "postgres"'),
    (postgres(dsn=DSN + " password=oops"), "store.dsn: the PostgreSQL DSN must not hold the"
                                           " password: set AI_TOOLS_DB_PASSWORD"),
    (postgres(dsn="postgresql://u:oops@db/x"), "must not hold the password"),
    (postgres(dsn="host='unclosed"), "store.dsn: bad PostgreSQL DSN"),
    (postgres(dsn=DSN, path="x.sqlite"), 'store.path is only for backend = "sqlite"'),
    (with_change("store.dsn", DSN), 'store.dsn is only for backend = "postgres"'),
    (postgres(dsn=5), "store.dsn must be a string"),
])
def test_mistakes(data: dict[str, object], expected: str) -> None:
    """Each mistake is one line naming the key."""
    assert expected in error_of(data)


def test_db_on_the_command_line_replaces_postgres() -> None:
    """--db (a file or 'memory') still chooses the store for this run."""
    config = parse_config(postgres(dsn=DSN), base=ROOT, overrides=Overrides(db="memory"))
    assert config.store.backend == "memory"
