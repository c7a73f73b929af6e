"""A real ``twistd -n ai-assistant`` process for the tests, and what they do with it.

Each test spawns the virtualenv's ``twistd`` script with a config written to a
temporary directory.  Waits are bounded by generous limits and end as soon as
the awaited output appears: none of them is a timing the tests depend on.
The ``processes`` and ``http`` fixtures are imported by the test modules.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest_twisted
import treq
from twisted.internet import defer, protocol, task
from twisted.web.client import Agent, HTTPConnectionPool

from ai_tools.testing import Rule, Script, TestServer, Turn

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "examples" / "world.toml"
TWISTD = Path(sys.executable).with_name("twistd")
WAIT = 90.0
"""Upper bound of any wait (seconds); each wait ends as soon as its condition holds."""

def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


async def sleep(seconds: float) -> None:
    await task.deferLater(reactor(), seconds, lambda: None)


async def until(condition: Callable[[], Any], what: str, limit: float = WAIT) -> Any:
    """Poll ``condition`` every 50 ms until it is truthy (at most ``limit`` seconds)."""
    for _ in range(int(limit / 0.05)):
        value = condition()
        if value:
            return value
        await sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


class Twistd(protocol.ProcessProtocol):
    """One twistd process: its output as it comes, its exit status once it ends."""

    def __init__(self, cwd: Path, args: list[str]) -> None:
        self.cwd = cwd
        self.args = args
        self.out = bytearray()
        self.err = bytearray()
        self.ended: defer.Deferred[Twistd] = defer.Deferred()
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.transport: Any = None

    @property
    def stdout(self) -> str:
        return self.out.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.err.decode("utf-8", "replace")

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Any) -> None:
        self.exit_code = reason.value.exitCode
        self.exit_signal = reason.value.signal
        self.ended.callback(self)

    @property
    def running(self) -> bool:
        return not self.ended.called

    async def wait_for(self, pattern: str) -> re.Match[str]:
        """The first match of ``pattern`` in stdout (fails if the process ends first)."""
        def found() -> re.Match[str] | None:
            match = re.search(pattern, self.stdout)
            if match is None and not self.running:
                raise AssertionError(f"twistd ended ({self.exit_code}) before {pattern!r}:\n"
                                     f"{self.stdout}\n{self.stderr}")
            return match

        match: re.Match[str] = await until(found, f"{pattern!r} in twistd's output")
        return match

    async def wait_ended(self) -> Twistd:
        if self.running:
            await until(lambda: not self.running, "twistd to end")
        return self

    def signal(self, name: str) -> None:
        if self.running:
            self.transport.signalProcess(name)


def clean_environment() -> dict[str, str]:
    """The environment without model or token settings of the person running the tests."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "AI_TOOLS_", "COVERAGE_PROCESS", "OTEL_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest_twisted.async_yield_fixture
async def processes() -> AsyncIterator[Callable[..., Twistd]]:
    """Starts twistd processes; kills whatever is still running at the end."""
    started: list[Twistd] = []

    def start(cwd: Path, config: Path | str | None, *extra: str,
              env: dict[str, str] | None = None, daemon: bool = False) -> Twistd:
        """twistd in ``cwd`` (``config``: None for none on the command line); ``env`` adds
        variables; ``daemon``: without ``-n``, logging to ``twistd.log``."""
        mode = ["--logfile", str(cwd / "twistd.log")] if daemon else ["-n"]
        args = [str(TWISTD), *mode, "--pidfile", str(cwd / "twistd.pid"), "ai-assistant",
                *(() if config is None else ("--config", str(config))), *extra]
        proc = Twistd(cwd, args)
        reactor().spawnProcess(proc, str(TWISTD), args, env={**clean_environment(),
                                                             **(env or {})},
                               path=str(cwd))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.running:
            proc.signal("KILL")
            await proc.wait_ended()


@pytest_twisted.async_yield_fixture
async def http() -> AsyncIterator[Any]:
    """A treq client with its own non-persistent pool (closed at the end)."""
    pool = HTTPConnectionPool(reactor(), persistent=False)
    client = treq.client.HTTPClient(cast(Any, Agent(reactor(), pool=pool)))
    yield client
    await pool.closeCachedConnections()


