"""The game's MCP server over stdio, for clients that spawn their servers.

An MCP client that starts servers as child processes (Claude Code, Cursor,
the MCP inspector...) runs::

    python -m ai_tools.mcp.server_stdio --config assistant.toml

This command does not run a second world: it bridges stdio to the running
service's ``/mcp`` (Streamable HTTP on its API port, with the API token), so
MCP sessions act on the one world and store the service owns, under the
same ``[mcp.serve]`` character, gates and audit trail.  (SQLite allows one
process per file, and two processes ticking one world would disagree.)  The
URL and the token come from the config's ``[http]`` table, or ``--url`` and
``--token-env VAR`` (the token is read from that variable, never from a flag).

Each line on stdin is one JSON-RPC message (bounded by ``--max-message-bytes``),
posted in order; each answer (a JSON body, or every event of an SSE answer)
becomes one line on stdout.  A request the service refuses (401, 403, 404, a
service that is down) gets a JSON-RPC error answer naming the cause.  End of
stdin ends the session (``DELETE``) and the process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from twisted.internet import defer, protocol
from twisted.internet.interfaces import IHalfCloseableProtocol, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.default_reactor import global_reactor
from ai_tools.llm.sse import SSEParser
from ai_tools.mcp.jsonrpc import (
    INTERNAL_ERROR,
    ErrorResponse,
    JSONRPCError,
    LineSplitter,
    Request,
    RequestId,
    decode_message,
    encode_message,
)

if TYPE_CHECKING:
    from twisted.web.http_headers import Headers

__all__ = ["StdioBridge", "main"]

T = TypeVar("T")

log = Logger()

DEFAULT_MAX_MESSAGE = 1024 * 1024


class _BodyReader(protocol.Protocol):
    """Reads one answer body: JSON (bounded) or SSE (each event's data handed on)."""

    def __init__(self, sse: bool, max_bytes: int, emit: Callable[[bytes], None]) -> None:
        self.sse = sse
        self.max_bytes = max_bytes
        self.emit = emit
        self.parser = SSEParser(max_line_bytes=max_bytes)
        self.buffer = bytearray()
        self.done: defer.Deferred[None] = defer.Deferred()
        self.error: str | None = None

    def dataReceived(self, data: bytes) -> None:
        """A chunk of the body."""
        try:
            if self.sse:
                self.parser.feed(data, self._event)
                return
            self.buffer += data
            if len(self.buffer) > self.max_bytes:
                raise ValueError(f"an answer exceeds {self.max_bytes} bytes")
        except ValueError as exc:
            self.error = str(exc)
            self.abort()

    def _event(self, data: str, event: str, last_id: str | None) -> None:
        if data.strip() and event == "message":
            self.emit(data.encode("utf-8"))

    def abort(self) -> None:
        """Drop the connection (a deadline, an oversized answer)."""
        if self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        """The body ended: hand a JSON body on."""
        if not self.sse and self.buffer and self.error is None:
            self.emit(bytes(self.buffer))
        self.done.callback(None)


@attrs.define(eq=False)
class StdioBridge:
    """Relays JSON-RPC lines between stdio and a Streamable HTTP MCP endpoint.

    ``write`` takes each outgoing line (without its newline); ``agent`` is an
    ``IAgent`` (treq's over its own pool in :func:`main`); ``deadline`` bounds
    each exchange in seconds.
    """

    url: str
    agent: Any
    clock: IReactorTime
    write: Callable[[bytes], None]
    token: str | None = None
    deadline: float = 330.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE
    session_id: bytes | None = None
    protocol_version: bytes | None = None
    _splitter: LineSplitter = attrs.field(init=False)
    _in_flight: set[defer.Deferred[None]] = attrs.field(factory=set, init=False)
    _opening: bool = attrs.field(default=False, init=False)
    _waiting: list[defer.Deferred[None]] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        self._splitter = LineSplitter(self.max_message_bytes)

    def received(self, data: bytes) -> None:
        """Bytes from stdin: post every complete line."""
        try:
            lines = self._splitter.feed(data)
        except JSONRPCError as exc:
            self._reply(ErrorResponse(None, exc.code, exc.message))
            return
        for line in lines:
            self.post(line)

    def post(self, line: bytes) -> defer.Deferred[None]:
        """Post one message; its answers go to ``write``."""
        try:
            message = decode_message(line, self.max_message_bytes)
        except JSONRPCError as exc:
            self._reply(ErrorResponse(None, exc.code, exc.message))
            return defer.succeed(None)
        request_id = message.id if isinstance(message, Request) else None
        if isinstance(message, Request) and message.method == "initialize":
            self._opening = True
            d = self._exchange(b"POST", line)
            d.addBoth(self._opened)
        else:
            d = self._when_open()
            d.addCallback(lambda _: self._exchange(b"POST", line))
        d.addCallback(self._took_headers, message)
        d.addErrback(self._failed, request_id)
        self._in_flight.add(d)
        d.addBoth(self._settled, d)
        return d

    def _when_open(self) -> defer.Deferred[None]:
        """Fires once the session is open (the ``initialize`` answer's headers came): the
        messages after it need its ``Mcp-Session-Id``."""
        if not self._opening:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._waiting.append(d)
        return d

    def _opened(self, value: T) -> T:
        self._opening = False
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(None)
        return value

    def _settled(self, value: T, d: defer.Deferred[None]) -> T:
        self._in_flight.discard(d)
        return value

    def _headers(self) -> Headers:
        from twisted.web.http_headers import Headers

        headers = Headers({b"content-type": [b"application/json"],
                           b"accept": [b"application/json, text/event-stream"]})
        if self.session_id is not None:
            headers.setRawHeaders(b"mcp-session-id", [self.session_id])
        if self.protocol_version is not None:
            headers.setRawHeaders(b"mcp-protocol-version", [self.protocol_version])
        if self.token is not None:
            headers.setRawHeaders(b"authorization", [b"Bearer " + self.token.encode()])
        return headers

    def _exchange(self, method: bytes, body: bytes | None) -> defer.Deferred[Any]:
        from io import BytesIO

        from twisted.web.client import FileBodyProducer

        producer = FileBodyProducer(BytesIO(body)) if body is not None else None
        d = self.agent.request(method, self.url.encode("ascii"), self._headers(), producer)
        d.addTimeout(self.deadline, self.clock)
        return d

    def _took_headers(self, response: Any, message: Any) -> defer.Deferred[None]:
        session = response.headers.getRawHeaders(b"mcp-session-id")
        if session:
            self.session_id = session[0]
        kind = (response.headers.getRawHeaders(b"content-type") or [b""])[0]
        if response.code >= 400 and isinstance(message, Request):
            return self._refused(response, message)
        reader = _BodyReader(kind.startswith(b"text/event-stream"), self.max_message_bytes,
                             self._relay)
        response.deliverBody(reader)
        timer = self.clock.callLater(self.deadline, reader.abort)
        reader.done.addBoth(lambda v: timer.cancel() if timer.active() else None)
        return reader.done

    def _refused(self, response: Any, message: Request) -> defer.Deferred[None]:
        """The service refused the request: the client gets a JSON-RPC error saying why."""
        lines: list[bytes] = []
        reader = _BodyReader(False, 64 * 1024, lines.append)
        response.deliverBody(reader)

        def answer(_: object) -> None:
            try:
                why = json.loads(lines[0]).get("error") if lines else None
            except (ValueError, AttributeError):
                why = None
            self._reply(ErrorResponse(message.id, INTERNAL_ERROR,
                                      f"the game's MCP endpoint answered HTTP {response.code}"
                                      + (f": {why}" if why else "")))

        return reader.done.addCallback(answer)

    def _relay(self, data: bytes) -> None:
        """One message from the service: remember the negotiated version; pass it on."""
        try:
            value = json.loads(data)
        except ValueError:
            log.warn("The MCP endpoint sent a message that is not JSON; dropped")
            return
        result = value.get("result") if isinstance(value, dict) else None
        if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str) \
                and "serverInfo" in result:
            self.protocol_version = result["protocolVersion"].encode("ascii", "replace")
        self.write(data)

    def _failed(self, failure: Failure, request_id: RequestId | None) -> None:
        why = ("no answer in time" if failure.check(defer.TimeoutError)
               else str(failure.value) or type(failure.value).__name__)
        log.warn("Posting to the MCP endpoint failed: {why}", why=why)
        if request_id is not None:
            self._reply(ErrorResponse(request_id, INTERNAL_ERROR,
                                      f"the game's MCP endpoint at {self.url} is unreachable "
                                      f"({why})"))

    def _reply(self, message: ErrorResponse) -> None:
        self.write(encode_message(message))

    def close(self) -> defer.Deferred[None]:
        """End of stdin: wait for answers in flight, then end the session (``DELETE``)."""
        pending = defer.DeferredList(list(self._in_flight), consumeErrors=True)

        def delete(_: object) -> defer.Deferred[None] | None:
            if self.session_id is None:
                return None
            d = self._exchange(b"DELETE", None)
            d.addCallback(lambda response: response.deliverBody(_BodyReader(
                False, 1024, lambda _: None)))
            return d.addErrback(lambda _: None)

        return pending.addCallback(delete)


