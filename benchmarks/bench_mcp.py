"""Client CPU per MCP ``tools/call`` round trip: ours next to the official Python SDK's.

The server is the same for both: ``tests/integration/mcp_fixture_server.py``
(the official SDK's ``MCPServer``), over stdio (each client starts its own
child) and over Streamable HTTP (one server process on 127.0.0.1 for both).
Each client runs in a Python of its own (our reactor cannot be restarted; the
SDK's asyncio loop should not share a process with it), connects and
initialises, makes :data:`WARMUP` calls, then :data:`CALLS` calls of ``echo``
one after the other, and reports the CPU time of its own process over those
calls (``time.process_time``: every thread of the client, none of the server).
Ours is :meth:`~ai_tools.mcp.servers.McpServerConnection.call` (the request,
the answer, the result mapped for the model); the SDK's is
``mcp.Client.call_tool`` (its pydantic ``CallToolResult``).  The pairs run
:data:`ROUNDS` times alternating which goes first; the ratio is the median of
the per-pair ratios.  Target: ours ≤ the SDK's (ratio ≤ 1.0).

Run: ``make bench BENCH=mcp`` (``BENCH_MCP_CALLS`` changes the number of calls).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = str(ROOT / "tests" / "integration" / "mcp_fixture_server.py")
CALLS = int(os.environ.get("BENCH_MCP_CALLS", "1000"))
WARMUP = 50
ROUNDS = 3
TARGET_RATIO = 1.0
_ARGUMENTS = {"text": "The lantern is lit."}


# -- in the child -------------------------------------------------------------------


def _ours(target: str, out: Path) -> None:
    """Measure our client; the figure goes to ``out`` (``task.react`` ends the process)."""
    from twisted.internet import defer, task

    from ai_tools.mcp.config import McpServerConfig
    from ai_tools.mcp.servers import McpServerConnection

    if target.startswith("http"):
        config = McpServerConfig(name="bench", url=target)
    else:
        config = McpServerConfig(name="bench", command=sys.executable, args=(SERVER, "stdio"))
    async def measure(reactor: Any) -> None:
        connection = McpServerConnection(config, reactor)
        connection.start()
        while not connection.ready:
            if connection.state == "failed":
                raise RuntimeError(connection.error)
            await task.deferLater(reactor, 0.02, lambda: None)
        for _ in range(WARMUP):
            await connection.call("echo", _ARGUMENTS)
        started = time.process_time()
        for _ in range(CALLS):
            result = await connection.call("echo", _ARGUMENTS)
        spent = time.process_time() - started
        assert result["content"] == _ARGUMENTS["text"], result
        out.write_text(json.dumps(spent))
        await connection.stop()

    task.react(lambda reactor: defer.ensureDeferred(measure(reactor)))


def _sdk(target: str) -> float:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    server: Any = target if target.startswith("http") else StdioServerParameters(
        command=sys.executable, args=[SERVER, "stdio"])

    async def measure() -> float:
        async with Client(server) as client:
            for _ in range(WARMUP):
                await client.call_tool("echo", _ARGUMENTS)
            started = time.process_time()
            for _ in range(CALLS):
                result = await client.call_tool("echo", _ARGUMENTS)
            spent = time.process_time() - started
            assert result.content[0].text == _ARGUMENTS["text"]  # type: ignore[union-attr]
            return spent

    return anyio.run(measure)


def child(which: str, target: str, out: str) -> None:
    """Measure one client (``ours`` or ``sdk``) against ``target`` (a URL or ``stdio``)."""
    if which == "sdk":
        Path(out).write_text(json.dumps(_sdk(target)))
    else:
        _ours(target, Path(out))


# -- in the parent --------------------------------------------------------------------


def _measure(which: str, target: str) -> float:
    """CPU seconds per call of one client, measured in a Python of its own."""
    out = ROOT / "var" / f"bench-mcp-{which}.json"
    out.parent.mkdir(exist_ok=True)
    out.unlink(missing_ok=True)
    code = (f"import sys; sys.argv = ['bench_mcp']; from benchmarks.bench_mcp import child; "
            f"child({which!r}, {target!r}, {str(out)!r})")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False,
                   stderr=subprocess.DEVNULL, timeout=600)
    if not out.exists():
        raise RuntimeError(f"the {which} client against {target} reported nothing")
    spent = float(json.loads(out.read_text()))
    out.unlink()
    return spent / CALLS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, SERVER, "http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}/mcp"
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("the HTTP MCP server did not listen within 30 s")


def _pairs(target: str) -> tuple[float, float, float]:
    """Median µs per call of ours and the SDK's, and the median per-pair ratio."""
    ours, sdk, ratios = [], [], []
    for round_ in range(ROUNDS):
        order = ("ours", "sdk") if round_ % 2 == 0 else ("sdk", "ours")
        got = {which: _measure(which, target) for which in order}
        ours.append(got["ours"])
        sdk.append(got["sdk"])
        ratios.append(got["ours"] / got["sdk"])
    return (statistics.median(ours) * 1e6, statistics.median(sdk) * 1e6,
            statistics.median(ratios))


def main() -> None:
    print(f"client CPU per tools/call round trip, {CALLS} calls of echo after {WARMUP} "
          f"warm-up calls, {ROUNDS} rounds (median), same server (the official SDK's)")
    rows = [("stdio", *_pairs("stdio"))]
    process, url = _http_server()
    try:
        rows.append(("Streamable HTTP", *_pairs(url)))
    finally:
        process.terminate()
        process.wait(10)
    print(f"{'transport':<16} {'ours µs':>9} {'SDK µs':>9} {'ratio':>6}  target ≤ {TARGET_RATIO}")
    for name, ours, sdk, ratio in rows:
        verdict = "ok" if ratio <= TARGET_RATIO else "OVER"
        print(f"{name:<16} {ours:>9.0f} {sdk:>9.0f} {ratio:>6.2f}  {verdict}")