def write_config(directory: Path, server: TestServer | None = None, *,
                 models: str | None = None, assistant: str = 'tick_rate = 0.5',
                 world: str = str(WORLD), http_listen: str = "127.0.0.1:0",
                 db: str = "state/assistants.sqlite", service: str = "stop_grace = 5.0",
                 extra: str = "") -> Path:
    """A config for Pip in the example world, the HTTP API on a free port of 127.0.0.1.

    ``models`` is the models section (default: ``server``'s profile, if any);
    ``assistant`` lines go into Pip's table, ``service`` lines into ``[service]``;
    ``db`` is the SQLite file; ``extra`` is appended.
    """
    if models is None:
        models = (f'[models.local]\nbase_url = "{server.url}"\nmodel = "{server.model_name}"'
                  if server is not None else "")
    text = f"""
[service]
tick_interval = 0.2
min_tick_rate = 0.05
{service}

[store]
path = {json.dumps(db)}

[world]
file = {json.dumps(world)}

{models}

[http]
listen = {json.dumps(http_listen)}

[[assistants]]
name = "pip"
character_id = "char:pip"
persona = "You are Pip, the innkeeper."
{assistant}

{extra}
"""
    path = directory / "assistant.toml"
    path.write_text(text)
    return path


SCENARIO_MODEL = '[models.default]\nscenario = "scenario.toml"'


def write_scenario(directory: Path, text: str = "turns = []\n") -> None:
    (directory / "scenario.toml").write_text(text)


async def get_json(http: Any, url: str) -> Any:
    response = await http.get(url)
    assert response.code == 200, (url, response.code, await response.text())
    return await response.json()


async def post_json(http: Any, url: str, body: Any) -> Any:
    response = await http.post(url, data=json.dumps(body).encode(),
                               headers={b"content-type": [b"application/json"]})
    assert response.code in (200, 201, 202), (url, response.code, await response.text())
    return await response.json()


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def sse_events(buffer: bytes) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` of every complete SSE frame received."""
    events = []
    for frame in buffer.decode("utf-8", "replace").split("\n\n")[:-1]:
        kind, data = "message", None
        for line in frame.splitlines():
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
        if data is not None:
            events.append((kind, data))
    return events


async def start_and_wait(start: Callable[..., Twistd], tmp_path: Path, config: Path | None,
                         *extra: str, env: dict[str, str] | None = None) -> tuple[Twistd, str]:
    proc = start(tmp_path, config, *extra, env=env)
    match = await proc.wait_for(r"HTTP API listening on http://(127\.0\.0\.1:\d+)/")
    await proc.wait_for(r"ai_tools service ready")
    return proc, f"http://{match.group(1)}"


def read_db(path: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """integrity_check, Pip's saved state, the slate's world row — read by another process."""
    conn = sqlite3.connect(str(path))
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        (state,) = conn.execute("SELECT state FROM assistants WHERE name = 'pip'").fetchone()
        (slate,) = conn.execute("SELECT data FROM world_objects WHERE id = 'obj:slate'"
                                ).fetchone()
        return integrity, json.loads(state), json.loads(slate)
    finally:
        conn.close()


def assert_stopped_by(proc: Twistd, signum: int) -> None:
    """A clean stop, then the process ended by ``signum`` itself, as Twisted intends
    (a shell shows status 128 + signum: 143 for SIGTERM, 130 for Ctrl-C)."""
    output = proc.stdout + proc.stderr
    assert (proc.exit_code, proc.exit_signal) == (None, signum), output
    assert "ai_tools service stopped" in proc.stdout, output
    assert "Traceback" not in output, output


def assert_one_line_failure(proc: Twistd, *fragments: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.exit_code not in (0, None), proc.stdout + proc.stderr
    assert len(lines) == 1, proc.stderr
    (line,) = lines
    assert line.startswith("twistd ai-assistant: error: "), line
    for fragment in fragments:
        assert fragment in line, line
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (proc.cwd / "twistd.pid").exists()
    return line


LOCAL_MODEL = '[models.local]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"'


SOUP_SCRIPT = Script(
    rules=(Rule(match="soup", turns=(
        Turn(tool_calls=[{"name": "say", "arguments": {"message": "Chowder, Bob."}}]),)),),
    default=Turn(tool_calls=[{"name": "noop", "arguments": {"reason": "nothing"}}]),
)
"""The model of the variables-only tests: Pip answers a question about the soup with say."""


async def bob_heard(http: Any, base: str, text: str) -> bool:
    """Whether Bob has heard ``text`` (the service's heard list, over its HTTP API)."""
    messages = (await get_json(http, f"{base}/characters/char:bob/heard"))["messages"]
    return any(m["text"] == text for m in messages)
