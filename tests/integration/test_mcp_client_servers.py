"""Our MCP client against real servers, on the real reactor.

Servers written with the official Python SDK (``tests/integration/mcp_fixture_server.py``)
over stdio and Streamable HTTP, and the reference server
``@modelcontextprotocol/server-everything`` from npm over stdio (``make mcp-everything``
installs it under ``.cache/``; without it these tests fail, they never skip).  Then the
whole path: the standalone service's assistant, its scripted model calling an MCP tool,
the result in its history and the server in ``GET /mcp/servers``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
from twisted.internet import defer, task
from twisted.logger import globalLogPublisher

from ai_tools.mcp.config import McpServerConfig
from ai_tools.mcp.http_transport import HttpTransport
from ai_tools.mcp.servers import McpServerConnection
from ai_tools.mcp.stdio import STDERR_BUDGET_BYTES, STDERR_LINE_BYTES, StdioTransport

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = str(Path(__file__).with_name("mcp_fixture_server.py"))
EVERYTHING = ROOT / ".cache" / "mcp-everything" / "node_modules" / ".bin" / "mcp-server-everything"
WORLD = ROOT / "examples" / "world.toml"


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


async def wait_for(check: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Poll ``check`` on the reactor until it holds; fail naming ``what`` after ``seconds``."""
    clock = reactor()
    deadline = clock.seconds() + seconds
    while not check():
        if clock.seconds() > deadline:
            raise AssertionError(f"{what}: not within {seconds:g}s")
        await task.deferLater(clock, 0.05, lambda: None)


async def started(config: McpServerConfig) -> McpServerConnection:
    connection = McpServerConnection(config, reactor())
    connection.start()
    await wait_for(lambda: connection.ready or connection.state == "failed",
                   f"MCP server {config.name} ready")
    assert connection.ready, connection.error
    return connection


def stdio_config(**changes: Any) -> McpServerConfig:
    values: dict[str, Any] = {"name": "fx", "command": sys.executable,
                              "args": (FIXTURE, "stdio"), "timeout": 20}
    values.update(changes)
    return McpServerConfig(**values)


class LogLines:
    """Log events whose format mentions ``needle``."""

    def __init__(self, needle: str) -> None:
        self.needle = needle
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        if self.needle in str(event.get("log_format", "")):
            self.events.append(event)

    def __enter__(self) -> LogLines:
        globalLogPublisher.addObserver(cast(Any, self))
        return self

    def __exit__(self, *exc: Any) -> None:
        globalLogPublisher.removeObserver(cast(Any, self))


# -- the official Python SDK's server over stdio -----------------------------------


@pytest_twisted.ensureDeferred
async def test_stdio_tools_results_and_progress(tmp_path: Path) -> None:
    connection = await started(stdio_config())
    try:
        tools = {t.name: t for t in connection.tools}
        assert tools["echo"].category.value == "safe_chain"  # readOnlyHint
        assert tools["wipe"].category.value == "dangerous"  # destructiveHint
        assert tools["add"].category.value == "async_required"
        assert await connection.call("add", {"a": 2, "b": 3}) == {
            "success": True, "content": "5", "structured": {"result": 5}}
        picture = await connection.call("picture", {})
        assert picture["content"].startswith("[image: image/png,")
        failed = await connection.call("fail", {"reason": "boom"})
        assert failed["success"] is False and failed["error"]
        seen: list[dict[str, Any]] = []
        session = connection.session
        assert session is not None
        result = await session.call_tool("slow", {"seconds": 0.2}, on_progress=seen.append)
        assert [p["progress"] for p in seen] == [0, 1, 2, 3]
        assert result["content"][0]["text"] == "slept 0.2"
        # the server adds a tool and says so: the new list is read
        before = connection.tools_version
        assert (await connection.call("grow", {}))["content"] == "grown"
        await wait_for(lambda: connection.tools_version > before, "the changed list read")
        assert "extra" in {t.name for t in connection.tools}
        assert (await connection.call("extra", {}))["content"] == "extra!"
    finally:
        await connection.stop()


