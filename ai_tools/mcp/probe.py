"""``python -m ai_tools.mcp.probe``: connect to one MCP server the way the service does.

Initialises (version negotiation), lists the tools as an assistant would get
them (names, categories), and calls tools if asked, printing each result as
the model would read it — a quick check of an ``[mcp.servers.NAME]`` table
before the service uses it, and the client command of the official
conformance suite (``make mcp-conformance-client``)::

    python -m ai_tools.mcp.probe http://127.0.0.1:8000/mcp
    python -m ai_tools.mcp.probe --call add --arguments '{"a": 1, "b": 2}' -- python server.py
    python -m ai_tools.mcp.probe --call-all URL     # each tool, with its required arguments made up

A URL is a Streamable HTTP server; anything else is a command to start as a
stdio server.  Exit status 0 when everything asked for worked.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from twisted.internet import defer, task

from ai_tools.mcp.config import McpServerConfig
from ai_tools.mcp.servers import McpServerConnection

__all__ = ["main", "sample_arguments"]

_SAMPLES = {"number": 1, "integer": 1, "string": "test", "boolean": True, "array": [],
            "object": {}}


def sample_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Made-up values for the required properties of ``schema`` (defaults, enums first)."""
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name in schema.get("required") or []:
        found = properties.get(name)
        spec: dict[str, Any] = found if isinstance(found, dict) else {}
        if "default" in spec:
            arguments[name] = spec["default"]
        elif isinstance(spec.get("enum"), list) and spec["enum"]:
            arguments[name] = spec["enum"][0]
        else:
            kind = spec.get("type")
            arguments[name] = _SAMPLES.get(kind if isinstance(kind, str) else "string", "test")
    return arguments


def _config(target: list[str]) -> McpServerConfig:
    if len(target) == 1 and target[0].startswith(("http://", "https://")):
        return McpServerConfig(name="probe", url=target[0], timeout=20, init_timeout=20)
    return McpServerConfig(name="probe", command=target[0], args=tuple(target[1:]),
                           timeout=20, init_timeout=20)


async def _until_settled(reactor: Any, connection: McpServerConnection) -> None:
    for _ in range(400):
        if connection.state in ("ready", "failed"):
            return
        await task.deferLater(reactor, 0.05, lambda: None)


async def _probe(reactor: Any, options: argparse.Namespace) -> int:
    connection = McpServerConnection(_config(options.target), reactor)
    connection.start()
    try:
        await _until_settled(reactor, connection)
        if not connection.ready:
            print(f"not ready: {connection.state}: {connection.error}", file=sys.stderr)
            return 1
        status = connection.status()
        print(f"server: {json.dumps(status['server_info'])} protocol "
              f"{status['protocol_version']}")
        for tool in connection.tools:
            print(f"tool {tool.name} ({tool.category.value}): {tool.description[:80]}")
        calls = [(t.remote_name, sample_arguments(t.parameters)) for t in connection.tools] \
            if options.call_all else []
        if options.call:
            calls.append((options.call, json.loads(options.arguments)))
        failed = 0
        for name, arguments in calls:
            result = await connection.call(name, arguments)
            print(f"{name}: {json.dumps(result, ensure_ascii=False)[:2000]}")
            failed += result.get("success") is False
        return 1 if failed else 0
    finally:
        await connection.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ai_tools.mcp.probe",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--call", help="the name of a tool to call")
    parser.add_argument("--arguments", default="{}", help="its arguments, a JSON object")
    parser.add_argument("--call-all", action="store_true",
                        help="call every tool with made-up required arguments")
    parser.add_argument("target", nargs="+", help="a server URL, or a command and its arguments")
    options = parser.parse_args(argv)

    def run(reactor: Any) -> defer.Deferred[None]:
        d = defer.ensureDeferred(_probe(reactor, options))

        def done(code: int) -> None:
            if code:
                raise SystemExit(code)

        return d.addCallback(done)

    task.react(run)


if __name__ == "__main__":
    main()
