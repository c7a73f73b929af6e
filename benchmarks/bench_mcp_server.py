"""The MCP server: CPU per ``tools/call`` round trip, ours next to the official SDK's server.

``make bench BENCH=mcp_server``.  Both servers run as child processes on
127.0.0.1 and serve the same tool (``test_simple_text``, a fixed text) over
Streamable HTTP: ours is the conformance fixture (``scripts/mcp/everything_server.py``:
our session logic and transport on twisted.web), the SDK's is its ``MCPServer``
(asyncio, starlette, pydantic).  One plain ``http.client`` connection drives
both the same way (initialize, then N calls), and the CPU time each server
process spent (user + system, from ``/proc/PID/stat``) is divided by N.  The
client's own cost is not counted.  Figures: docs/mcp.md.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALLS = int(os.environ.get("BENCH_MCP_CALLS", "2000"))
WARMUP = 200

SDK_SERVER = """
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer(name="sdk-bench")

@server.tool()
def test_simple_text() -> str:
    return "This is a simple text response for testing."

server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(conn: http.client.HTTPConnection, body: dict[str, object],
          session: str | None) -> tuple[int, str | None, bytes]:
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = "2025-06-18"
    conn.request("POST", "/mcp", json.dumps(body), headers)
    response = conn.getresponse()
    data = response.read()
    return response.status, response.getheader("mcp-session-id"), data


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError("the server exited at start")
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def _drive(port: int, pid: int) -> float:
    """Server CPU seconds per call, after a warm-up."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    status, session, _ = _post(conn, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                      "params": {"protocolVersion": "2025-06-18",
                                                 "capabilities": {},
                                                 "clientInfo": {"name": "bench"}}}, None)
    assert status == 200 and session, status
    _post(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    call = {"jsonrpc": "2.0", "method": "tools/call",
            "params": {"name": "test_simple_text", "arguments": {}}}
    for number in range(WARMUP):
        _post(conn, {**call, "id": number + 1}, session)
    before = _cpu_seconds(pid)
    for number in range(CALLS):
        status, _, data = _post(conn, {**call, "id": WARMUP + number + 1}, session)
        assert status == 200 and b"simple text response" in data, (status, data[:200])
    spent = _cpu_seconds(pid) - before
    conn.close()
    return spent / CALLS


def _measure(command: list[str], port: int) -> float:
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc)
        return _drive(port, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    """Print the CPU per call of both servers and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        sdk_script = Path(tmp) / "sdk_server.py"
        sdk_script.write_text(SDK_SERVER)
        port = _free_port()
        ours = _measure([sys.executable, "scripts/mcp/everything_server.py", "--port",
                         str(port)], port)
        port = _free_port()
        sdk = _measure([sys.executable, str(sdk_script), str(port)], port)
    print(f"server CPU per tools/call over Streamable HTTP ({CALLS} calls, one connection):")
    print(f"  ours (twisted.web)       {ours * 1e6:8.0f} µs")
    print(f"  official SDK MCPServer   {sdk * 1e6:8.0f} µs")
    print(f"  ours / SDK               {ours / sdk:8.2f}  (target: <= 1)")


if __name__ == "__main__":
    main()