@implementer(IHalfCloseableProtocol)
class _StdioProtocol(protocol.Protocol):
    """stdin to the bridge, its lines to stdout; stdin's end waits for the answers
    in flight (stdout stays open meanwhile), then ends the session and the process."""
    def __init__(self, bridge_factory: Callable[[Callable[[bytes], None]], StdioBridge],
                 finished: defer.Deferred[None]) -> None:
        self.bridge_factory = bridge_factory
        self.finished = finished
        self.bridge: StdioBridge | None = None

    def connectionMade(self) -> None:
        self.bridge = self.bridge_factory(self._write)

    def _write(self, line: bytes) -> None:
        transport: Any = self.transport
        if transport is not None:
            transport.write(line + b"\n")

    def dataReceived(self, data: bytes) -> None:
        assert self.bridge is not None
        self.bridge.received(data)

    def readConnectionLost(self) -> None:
        """End of stdin: finish what is in flight, then close stdout."""
        assert self.bridge is not None
        self.bridge.close().addBoth(self._close_stdout)

    def _close_stdout(self, _: object) -> None:
        transport: Any = self.transport
        if transport is not None:
            transport.loseConnection()

    def writeConnectionLost(self) -> None:
        """stdout closed by the client: nothing more can be answered."""
        self._close_stdout(None)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        if not self.finished.called:
            self.finished.callback(None)


