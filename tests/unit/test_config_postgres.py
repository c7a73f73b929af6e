"""``[store] backend = "postgres"``: the DSN, and the password from the environment only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ai_tools.errors import ConfigError
from ai_tools.standalone.config import Overrides, parse_config
from tests.unit.test_config import ROOT, base_config, error_of, with_change

DSN = "host=127.0.0.1 port=5432 dbname=ai_tools user=ai_tools"


def postgres(**store: object) -> dict[str, object]:
    data = base_config()
    data["store"] = {"backend": "postgres", **store}
    return data


def environment(**variables: str) -> Overrides:
    """The settings of a process environment holding ``variables``."""
    return Overrides(environ=variables)


def test_postgres_store_with_the_password_from_the_environment() -> None:
    """The DSN comes from the file, the password from AI_TOOLS_DB_PASSWORD; repr hides it."""
    config = parse_config(postgres(dsn=DSN), base=ROOT,
                          overrides=environment(AI_TOOLS_DB_PASSWORD="s3cret-pw"))
    assert (config.store.backend, config.store.dsn) == ("postgres", DSN)
    assert config.store.password == "s3cret-pw"
    assert "s3cret-pw" not in repr(config)


def test_the_password_file(tmp_path: Path) -> None:
    """AI_TOOLS_DB_PASSWORD_FILE: a private file; a readable one is refused up front."""
    secret = tmp_path / "pw"
    secret.write_text("from-a-file\n")
    os.chmod(secret, 0o600)
    given = environment(AI_TOOLS_DB_PASSWORD_FILE=str(secret))
    assert parse_config(postgres(dsn=DSN), base=ROOT, overrides=given
                        ).store.password == "from-a-file"
    os.chmod(secret, 0o644)
    with pytest.raises(ConfigError, match=r"AI_TOOLS_DB_PASSWORD_FILE: .* is readable by others"):
        parse_config(postgres(dsn=DSN), base=ROOT, overrides=given)


def test_the_password_file_in_the_config_or_on_the_command_line(tmp_path: Path) -> None:
    """``[store] password_file`` and ``--db-password-file`` name the same file; the flag wins
    over the variable holding the password, the variable over the file's key."""
    secret, other = tmp_path / "pw", tmp_path / "other"
    secret.write_text("from-the-file\n")
    other.write_text("from-the-flag\n")
    os.chmod(secret, 0o600)
    os.chmod(other, 0o600)
    data = postgres(dsn=DSN, password_file=str(secret))
    assert parse_config(data, base=ROOT).store.password == "from-the-file"
    assert parse_config(data, base=ROOT, overrides=environment(AI_TOOLS_DB_PASSWORD="pw")
                        ).store.password == "pw"
    flag = Overrides(flags={"db_password_file": str(other)},
                     environ={"AI_TOOLS_DB_PASSWORD": "pw"})
    assert parse_config(data, base=ROOT, overrides=flag).store.password == "from-the-flag"
    os.chmod(other, 0o644)
    assert "--db-password-file: " in error_of(data, flag)
    assert 'store.password_file is only for backend = "postgres"' in error_of(
        with_change("store.password_file", str(secret)))


def test_both_password_variables_are_one_too_many() -> None:
    message = error_of(postgres(dsn=DSN), environment(AI_TOOLS_DB_PASSWORD="a",
                                                      AI_TOOLS_DB_PASSWORD_FILE="/x"))
    assert "give only one of AI_TOOLS_DB_PASSWORD and AI_TOOLS_DB_PASSWORD_FILE" in message


def test_no_password_at_all_is_allowed() -> None:
    """libpq's own password file or a trust rule may do without one."""
    assert parse_config(postgres(dsn=DSN), base=ROOT).store.password is None


