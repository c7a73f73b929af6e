"""The real ``twistd -n ai-assistant`` process: HTTP API, SSE, SIGTERM, restart, bad configs.

Each test spawns the virtualenv's ``twistd`` script with a config written to a
temporary directory.  The model is the scripted server of
:mod:`ai_tools.testing`, run in the test process on 127.0.0.1 and named with
``--llm-url``/``--model`` (or the config's ``scenario``), so nothing leaves the
machine.  Waits are bounded by generous limits and end as soon as the awaited
output appears: none of them is a timing the test depends on.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
import treq
from twisted.internet import defer, protocol, task
from twisted.web.client import Agent, HTTPConnectionPool

from ai_tools.testing import Rule, Script, TestServer, Turn, start_test_server

ROOT = Path(__file__).resolve().parents[2]
WORLD = ROOT / "examples" / "world.toml"
TWISTD = Path(sys.executable).with_name("twistd")
WAIT = 90.0
"""Upper bound of any wait (seconds); each wait ends as soon as its condition holds."""

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")


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
           if not k.startswith(("LLM_", "AI_TOOLS_", "COVERAGE_PROCESS"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest_twisted.async_yield_fixture
async def processes() -> AsyncIterator[Callable[..., Twistd]]:
    """Starts twistd processes; kills whatever is still running at the end."""
    started: list[Twistd] = []

    def start(cwd: Path, config: Path | str, *extra: str) -> Twistd:
        args = [str(TWISTD), "-n", "--pidfile", str(cwd / "twistd.pid"), "ai-assistant",
                "--config", str(config), *extra]
        proc = Twistd(cwd, args)
        reactor().spawnProcess(proc, str(TWISTD), args, env=clean_environment(),
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


def call(tool: str, /, **arguments: Any) -> Turn:
    return Turn(tool_calls=[{"name": tool, "arguments": arguments}])


SCRIPT = Script(
    rules=(
        Rule(match="mussel", turns=(
            Turn(text="Bob wants the slate changed; let me look first.",
                 tool_calls=[{"name": "inspect_location", "arguments": {}}]),
            call("set_attribute", object="slate", name="soup", value="mussel stew"),
        )),
        Rule(match="what soup", turns=(
            call("get_attributes", object="slate", names=["soup"]),
            call("say", message="It is mussel stew tonight, Bob."),
        )),
    ),
    default=call("noop", reason="nothing to do"),
)


def write_config(directory: Path, server: TestServer | None = None, *,
                 models: str | None = None, assistant: str = 'tick_rate = 0.5',
                 world: str = str(WORLD), http_listen: str = "127.0.0.1:0",
                 extra: str = "") -> Path:
    """A config for Pip in the example world, the HTTP API on a free port of 127.0.0.1.

    ``models`` is the models section (default: ``server``'s profile, if any);
    ``assistant`` lines go into Pip's table; ``extra`` is appended.
    """
    if models is None:
        models = (f'[models.local]\nbase_url = "{server.url}"\nmodel = "{server.model_name}"'
                  if server is not None else "")
    text = f"""
[service]
tick_interval = 0.2
stop_grace = 5.0

[store]
path = "state/assistants.sqlite"

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


async def start_and_wait(start: Callable[..., Twistd], tmp_path: Path, config: Path,
                         *extra: str) -> tuple[Twistd, str]:
    proc = start(tmp_path, config, *extra)
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


# -- the lifecycle ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_serve_stop_and_restart_with_state_intact(tmp_path: Path, processes: Any,
                                                        http: Any) -> None:
    server = await start_test_server(SCRIPT, reactor=reactor())
    try:
        config = write_config(tmp_path)
        overrides = ("--llm-url", server.url, "--model", server.model_name)
        proc, base = await start_and_wait(processes, tmp_path, config, *overrides)
        port = int(base.rsplit(":", 1)[1])
        assert (tmp_path / "twistd.pid").exists()

        status = await get_json(http, f"{base}/assistants")
        assert "pip" in json.dumps(status)

        # the event stream, open before the player speaks
        stream = bytearray()
        response = await http.get(f"{base}/events?assistant=pip", unbuffered=True)
        assert response.code == 200
        collected = treq.collect(response, stream.extend)
        collected.addErrback(lambda _: None)  # the server closes it on SIGTERM

        said = await post_json(http, f"{base}/messages", {
            "character": "char:bob", "kind": "say",
            "text": "Pip, put mussel stew on the slate tonight, please."})
        assert "char:pip" in said["heard_by"]

        await until(lambda: any(k == "termination" for k, _ in sse_events(bytes(stream))),
                    "the loop's termination on the event stream")
        events = sse_events(bytes(stream))
        kinds = [k for k, _ in events]
        assert "world_message" in kinds and "iteration" in kinds
        calls = [d["tool"] for k, d in events if k == "tool_call"]
        assert calls == ["inspect_location", "set_attribute"]
        results = [d for k, d in events if k == "tool_result"]
        assert [r["success"] for r in results] == [True, True]
        assert all(isinstance(r["duration_ms"], int | float) and r["from_cache"] is False
                   for r in results)
        (termination,) = [d for k, d in events if k == "termination"]
        assert termination["reason"] == "dangerous_tool"

        history = await get_json(http, f"{base}/assistants/pip/history?limit=100")
        saved_total = history["total"]
        assert "mussel stew" in json.dumps(history["messages"])

        # SIGTERM: a clean shutdown
        proc.signal("TERM")
        await proc.wait_ended()
        assert (proc.exit_code, proc.exit_signal) == (0, None), proc.stdout + proc.stderr
        assert "ai_tools service stopped" in proc.stdout
        assert "Traceback" not in proc.stdout + proc.stderr
        assert port_is_closed(port)
        assert not (tmp_path / "twistd.pid").exists()
        await collected  # the event stream was closed, not left hanging
        integrity, state, slate = read_db(tmp_path / "state" / "assistants.sqlite")
        assert integrity == "ok"
        assert len(state["history"]) == saved_total
        assert slate["attributes"]["soup"] == "mussel stew"

        # the same file again: history and world as they were
        requests_before = len(server.requests)
        proc, base = await start_and_wait(processes, tmp_path, config, *overrides)
        assert "Assistant pip added (restored)" in proc.stdout
        history = await get_json(http, f"{base}/assistants/pip/history?limit=1000")
        assert history["total"] == saved_total
        await post_json(http, f"{base}/messages", {
            "character": "char:bob", "text": "Pip, what soup is on the slate?"})

        async def pip_answered() -> list[dict[str, Any]]:
            heard = await get_json(http, f"{base}/characters/char:bob/heard")
            return [m for m in heard["messages"] if m["sender_id"] == "char:pip"]

        answered: list[dict[str, Any]] = []
        for _ in range(int(WAIT / 0.1)):
            answered = await pip_answered()
            if answered:
                break
            await sleep(0.1)
        assert [m["text"] for m in answered] == ["It is mussel stew tonight, Bob."]
        # the restarted process read the changed world: the model saw the stew
        seen = json.dumps([r.messages for r in server.requests[requests_before:]])
        assert "mussel stew" in seen

        proc.signal("TERM")
        await proc.wait_ended()
        assert proc.exit_code == 0, proc.stdout + proc.stderr
        integrity, state, _ = read_db(tmp_path / "state" / "assistants.sqlite")
        assert integrity == "ok" and len(state["history"]) > saved_total
    finally:
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_scripted_scenario_model_from_the_config(tmp_path: Path, processes: Any,
                                                       http: Any) -> None:
    """No model server at all: the config's scenario starts the scripted model in-process."""
    write_scenario(tmp_path, '[[rules]]\nmatch = "hello"\n[[rules.turns]]\n'
                   'tool_calls = [{ name = "say", arguments = { message = "Hello Bob!" } }]\n'
                   '[default]\ntool_calls = [{ name = "noop", arguments = {} }]\n')
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc, base = await start_and_wait(processes, tmp_path, config)
    assert "the scripted stand-in model" in proc.stdout
    await post_json(http, f"{base}/messages", {"character": "char:bob", "text": "hello Pip"})

    async def answered() -> bool:
        heard = await get_json(http, f"{base}/characters/char:bob/heard")
        return any(m["text"] == "Hello Bob!" for m in heard["messages"])

    for _ in range(int(WAIT / 0.1)):
        if await answered():
            break
        await sleep(0.1)
    assert await answered()
    proc.signal("INT")  # Ctrl-C, as under `make run`
    await proc.wait_ended()
    assert proc.exit_code == 0, proc.stdout + proc.stderr


