"""The stdio transport: an MCP server as a child process of ours.

The server is started with ``reactor.spawnProcess`` (no shell, no thread); we
write one JSON-RPC message per line to its stdin and read its stdout with the
bounded :class:`~ai_tools.mcp.jsonrpc.LineSplitter`.  Its stderr goes to our
log, line by line, each line cut at :data:`STDERR_LINE_BYTES` and at most
:data:`STDERR_BUDGET_BYTES` per minute (the rest counted, then reported).

The child's environment holds only a few harmless variables of ours (``PATH``,
``HOME``, ``LANG``...) plus the ``env`` of its configuration, so our secrets
(a model's API key, the API token) never reach a server that did not ask.

Stopping follows the MCP lifecycle: close stdin, then ``SIGTERM`` after a
grace, then ``SIGKILL``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twisted.internet import defer, error, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.mcp.jsonrpc import JSONRPCError, LineSplitter, Message, decode_message, encode_message

__all__ = ["INHERITED_VARIABLES", "StdioTransport"]

log = Logger()

INHERITED_VARIABLES = ("HOME", "LANG", "LC_ALL", "LOGNAME", "PATH", "SHELL", "TERM", "TMPDIR",
                       "USER")
"""Our environment variables a stdio server gets (the MCP SDKs pass the same few)."""

STDERR_LINE_BYTES = 2000
STDERR_BUDGET_BYTES = 32 * 1024
STDERR_WINDOW = 60.0


class _ServerProcess(protocol.ProcessProtocol):
    """The child's pipes, handed to its :class:`StdioTransport`."""

    def __init__(self, owner: StdioTransport) -> None:
        self.owner = owner

    def connectionMade(self) -> None:
        self.owner._started()

    def outReceived(self, data: bytes) -> None:
        self.owner._stdout(data)

    def errReceived(self, data: bytes) -> None:
        self.owner._stderr(data)

    def processEnded(self, reason: Failure) -> None:
        self.owner._ended(reason)