def test_the_dsn_from_the_command_line_or_the_environment(tmp_path: Path) -> None:
    """``--db-dsn``/``AI_TOOLS_DB_DSN`` choose PostgreSQL over the file's SQLite store;
    ``--db`` and the DSN given in the same layer are one too many."""
    data = with_change("store", {"path": str(tmp_path / "x.sqlite")})
    config = parse_config(data, base=ROOT, overrides=environment(AI_TOOLS_DB_DSN=DSN))
    assert (config.store.backend, config.store.dsn, config.store.path) == ("postgres", DSN, None)
    both = Overrides(flags={"db": "memory", "db_dsn": DSN})
    assert "give only one of --db and --db-dsn" in error_of(data, both)
    flag_wins = Overrides(flags={"db": "memory"}, environ={"AI_TOOLS_DB_DSN": DSN})
    assert parse_config(data, base=ROOT, overrides=flag_wins).store.backend == "memory"
    bad = error_of(data, environment(AI_TOOLS_DB_DSN=DSN + " password=x"))
    assert "AI_TOOLS_DB_DSN: the PostgreSQL DSN must not hold the password" in bad


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
    config = parse_config(postgres(dsn=DSN), base=ROOT, overrides=Overrides(flags={"db": "memory"}))
    assert config.store.backend == "memory"


# -- [workers]: sharing the assistants ------------------------------------------------


@pytest.mark.parametrize(("name", "key", "values", "expected"), [
    ("worker_name", "name", ("file-w", "env-w", "flag-w"), ("file-w", "env-w", "flag-w")),
    ("lease_ttl", "lease_ttl", (20, "30", "40"), (20.0, 30.0, 40.0)),
    ("lease_interval", "lease_interval", (2, "3", "4"), (2.0, 3.0, 4.0)),
])
def test_worker_settings_flag_beats_variable_beats_file(
    name: str, key: str, values: tuple[object, str, str], expected: tuple[object, ...]
) -> None:
    """``[workers]`` name, lease_ttl, lease_interval: each also a variable and a flag."""
    from ai_tools.settings import setting

    in_file, in_env, on_flag = values
    data = postgres(dsn=DSN)
    data["workers"] = {key: in_file}
    env = {setting(name).env: in_env}
    given = [Overrides(), Overrides(environ=env), Overrides(flags={name: on_flag}, environ=env)]
    read = [getattr(parse_config(data, base=ROOT, overrides=o).workers, key) for o in given]
    assert tuple(read) == expected


def test_worker_defaults() -> None:
    """Leases of 15 s renewed every 5 s; the worker named by host and process."""
    workers = parse_config(postgres(dsn=DSN), base=ROOT).workers
    assert (workers.name, workers.lease_ttl, workers.lease_interval) == (None, 15.0, 5.0)
    assert workers.api_hosts == ()


def test_worker_api_hosts_are_an_allow_list_of_host_names() -> None:
    data = postgres(dsn=DSN)
    data["workers"] = {"api_hosts": ["10.0.0.5", "Worker2.internal"]}
    assert parse_config(data, base=ROOT).workers.api_hosts == ("10.0.0.5", "worker2.internal")


@pytest.mark.parametrize(("workers", "store", "expected"), [
    ({"lease_ttl": 5}, None, 'workers.lease_ttl is only for [store] backend = "postgres"'),
    ({"lease_ttl": 5, "lease_interval": 5}, DSN,
     "workers.lease_interval (5) must be shorter than workers.lease_ttl (5)"),
    ({"lease_ttl": -1}, DSN, "workers.lease_ttl must be a positive number"),
    ({"name": " "}, DSN, "workers.name must not be empty"),
    ({"api_hosts": "w2"}, DSN, "workers.api_hosts must be a list"),
    ({"api_hosts": ["http://w2:8080"]}, DSN, "workers.api_hosts: 'http://w2:8080' is not a host"),
    ({"api_hosts": [""]}, DSN, "is not a host name"),
    ({"api_hosts": ["w2"]}, None, "workers.api_hosts is only for [store]"),
    ({"ttl": 3}, DSN, "workers"),
])
def test_worker_mistakes(workers: dict[str, object], store: str | None, expected: str) -> None:
    data = postgres(dsn=store) if store else base_config()
    data["workers"] = workers
    assert expected in error_of(data)