@pytest_twisted.ensureDeferred
async def test_manhole_listens_on_loopback_with_a_private_host_key(tmp_path: Path,
                                                                   processes: Any) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    (tmp_path / "authorized_keys").write_bytes(key + b" test@example\n")
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL,
                          extra='[manhole]\nenabled = true\nlisten = "127.0.0.1:0"\n'
                                'authorized_keys = "authorized_keys"')
    proc, _ = await start_and_wait(processes, tmp_path, config)
    match = await proc.wait_for(r"manhole listening on (\S+):(\d+)")
    assert match.group(1) == "127.0.0.1"
    host_key = tmp_path / "state" / "manhole_host_key"
    assert stat.S_IMODE(host_key.stat().st_mode) == 0o600
    with socket.create_connection(("127.0.0.1", int(match.group(2))), timeout=10) as sock:
        assert sock.recv(64).startswith(b"SSH-2.0-")  # SSH, never a telnet prompt
    proc.signal("TERM")
    await proc.wait_ended()
    assert proc.exit_code == 0


# -- mistakes: one line on stderr, a non-zero exit, nothing left behind --------------------------


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


@pytest.mark.parametrize(("change", "fragments"), [
    ({"assistant": "tick_rat = 2"}, ("assistants.pip: unknown key 'tick_rat'",
                                     "did you mean 'tick_rate'?")),
    ({"assistant": 'tick_rate = "fast"'},
     ("assistants.pip.tick_rate must be a positive number, not 'fast'",)),
    ({"assistant": 'model = "gpt"'}, ("assistants.pip.model: unknown model profile 'gpt' "
                                      "(declared: local)",)),
    ({"assistant": '[assistants.execution_config.contexts.conversation]\n'
                   'allowed_tools = ["say", "fly"]'},
     ("assistants.pip.execution_config.contexts.conversation.allowed_tools: unknown tool "
      "'fly'",)),
    ({"world": "no/such/world.toml"}, ("world.file: file not found",)),
    ({"http_listen": "0.0.0.0:0"}, ("http.listen: the HTTP API listens beyond this machine",)),
    ({"extra": "[colour]\nblue = 1"}, ("unknown key 'colour'",)),
])
@pytest_twisted.ensureDeferred
async def test_bad_config_stops_twistd_with_one_line(tmp_path: Path, processes: Any,
                                                     change: dict[str, str],
                                                     fragments: tuple[str, ...]) -> None:
    config = write_config(tmp_path, None, models=LOCAL_MODEL, **change)
    proc = processes(tmp_path, config)
    await proc.wait_ended()
    assert_one_line_failure(proc, str(config), *fragments)
    assert not (tmp_path / "state").exists()  # nothing was created


