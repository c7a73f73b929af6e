"""The game as an MCP server in a real ``twistd`` process: ``/mcp`` behind the API's checks,
the official MCP SDK's client over Streamable HTTP and over stdio (the bridge command).

The SDK runs on asyncio, so its client runs in a child process
(:mod:`tests.integration.mcp_sdk_client`) and reports what it saw as JSON.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.internet import defer, protocol, utils

from tests.integration.twistd_process import (
    ROOT,
    SCENARIO_MODEL,
    TWISTD,
    WAIT,
    clean_environment,
    http,
    processes,
    reactor,
    sse_events,
    start_and_wait,
    until,
    write_config,
    write_scenario,
)

__all__ = ["http", "processes"]  # fixtures

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

TOKEN = "mcp-test-token-0123456789"
CLIENT = str(ROOT / "tests" / "integration" / "mcp_sdk_client.py")
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}}
BOTH = [b"application/json, text/event-stream"]


async def sdk_client(*args: str) -> dict[str, Any]:
    """Run the SDK's client (its own 60-second bound) and return its report."""
    env = {**clean_environment(), "MCP_TEST_TOKEN": TOKEN}
    out, err, code = await utils.getProcessOutputAndValue(
        sys.executable, [CLIENT, *args], env=env, path=str(ROOT))
    assert code == 0, err.decode("utf-8", "replace")[-3000:]
    report: dict[str, Any] = json.loads(out)
    return report


async def start(tmp_path: Path, processes: Any) -> tuple[Any, str]:
    write_scenario(tmp_path)
    config = write_config(tmp_path, models=SCENARIO_MODEL,
                          extra='[mcp.serve]\ncharacter = "char:bob"\n')
    return await start_and_wait(processes, tmp_path, config,
                                env={"AI_TOOLS_HTTP_TOKEN": TOKEN})


def post(http: Any, url: str, body: Any, **headers: list[bytes]) -> Any:
    sent = {b"content-type": [b"application/json"], b"accept": BOTH,
            b"authorization": [f"Bearer {TOKEN}".encode()]}
    sent.update({k.replace("_", "-").encode(): v for k, v in headers.items()})
    return http.post(url, data=json.dumps(body).encode(), headers=sent)


@pytest_twisted.ensureDeferred
async def test_the_sdk_client_acts_as_the_character_over_http_and_stdio(
        tmp_path: Path, processes: Any, http: Any) -> None:
    """Both transports: the tools with their annotations, a call that speaks in the world
    (Pip, in the room, hears Bob), a dangerous tool refused by the gate."""
    proc, base = await start(tmp_path, processes)
    stream = await http.get(f"{base}/events?types=tool_call,tool_result", unbuffered=True,
                            headers={b"authorization": [f"Bearer {TOKEN}".encode()]})
    chunks: list[bytes] = []
    stream_done = treq.collect(stream, chunks.append)
    calls = json.dumps([["say", {"message": "a pint, please"}],
                        ["set_attribute", {"target": "char:bob", "key": "k", "value": "v"}]])
    report = await sdk_client("http", "--url", f"{base}/mcp", "--token-env", "MCP_TEST_TOKEN",
                              "--calls", calls)
    assert report["protocol"] == "2025-11-25" and report["server"] == "ai_tools"
    assert "char:bob" in report["instructions"]
    assert report["tools"]["inspect_location"]["readOnlyHint"] is True
    assert "set_attribute" not in report["tools"]  # DANGEROUS: not offered by default
    assert "go_to_sleep" not in report["tools"]  # an assistant's own loop
    said, refused = report["results"]
    assert said["isError"] is False and "a pint, please" in said["text"][0]
    assert refused["isError"] is True and "blocked_by_tool_mode" in refused["text"][0]

    async def pip_heard(text: str) -> bool:
        response = await http.get(f"{base}/characters/char:pip/heard?limit=50",
                                  headers={b"authorization": [f"Bearer {TOKEN}".encode()]})
        heard = await response.json()
        return any(text in m["text"] for m in heard["messages"])

    assert await pip_heard("a pint, please")
    stdio = await sdk_client("stdio", "--calls", json.dumps([["say", {"message": "over stdio"}]]),
                             "--command", json.dumps([
                                 sys.executable, "-m", "ai_tools.mcp.server_stdio",
                                 "--url", f"{base}/mcp", "--token-env", "MCP_TEST_TOKEN"]))
    assert stdio["results"][0]["isError"] is False
    assert await pip_heard("over stdio")
    # the audit trail: one info line per MCP call in the service's log, and the
    # events every observer sees (the event stream here)
    await until(lambda: proc.stdout.count("MCP call: say by mcp as ") == 2, "the log")

    def audited() -> list[tuple[str, Any]]:
        return [(kind, data["tool"]) for kind, data in sse_events(b"".join(chunks))
                if data.get("assistant") == "mcp" and data.get("source") == "mcp"]

    await until(lambda: len(audited()) == 6, "the audit events")
    assert audited()[:2] == [("tool_call", "say"), ("tool_result", "say")]
    stream_done.addErrback(lambda _: None)  # the stream ends when the service does


