"""The stdio transport's process handling on a fake reactor: the environment it gives,
the bounded reading of stdout, and the stop sequence (stdin closed, SIGTERM, SIGKILL)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import error, task
from twisted.python.failure import Failure

from ai_tools.mcp.jsonrpc import Message, Notification, Response
from ai_tools.mcp.stdio import StdioTransport


class FakeProcess:
    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.pid = 4242
        self.written: list[bytes] = []
        self.signals: list[str] = []
        self.stdin_closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def closeStdin(self) -> None:
        self.stdin_closed = True

    def signalProcess(self, name: str) -> None:
        self.signals.append(name)

    def end(self, signal: int | None = None) -> None:
        reason = error.ProcessTerminated(signal=signal) if signal else error.ProcessDone(0)
        self.protocol.processEnded(Failure(reason))


class FakeReactor(task.Clock):
    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[tuple[Any, ...]] = []
        self.process: FakeProcess | None = None

    def spawnProcess(self, protocol: Any, executable: str, args: list[str], env: Any,
                     path: Any) -> FakeProcess:
        self.spawned.append((executable, args, env, path))
        self.process = FakeProcess(protocol)
        protocol.makeConnection(self.process)
        return self.process


def started(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[FakeReactor, StdioTransport,
                                                                  list[Message], list[Failure]]:
    monkeypatch.setenv("AI_TOOLS_LLM_API_KEY", "sk-secret")
    reactor = FakeReactor()
    transport = StdioTransport("python3", ["server.py"], reactor=reactor, name="fx", **kw)
    got: list[Message] = []
    lost: list[Failure] = []
    d = transport.start(got.append, lost.append)
    assert d.called
    return reactor, transport, got, lost


def test_the_child_gets_a_few_of_our_variables_and_its_own(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    reactor, _, _, _ = started(monkeypatch, env={"MEMORY_FILE": "m.json"}, cwd="/tmp")
    ((executable, args, env, path),) = reactor.spawned
    assert executable.endswith("python3") and args == ["python3", "server.py"]
    assert env["MEMORY_FILE"] == "m.json" and "PATH" in env
    assert "AI_TOOLS_LLM_API_KEY" not in env and path == "/tmp"


def test_a_missing_command_is_a_clear_error() -> None:
    transport = StdioTransport("ai-tools-no-such-command", reactor=FakeReactor(), name="fx")
    failures: list[Failure] = []
    transport.start(lambda m: None, lambda f: None).addErrback(failures.append)
    assert "command 'ai-tools-no-such-command' not found" in str(failures[0].value)


def test_lines_become_messages_and_an_oversized_one_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reactor, transport, got, _ = started(monkeypatch, max_message_bytes=200)
    protocol = reactor.process.protocol  # type: ignore[union-attr]
    protocol.outReceived(b'{"jsonrpc":"2.0","id":1,"result":{}}\n{"jsonrpc":"2.0",')
    protocol.outReceived(b'"method":"notifications/tools/list_changed"}\n')
    protocol.outReceived(b'{"jsonrpc":"2.0","id":2,"result":{"x":"' + b"y" * 500)
    protocol.outReceived(b'"}}\nnot json\n{"jsonrpc":"2.0","id":3,"result":{}}\n')
    assert got == [Response(1, {}), Notification("notifications/tools/list_changed"),
                   Response(3, {})]
    transport.send(Notification("notifications/initialized"))
    assert reactor.process.written == [  # type: ignore[union-attr]
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n']


def test_stop_closes_stdin_then_terms_then_kills(monkeypatch: pytest.MonkeyPatch) -> None:
    reactor, transport, _, lost = started(monkeypatch, stop_grace=2.0)
    process = reactor.process
    assert process is not None
    stopped = transport.close()
    assert process.stdin_closed and process.signals == []
    reactor.advance(2.0)
    assert process.signals == ["TERM"]
    reactor.advance(2.0)
    assert process.signals == ["TERM", "KILL"]
    assert not stopped.called
    process.end(signal=9)
    assert stopped.called and lost and "signal 9" in lost[0].getErrorMessage()
    assert reactor.getDelayedCalls() == []


def test_a_server_that_ends_on_eof_is_not_signalled(monkeypatch: pytest.MonkeyPatch) -> None:
    reactor, transport, _, _ = started(monkeypatch)
    stopped = transport.close()
    reactor.process.end()  # type: ignore[union-attr]
    assert stopped.called and reactor.process.signals == []  # type: ignore[union-attr]
    assert reactor.getDelayedCalls() == []
    refused: list[Failure] = []
    transport.send(Notification("x")).addErrback(refused.append)
    assert "is not running" in refused[0].getErrorMessage()