class StdioTransport:
    """One stdio MCP server process (see the module docstring)."""

    def __init__(self, command: str, args: Sequence[str] = (), *, reactor: Any,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 name: str = "mcp", max_message_bytes: int = 4 * 1024 * 1024,
                 stop_grace: float = 2.0) -> None:
        self.command = command
        self.args = list(args)
        self.env = dict(env or {})
        self.cwd = cwd
        self.name = name
        self.stop_grace = stop_grace
        self._reactor = reactor
        self._max = max_message_bytes
        self._lines = LineSplitter(max_message_bytes)
        self._err_lines = LineSplitter(STDERR_BUDGET_BYTES)
        self._err_window_start = 0.0
        self._err_used = 0
        self._err_dropped = 0
        self._process: Any = None
        self._deliver: Callable[[Message], None] | None = None
        self._lost: Callable[[Failure], None] | None = None
        self._start_d: defer.Deferred[None] | None = None
        self._ended_d: defer.Deferred[None] = defer.Deferred()
        self.ended = False
        self.pid: int | None = None
        self.session_id: str | None = None
        """Always None: a stdio connection is its session, with no id."""

    def environment(self) -> dict[str, str]:
        """What the child's environment is: a few of ours, then its configured ``env``."""
        base = {k: os.environ[k] for k in INHERITED_VARIABLES if k in os.environ}
        return {**base, **self.env}

    def start(self, deliver: Callable[[Message], None],
              lost: Callable[[Failure], None]) -> defer.Deferred[None]:
        """Spawn the process; fires once its pipes are open."""
        env = self.environment()
        executable = shutil.which(self.command, path=env.get("PATH"))
        if executable is None:
            return defer.fail(FileNotFoundError(
                f"MCP server {self.name}: command {self.command!r} not found"))
        self._deliver, self._lost = deliver, lost
        started = self._start_d = defer.Deferred()
        self._process = self._reactor.spawnProcess(
            _ServerProcess(self), executable, [self.command, *self.args], env=env,
            path=self.cwd)
        self.pid = getattr(self._process, "pid", None)
        log.info("MCP server {server}: started {command} (pid {pid})", server=self.name,
                 command=" ".join([self.command, *self.args]), pid=self.pid)
        return started

    def send(self, message: Message) -> defer.Deferred[None]:
        """Write one message as a line to the child's stdin."""
        if self._process is None or self.ended:
            return defer.fail(ConnectionError(f"MCP server {self.name} is not running"))
        self._process.write(encode_message(message) + b"\n")
        return defer.succeed(None)

    def close(self) -> defer.Deferred[None]:
        """Close stdin; ``SIGTERM`` after the grace, ``SIGKILL`` after another."""
        if self._process is None or self.ended:
            return defer.succeed(None)
        self._process.closeStdin()
        term = self._reactor.callLater(self.stop_grace, self._signal, "TERM")
        kill = self._reactor.callLater(2 * self.stop_grace, self._signal, "KILL")
        d: defer.Deferred[None] = defer.Deferred()

        def ended(_: Any) -> None:
            for call in (term, kill):
                if call.active():
                    call.cancel()
            d.callback(None)

        self._ended_d.addBoth(ended)
        return d

    def kill(self) -> None:
        """``SIGKILL`` now (tests, and a server that will not stop)."""
        self._signal("KILL")

    def _signal(self, name: str) -> None:
        if self.ended:
            return
        try:
            self._process.signalProcess(name)
            log.info("MCP server {server}: sent SIG{signal}", server=self.name, signal=name)
        except error.ProcessExitedAlready:
            pass

    # ---- from the process

    def _started(self) -> None:
        d, self._start_d = self._start_d, None
        if d is not None:
            d.callback(None)

    def _stdout(self, data: bytes) -> None:
        try:
            lines = self._lines.feed(data)
        except JSONRPCError as e:
            log.warn("MCP server {server}: {error}; that message is dropped", server=self.name,
                     error=e.message)
            lines = []
        for line in lines:
            try:
                message = decode_message(line, self._max)
            except JSONRPCError as e:
                log.warn("MCP server {server} wrote what is no message ({error}): {line}",
                         server=self.name, error=e.message,
                         line=line[:200].decode("utf-8", "replace"))
                continue
            if self._deliver is not None:
                self._deliver(message)

    def _stderr(self, data: bytes) -> None:
        now = self._reactor.seconds()
        if now - self._err_window_start >= STDERR_WINDOW:
            if self._err_dropped:
                log.warn("MCP server {server}: {count} bytes of its stderr were not logged "
                         "(more than {budget} bytes a minute)", server=self.name,
                         count=self._err_dropped, budget=STDERR_BUDGET_BYTES)
            self._err_window_start, self._err_used, self._err_dropped = now, 0, 0
        try:
            lines = self._err_lines.feed(data)
        except JSONRPCError:
            lines = []
        for line in lines:
            if self._err_used >= STDERR_BUDGET_BYTES:
                self._err_dropped += len(line)
                continue
            self._err_used += len(line)
            text = line[:STDERR_LINE_BYTES].decode("utf-8", "replace")
            if len(line) > STDERR_LINE_BYTES:
                text += f" [... {len(line) - STDERR_LINE_BYTES} bytes cut]"
            log.info("MCP server {server} stderr: {line}", server=self.name, line=text)

    def _ended(self, reason: Failure) -> None:
        self.ended = True
        code = getattr(reason.value, "exitCode", None)
        signal = getattr(reason.value, "signal", None)
        how = f"signal {signal}" if signal else f"exit code {code}"
        log.info("MCP server {server}: process {pid} ended ({how})", server=self.name,
                 pid=self.pid, how=how)
        start, self._start_d = self._start_d, None
        if start is not None:
            start.errback(ConnectionError(f"MCP server {self.name} ended at start ({how})"))
        if self._lost is not None:
            self._lost(Failure(ConnectionError(f"the process ended ({how})")))
        self._ended_d.callback(None)