@pytest_twisted.ensureDeferred
async def test_missing_config_file(tmp_path: Path, processes: Any) -> None:
    proc = processes(tmp_path, tmp_path / "nope.toml")
    await proc.wait_ended()
    assert_one_line_failure(proc, "nope.toml: config file not found")


@pytest_twisted.ensureDeferred
async def test_bad_override_on_the_command_line(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    proc = processes(tmp_path, config, "--llm-url", "http://127.0.0.1:9/v1")
    await proc.wait_ended()
    assert_one_line_failure(proc, "models.default: 'model' is required (pass --model")


@pytest_twisted.ensureDeferred
async def test_port_in_use_fails_start_up_cleanly(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = processes(tmp_path, config, "--http", str(port))
        await proc.wait_ended()
    assert_one_line_failure(proc, f"cannot listen on port {port} of 127.0.0.1")
    assert "ai_tools service stopped" in proc.stdout  # what had started was closed
    integrity, _, _ = read_db(tmp_path / "state" / "assistants.sqlite")
    assert integrity == "ok"


@pytest_twisted.ensureDeferred
async def test_a_file_that_is_not_a_database(tmp_path: Path, processes: Any) -> None:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "assistants.sqlite").write_bytes(b"not a database " * 100)
    proc = processes(tmp_path, config)
    await proc.wait_ended()
    assert_one_line_failure(proc, "cannot open the store", "file is not a database")

