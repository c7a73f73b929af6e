"""Crash test on PostgreSQL: a writer process SIGKILLed at several points loses nothing
it acknowledged and leaves every state at exactly one version.

The same writer loop, states and checks as tests/integration/test_store_crash.py
(single saves and grouped ``save_many``, histories with unanswered tool calls),
through :class:`PostgreSQLStore`; the child gets the DSN on its command line
and the password from ``AI_TOOLS_DB_PASSWORD``, as a deployment does.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest_twisted
from twisted.internet import defer

from tests.integration.conftest import PostgresDatabase
from tests.integration.test_store_crash import NAMES, REPO_ROOT, ChildProcess, make_state, wait_for

MODULE = "tests.integration.test_postgres_store_crash"


def _store(dsn: str) -> Any:
    from ai_tools.store.postgres import PostgreSQLStore, database_password

    return PostgreSQLStore(dsn, password=database_password(os.environ))


def run_writer(dsn: str) -> None:
    """Save states until killed, printing ``saved <version>`` after each round."""
    from twisted.internet import task

    async def main(reactor: Any) -> None:
        store = _store(dsn)
        await store.open()
        first = await store.load_assistant(NAMES[0])
        version = (first["version"] + 1) if first else 0
        print(f"ready {version}", flush=True)
        while version < 100_000:
            if version % 2:
                await store.save_many({name: make_state(name, version) for name in NAMES})
            else:
                await defer.gatherResults([store.save_assistant(name, make_state(name, version))
                                           for name in NAMES])
            print(f"saved {version}", flush=True)
            version += 1

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


def run_checker(dsn: str) -> None:
    """Open the database in a fresh process and print a JSON report of the states."""
    from twisted.internet import task

    from ai_tools.store.history_repair import repair_state, unanswered_tool_calls

    async def main(reactor: Any) -> None:
        store = _store(dsn)
        await store.open()
        states: dict[str, Any] = {}
        for name in NAMES:
            loaded = await store.load_assistant(name)
            if loaded is None:
                states[name] = None
                continue
            expected, _ = repair_state(make_state(name, loaded["version"]))
            states[name] = {"version": loaded["version"], "exact": loaded == expected,
                            "unanswered": len(unanswered_tool_calls(loaded["history"]))}
        await store.close()
        print(json.dumps({"states": states}), flush=True)

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))


def spawn(mode: str, db: PostgresDatabase, kill_after: int | None) -> ChildProcess:
    from twisted.internet import reactor

    child = ChildProcess(kill_after)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), AI_TOOLS_DB_PASSWORD=db.password)
    env.pop("AI_TOOLS_DB_PASSWORD_FILE", None)
    reactor.spawnProcess(  # type: ignore[attr-defined]
        child, sys.executable, [sys.executable, "-m", MODULE, mode, db.dsn], env=env,
        path=str(REPO_ROOT))
    return child


@pytest_twisted.ensureDeferred
async def test_sigkill_at_several_points_loses_nothing_acknowledged(
    postgres_db: PostgresDatabase,
) -> None:
    """Kill the writer at once, after start-up, and after 1, 3 and 10 rounds."""
    acknowledged, attempted = -1, -1
    for kill_after in (-2, -1, 0, 2, 9):
        writer = spawn("--write", postgres_db, kill_after)
        await wait_for(writer)
        assert writer.killed, writer.stderr.decode()
        acknowledged = max(acknowledged, writer.saved)
        attempted = max(attempted, writer.saved + 1, writer.started_at)
        checker = spawn("--check", postgres_db, None)
        await wait_for(checker)
        assert checker.lines, checker.stderr.decode()
        report = json.loads(checker.lines[-1])
        for name, state in report["states"].items():
            if state is None:
                assert acknowledged < 0, (name, report)
                continue
            assert state["exact"], (name, report)
            assert state["unanswered"] == 0, (name, report)
            assert acknowledged <= state["version"] <= attempted, (name, report)
    assert acknowledged >= 9


if __name__ == "__main__":
    mode, dsn = sys.argv[1], sys.argv[2]
    if mode == "--write":
        run_writer(dsn)
    elif mode == "--check":
        run_checker(dsn)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
