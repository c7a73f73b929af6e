"""The local PostgreSQL recipe of docs/scaling.md, run as written (as a user who is not root)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg2
import pytest

from tests.postgres_cluster import ClusterUnavailable, find_bindir, free_port

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### A local PostgreSQL to try it"


def recipe() -> str:
    """The shell block under the recipe's heading."""
    text = (ROOT / "docs" / "scaling.md").read_text()
    assert HEADING in text, "docs/scaling.md has no local PostgreSQL recipe"
    section = text[text.index(HEADING):]
    found = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert found is not None
    return found.group(1)


def as_user(command: list[str], env: dict[str, str]) -> list[str]:
    """``command`` with ``env``, as this user or as ``postgres`` when this is root (initdb
    refuses root; runuser would set the postgres user's own HOME)."""
    with_env = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command]
    return ["runuser", "-u", "postgres", "--", *with_env] if os.geteuid() == 0 else with_env


def test_the_local_postgresql_recipe_gives_a_database_the_store_can_use() -> None:
    """initdb, a port, a role and its database: ai_tools connects with the DSN the page
    gives and the password file, and may create what the store creates."""
    try:
        find_bindir()
    except ClusterUnavailable as exc:
        pytest.fail(str(exc))
    port = free_port()
    script = recipe().replace("5433", str(port))
    home = Path(tempfile.mkdtemp(prefix="ai-tools-recipe-"))
    home.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
           "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(as_user(["bash", "-euo", "pipefail", "-c", script], env),
                              capture_output=True, text=True, timeout=120, check=False, cwd=home)
        assert done.returncode == 0, done.stdout + done.stderr
        password = (home / ".ai-tools-db-password").read_text().strip()
        assert oct((home / ".ai-tools-db-password").stat().st_mode & 0o777) == "0o600"
        dsn = f"host=127.0.0.1 port={port} dbname=ai_tools user=ai_tools"
        with psycopg2.connect(dsn, password=password) as connection, \
                connection.cursor() as cursor:
            cursor.execute("SELECT current_user, current_database()")
            assert cursor.fetchone() == ("ai_tools", "ai_tools")
            cursor.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
            cursor.execute("CREATE TABLE probe (id integer)")
        connection.close()
    finally:  # the cluster stopped and its directory gone, whatever happened above
        bindir = find_bindir()
        subprocess.run(as_user([str(bindir / "pg_ctl"), "--pgdata", str(home / "ai-tools-pg"),
                                "--mode=immediate", "stop"], env), capture_output=True,
                       timeout=60, check=False, cwd=home)
        shutil.rmtree(home, ignore_errors=True)