@pytest_twisted.ensureDeferred
async def test_mcp_requests_pass_the_apis_checks(tmp_path: Path, processes: Any,
                                                 http: Any) -> None:
    """Token (401), Host (403), Accept (406), content type (415), session (400/404), DELETE."""
    _, base = await start(tmp_path, processes)
    url = f"{base}/mcp"
    no_token = await http.post(url, data=json.dumps(INIT).encode(),
                               headers={b"content-type": [b"application/json"], b"accept": BOTH})
    assert no_token.code == 401
    rebound = await post(http, url, INIT, host=[b"evil.example.com"])
    assert rebound.code == 403
    json_only = await post(http, url, INIT, accept=[b"application/json"])
    assert json_only.code == 406
    as_text = await post(http, url, INIT, content_type=[b"text/plain"])
    assert as_text.code == 415
    no_session = await post(http, url, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert no_session.code == 400
    unknown = await post(http, url, {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                         mcp_session_id=[b"nope"])
    assert unknown.code == 404
    bad_version = await post(http, url, INIT, mcp_protocol_version=[b"1999-01-01"])
    assert bad_version.code == 400
    garbage = await http.post(url, data=b"{not json", headers={
        b"content-type": [b"application/json"], b"accept": BOTH,
        b"authorization": [f"Bearer {TOKEN}".encode()]})
    assert garbage.code == 400 and (await garbage.json())["error"]["code"] == -32700
    opened = await post(http, url, INIT)
    assert opened.code == 200
    session = opened.headers.getRawHeaders(b"mcp-session-id")[0]
    assert (await opened.json())["result"]["protocolVersion"] == "2025-06-18"
    note = await post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                      mcp_session_id=[session])
    assert note.code == 202
    pong = await post(http, url, {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                      mcp_session_id=[session])
    assert (await pong.json()) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    ended = await http.delete(url, headers={b"mcp-session-id": [session],
                                            b"authorization": [f"Bearer {TOKEN}".encode()]})
    assert ended.code == 204
    gone = await post(http, url, {"jsonrpc": "2.0", "id": 4, "method": "ping"},
                      mcp_session_id=[session])
    assert gone.code == 404


class Bridge(protocol.ProcessProtocol):
    """``python -m ai_tools.mcp.server_stdio``: lines in, lines out, stdin then closed."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.out = bytearray()
        self.ended: defer.Deferred[int] = defer.Deferred()

    def connectionMade(self) -> None:
        for line in self.lines:
            self.transport.write(line + b"\n")
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(reason.value.exitCode)


async def bridge(*args: str, lines: list[bytes], env: dict[str, str] | None = None
                 ) -> list[dict[str, Any]]:
    proc = Bridge(lines)
    command = [sys.executable, "-m", "ai_tools.mcp.server_stdio", *args]
    reactor().spawnProcess(proc, sys.executable, command, path=str(ROOT),
                           env={**clean_environment(), **(env or {})})
    code = await proc.ended.addTimeout(WAIT, reactor())
    assert code == 0, proc.out
    return [json.loads(line) for line in bytes(proc.out).splitlines() if line.strip()]


@pytest_twisted.ensureDeferred
async def test_the_bridge_answers_every_request_even_when_the_service_refuses(
        tmp_path: Path, processes: Any) -> None:
    """A wrong token or a service that is down: a JSON-RPC error naming the cause, per
    request; a line that is no JSON: a parse error; the bridge then ends with stdin."""
    _, base = await start(tmp_path, processes)
    init = json.dumps(INIT).encode()
    answers = await bridge("--url", f"{base}/mcp", "--token-env", "WRONG",
                           lines=[init, b"{oops"], env={"WRONG": "not-the-token-at-all"})
    assert answers[0]["id"] is None and answers[0]["error"]["code"] == -32700
    assert answers[1]["id"] == 1 and "HTTP 401" in answers[1]["error"]["message"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    answers = await bridge("--url", f"http://127.0.0.1:{closed}/mcp", lines=[init])
    assert answers[0]["id"] == 1 and "unreachable" in answers[0]["error"]["message"]
