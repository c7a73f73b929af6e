"""The official MCP Python SDK's client against our server, as a child process of a test.

The SDK runs on asyncio; the tests run on Twisted's reactor, so the SDK runs
here, in its own process, and prints what it saw as one JSON document::

    python tests/integration/mcp_sdk_client.py http URL [--token-env VAR] CALLS
    python tests/integration/mcp_sdk_client.py stdio --command '["python", ...]' CALLS

``CALLS`` is a JSON list of ``[tool, arguments]`` given with ``--calls``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


async def _session_report(session: ClientSession, calls: list[Any]) -> dict[str, Any]:
    init = await session.initialize()
    listed = await session.list_tools()
    results = []
    for name, arguments in calls:
        result = await session.call_tool(name, arguments)
        results.append({"name": name, "isError": bool(result.is_error),
                        "text": [c.text for c in result.content if c.type == "text"],
                        "structured": result.structured_content})
    await session.send_ping()
    return {"protocol": init.protocol_version, "server": init.server_info.name,
            "instructions": init.instructions,
            "tools": {t.name: t.annotations.model_dump(by_alias=True, exclude_none=True)
                      if t.annotations else {} for t in listed.tools},
            "results": results}


async def _http(url: str, token: str | None, calls: list[Any]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as client, \
            streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        return await _session_report(session, calls)


async def _stdio(command: list[str], calls: list[Any]) -> dict[str, Any]:
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        return await _session_report(session, calls)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=("http", "stdio"))
    parser.add_argument("--url")
    parser.add_argument("--token-env")
    parser.add_argument("--calls", default="[]")
    parser.add_argument("--command", default="[]", help="a JSON list: the server command")
    args = parser.parse_args()
    calls = json.loads(args.calls)
    if args.transport == "http":
        token = os.environ.get(args.token_env) if args.token_env else None
        report = asyncio.run(asyncio.wait_for(_http(args.url, token, calls), 60))
    else:
        report = asyncio.run(asyncio.wait_for(_stdio(json.loads(args.command), calls), 60))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