@pytest_twisted.ensureDeferred
async def test_cancelling_a_call_cancels_it_in_the_server(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    connection = await started(stdio_config(env={"MCP_FIXTURE_MARKS": str(marks)}))
    try:
        d = connection.call("slow", {"seconds": 30})
        await task.deferLater(reactor(), 0.5, lambda: None)
        d.cancel()
        with pytest.raises(defer.CancelledError):
            await d
        await wait_for(lambda: any(marks.iterdir()), "the server saw notifications/cancelled")
        # the session goes on: the next call is answered
        assert (await connection.call("echo", {"text": "still here"}))["content"] == "still here"
    finally:
        await connection.stop()


@pytest_twisted.ensureDeferred
async def test_a_server_killed_mid_call_gives_a_clear_error_and_is_restarted() -> None:
    connection = await started(stdio_config())
    try:
        first_pid = int((await connection.call("pid", {}))["content"])
        call = connection.call("slow", {"seconds": 30})
        await task.deferLater(reactor(), 0.3, lambda: None)
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(ConnectionError) as caught:
            await call
        assert "went away" in str(caught.value) and "signal 9" in str(caught.value)
        assert connection.state == "restarting" and connection.restarts == 1
        await wait_for(lambda: connection.ready, "the restarted server ready")
        assert int((await connection.call("pid", {}))["content"]) != first_pid
    finally:
        await connection.stop()


@pytest_twisted.ensureDeferred
async def test_stderr_goes_to_our_log_bounded_and_stop_ends_the_child() -> None:
    connection = await started(stdio_config())
    transport = cast(StdioTransport, cast(Any, connection.session).transport)
    try:
        with LogLines("stderr: {line}") as lines:
            await connection.call("shout", {"lines": 3, "width": 10})
            await wait_for(lambda: len(lines.events) >= 3, "three stderr lines logged")
            assert lines.events[0]["line"] == "0:" + "x" * 10
            await connection.call("shout", {"lines": 40, "width": 5000})
            await task.deferLater(reactor(), 1.0, lambda: None)
        logged = [e["line"] for e in lines.events]
        assert max(len(line) for line in logged) <= STDERR_LINE_BYTES + 40
        assert "bytes cut]" in logged[-1]
        assert sum(len(line) for line in logged) <= STDERR_BUDGET_BYTES + STDERR_LINE_BYTES + 40
        assert len(logged) < 3 + 40  # the budget of the minute ran out
    finally:
        await connection.stop()
    assert transport.ended


# -- the official Python SDK's server over Streamable HTTP ---------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def http_server(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, FIXTURE, "http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    await wait_for(listening, "the HTTP MCP server listening")
    return process


@pytest_twisted.ensureDeferred
async def test_http_session_resumption_and_a_new_session_after_a_404() -> None:
    port = free_port()
    process = await http_server(port)
    connection = await started(McpServerConfig(
        name="web", url=f"http://127.0.0.1:{port}/mcp", timeout=20))
    try:
        transport = cast(HttpTransport, cast(Any, connection.session).transport)
        first_session = transport.session_id
        assert first_session
        assert (await connection.call("add", {"a": 20, "b": 22}))["content"] == "42"
        # the server closes the stream before answering: we resume it (Last-Event-ID)
        assert (await connection.call("polled", {}))["content"] == "answered after a resumption"
        assert transport.resumes >= 1
        # a list change the server sends on its own stream (GET) is heard
        before = connection.tools_version
        assert (await connection.call("grow", {}))["content"] == "grown"
        await wait_for(lambda: connection.tools_version > before, "the changed list read")
        assert "extra" in {t.name for t in connection.tools}
        # the server restarts and forgets our session: 404, a new session, the call again
        process.terminate()
        process.wait(10)
        process = await http_server(port)
        assert (await connection.call("echo", {"text": "again"}))["content"] == "again"
        assert transport.session_id and transport.session_id != first_session
        assert connection.ready
    finally:
        await connection.stop()
        process.terminate()
        process.wait(10)


# -- the reference server from npm ---------------------------------------------------


def everything_config() -> McpServerConfig:
    assert EVERYTHING.exists(), (f"{EVERYTHING} is missing: `make mcp-everything` installs "
                                 f"@modelcontextprotocol/server-everything")
    return McpServerConfig(name="everything", command=str(EVERYTHING), args=("stdio",),
                           timeout=20, prefix="ev_")


@pytest_twisted.ensureDeferred
async def test_the_reference_server_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_TOOLS_TEST_SECRET", "do-not-leak")
    connection = await started(everything_config())
    try:
        names = {t.remote_name: t for t in connection.tools}
        assert {"echo", "get-sum", "get-tiny-image", "get-env"} <= set(names)
        assert names["get-sum"].name == "ev_get-sum"
        echo = await connection.call("echo", {"message": "hello"})
        assert echo["success"] and "hello" in echo["content"]
        total = await connection.call("get-sum", {"a": 2, "b": 40})
        assert "42" in total["content"]
        image = await connection.call("get-tiny-image", {})
        assert "[image: image/png" in image["content"] and len(image["content"]) < 2000
        env = await connection.call("get-env", {})
        assert "PATH" in env["content"] and "do-not-leak" not in env["content"]
        links = await connection.call("get-resource-links", {"count": 2})
        assert links["content"].count("[resource link:") == 2
    finally:
        await connection.stop()


# -- the whole path: an assistant's loop, its history, the API ------------------------

SCENARIO = """
model = "scripted"
[[rules]]
match = "sum"
[[rules.turns]]
tool_calls = [{ name = "add", arguments = { a = 2, b = 3 } }]
[[rules.turns]]
tool_calls = [{ name = "say", arguments = { message = "That makes five." } }]
[default]
tool_calls = [{ name = "say", arguments = { message = "Pardon?" } }]
"""


@pytest_twisted.ensureDeferred
async def test_an_assistant_calls_an_mcp_tool_and_the_api_shows_the_server(
        tmp_path: Path) -> None:
    import treq
    from twisted.web.client import Agent, HTTPConnectionPool

    from ai_tools.standalone.app import build_service
    from ai_tools.standalone.config import parse_config

    scenario = tmp_path / "scenario.toml"
    scenario.write_text(SCENARIO)
    config = parse_config({
        "store": {"path": str(tmp_path / "state.sqlite")},
        "world": {"file": str(WORLD)},
        "models": {"default": {"scenario": str(scenario)}},
        "assistants": [{"name": "pip", "character_id": "char:pip", "mcp_servers": ["fx"]}],
        "http": {"listen": "127.0.0.1:0"},
        "mcp": {"servers": {"fx": {"command": sys.executable, "args": [FIXTURE, "stdio"]}}},
    }, source="test.toml", base=tmp_path)
    app = build_service(config, reactor=reactor())
    app.startService()
    pool = HTTPConnectionPool(reactor(), persistent=False)
    try:
        await app.when_ready()
        await wait_for(lambda: app.mcp_client.connections["fx"].ready, "fx ready")
        service = app.assistants
        await service.send("pip", {"type": "say", "from": "bob", "text": "what is the sum?"})
        result = await service.run_tick("pip")
        assert result.loop is not None, result
        assert [r["tool"] for r in result.loop.results][:2] == ["add", "say"]
        answers = [m for m in service.history("pip") if m.get("role") == "tool"]
        assert json.loads(answers[0]["content"])["content"] == "5"
        client = treq.client.HTTPClient(Agent(reactor(), pool=pool))  # type: ignore[arg-type]
        response = await client.get(f"http://{app.addresses['http']}/mcp/servers")
        assert response.code == 200
        (server,) = (await response.json())["servers"]
        assert server["name"] == "fx" and server["state"] == "ready"
        assert server["transport"] == "stdio"
        assert "add" in {t["name"] for t in server["tools"]}
    finally:
        await pool.closeCachedConnections()
        await app.stopService()
    assert app.mcp_client.connections["fx"].state == "stopped"