def _endpoint_of(config_path: str) -> tuple[str, str | None]:
    """The ``/mcp`` URL and the token of the service a config file describes."""
    from ai_tools.standalone.config import load_config, split_endpoint
    from ai_tools.standalone.overrides import Overrides

    config = load_config(config_path, Overrides(environ=os.environ))  # as twistd reads it
    if config.mcp_serve is None:
        raise SystemExit(f"{config_path}: no [mcp.serve] table: the service does not serve MCP")
    parts = split_endpoint(config.http.endpoint)
    port = parts[1] if len(parts) > 1 else "8080"
    if port == "0":
        raise SystemExit(f"{config_path}: the API listens on a port chosen at start; give --url")
    interface = next((p.partition("=")[2] for p in parts if p.startswith("interface=")),
                     "127.0.0.1")
    if interface in ("", "0.0.0.0", "::"):
        interface = "127.0.0.1"
    host = f"[{interface}]" if ":" in interface else interface
    return f"http://{host}:{port}/mcp", config.http.token


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ai_tools.mcp.server_stdio",
        description="The game's MCP server over stdio (a bridge to the running service).")
    parser.add_argument("--config", help="the service's TOML config (gives URL and token)")
    parser.add_argument("--url", help="the service's MCP URL (http://127.0.0.1:8080/mcp)")
    parser.add_argument("--token-env", help="a variable holding the API token")
    parser.add_argument("--deadline", type=float, default=330.0,
                        help="seconds one exchange may take (default 330)")
    parser.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE)
    args = parser.parse_args(argv)
    if not (args.config or args.url):
        parser.error("give --config or --url")
    return args


def _log_warnings_to_stderr() -> None:
    """Warnings and errors to stderr (MCP clients show a server's stderr; stdout is the
    protocol's)."""
    from twisted.logger import (
        FilteringLogObserver,
        LogLevel,
        LogLevelFilterPredicate,
        globalLogBeginner,
        textFileLogObserver,
    )

    # (the classes provide the interfaces asked for, which mypy cannot see)
    predicate: Any = LogLevelFilterPredicate(defaultLogLevel=LogLevel.warn)
    observer: Any = textFileLogObserver(sys.stderr)
    filtered: Any = FilteringLogObserver(observer, [predicate])
    globalLogBeginner.beginLoggingTo([filtered], redirectStandardIO=False)


def main(argv: list[str] | None = None) -> None:
    """Bridge stdio to the service until stdin ends."""
    from twisted.internet import stdio
    from twisted.web.client import Agent, HTTPConnectionPool

    reactor = global_reactor()

    args = _arguments(argv)
    _log_warnings_to_stderr()
    url, token = _endpoint_of(args.config) if args.config else (args.url, None)
    if args.token_env:
        token = os.environ.get(args.token_env) or None
        if token is None:
            raise SystemExit(f"--token-env: the variable {args.token_env} is not set")
    pool = HTTPConnectionPool(reactor)
    agent = Agent(reactor, pool=pool)
    finished: defer.Deferred[None] = defer.Deferred()

    def bridge(write: Callable[[bytes], None]) -> StdioBridge:
        return StdioBridge(url, agent, reactor, write, token=token, deadline=args.deadline,
                           max_message_bytes=args.max_message_bytes)

    stdio.StandardIO(_StdioProtocol(bridge, finished))
    finished.addBoth(lambda _: pool.closeCachedConnections())
    finished.addBoth(lambda _: reactor.stop())
    reactor.run()


if __name__ == "__main__":
    main(sys.argv[1:])
