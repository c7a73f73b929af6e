"""An in-memory MCP server behind a transport, for the client's unit tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.mcp.jsonrpc import (
    ErrorResponse,
    Message,
    Notification,
    Request,
    Response,
)

Handler = Callable[[Request], "dict[str, Any] | defer.Deferred[dict[str, Any]] | None"]


def listed(name: str, **extra: Any) -> dict[str, Any]:
    """A ``tools/list`` entry with an object schema of one string ``text``."""
    entry: dict[str, Any] = {
        "name": name, "description": f"The {name} tool.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }
    entry.update(extra)
    return entry


class FakeServer:
    """A transport whose far end is a scripted MCP server.

    Requests are answered by ``handlers[method]`` (a result dict; a Deferred
    of one, answered when it fires; or None to leave it unanswered); the
    defaults answer ``initialize`` (with ``version``) and ``tools/list`` (with
    ``tools``).  Everything sent is kept in ``sent``.
    """

    def __init__(self, tools: list[dict[str, Any]] | None = None,
                 version: str = "2025-11-25") -> None:
        self.tools = list(tools if tools is not None else [listed("echo")])
        self.version = version
        self.sent: list[Message] = []
        self.deliver: Callable[[Message], None] | None = None
        self.lost: Callable[[Failure], None] | None = None
        self.closed = False
        self.handlers: dict[str, Handler] = {
            "initialize": lambda r: {"protocolVersion": self.version, "capabilities": {},
                                     "serverInfo": {"name": "fake", "version": "1"}},
            "tools/list": lambda r: {"tools": self.tools},
            "tools/call": lambda r: {"content": [{"type": "text", "text": "ok"}]},
        }
        self.negotiated_version: str | None = None
        self.session_id: str | None = None
        self.refuse_calls: Exception | None = None
        """Fail the sending of every ``tools/call`` with this (until ``initialize``)."""

    def start(self, deliver: Callable[[Message], None],
              lost: Callable[[Failure], None]) -> defer.Deferred[None]:
        self.deliver, self.lost = deliver, lost
        return defer.succeed(None)

    def negotiated(self, version: str) -> None:
        self.negotiated_version = version

    def send(self, message: Message) -> defer.Deferred[None]:
        if self.closed:
            return defer.fail(ConnectionError("closed"))
        self.sent.append(message)
        if isinstance(message, Request) and message.method == "initialize":
            self.refuse_calls = None
        if isinstance(message, Request) and message.method == "tools/call" \
                and self.refuse_calls is not None:
            return defer.fail(self.refuse_calls)
        if isinstance(message, Request):
            handler = self.handlers.get(message.method)
            if handler is None:
                self.push(ErrorResponse(message.id, -32601, "no such method"))
            else:
                answer = handler(message)
                if isinstance(answer, defer.Deferred):
                    answer.addCallback(lambda result, m=message: self.push(Response(m.id, result)))
                elif answer is not None:
                    self.push(Response(message.id, answer))
        return defer.succeed(None)

    def push(self, message: Message) -> None:
        """The server sends ``message``."""
        assert self.deliver is not None
        self.deliver(message)

    def die(self, why: str = "killed") -> None:
        """The server goes away."""
        self.closed = True
        assert self.lost is not None
        self.lost(Failure(ConnectionError(why)))

    def close(self) -> defer.Deferred[None]:
        self.closed = True
        return defer.succeed(None)

    def requests(self, method: str) -> list[Request]:
        return [m for m in self.sent if isinstance(m, Request) and m.method == method]

    def notifications(self, method: str) -> list[Notification]:
        return [m for m in self.sent if isinstance(m, Notification) and m.method == method]

    def answers(self) -> list[Response | ErrorResponse]:
        return [m for m in self.sent if isinstance(m, (Response, ErrorResponse))]
