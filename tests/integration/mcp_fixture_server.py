"""A real MCP server for the client's tests, written with the official SDK (``mcp``).

``python mcp_fixture_server.py stdio`` serves over stdio;
``python mcp_fixture_server.py http PORT`` serves Streamable HTTP on
127.0.0.1:PORT at ``/mcp``, with an in-memory event store (resumable streams,
``retry`` of 200 ms).  ``MCP_FIXTURE_MARKS`` names a directory where the
``slow`` tool writes ``cancelled-<n>`` when a call of it is cancelled.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp_types import ToolAnnotations

server = MCPServer("ai-tools-fixture", version="1.0")
_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Take ``seconds``, reporting progress in four steps."""
    try:
        for step in range(4):
            await ctx.report_progress(step, 4, f"step {step}")
            await anyio.sleep(seconds / 4)
    except anyio.get_cancelled_exc_class():
        marks = os.environ.get("MCP_FIXTURE_MARKS")
        if marks:
            count = len(list(Path(marks).glob("cancelled-*")))
            (Path(marks) / f"cancelled-{count}").write_text("cancelled")
        raise
    return f"slept {seconds}"


@server.tool()
def traced(ctx: Context) -> str:
    """The trace context the call came with: ``traceparent`` of its ``_meta`` and of its
    HTTP request's headers (JSON; None where there is none)."""
    meta = ctx.request_context.meta or {}
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return json.dumps({"meta": meta.get("traceparent"),
                       "header": headers.get("traceparent") if headers is not None else None})


@server.tool()
def fail(reason: str) -> str:
    """Always fails with ``reason``."""
    raise ValueError(reason)


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def wipe() -> str:
    """Pretend to delete everything."""
    return "wiped"


@server.tool()
def picture() -> Image:
    """A one-pixel PNG."""
    return Image(data=_PNG, format="png")


@server.tool()
def shout(lines: int, width: int = 10) -> str:
    """Write ``lines`` lines of ``width`` characters to stderr."""
    for n in range(lines):
        print(f"{n}:" + "x" * width, file=sys.stderr, flush=True)
    return "shouted"


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named ``extra`` and say the list changed."""
    server.add_tool(lambda: "extra!", name="extra", description="Added at run time.")
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
async def polled(ctx: Context) -> str:
    """Close our stream before answering: the client must resume it."""
    await ctx.report_progress(0, 1, "before the stream closes")
    await ctx.close_sse_stream()
    await anyio.sleep(0.5)
    return "answered after a resumption"


class MemoryEventStore(EventStore):
    """Every event of every stream, in memory (a test server's resumability)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str,
                                  send_callback: EventCallback) -> str | None:
        stream = next((s for e, s, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        after = False
        for event_id, stream_id, message in self.events:
            if after and stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]),
                   event_store=MemoryEventStore(), retry_interval=200)


if __name__ == "__main__":
    main()
