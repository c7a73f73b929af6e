"""ai_tools.testing over real sockets: endpoints, recording, conversations, stop, the CLI."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.internet import defer, protocol

from ai_tools.llm.client import OpenAIChatClient
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, Rule, Script, Turn, start_test_server

USER = [{"role": "user", "content": "hi"}]


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


@pytest_twisted.ensureDeferred
async def test_binds_localhost_on_a_free_port_and_lists_its_model() -> None:
    """127.0.0.1, port 0 → a real port; GET /v1/models names the scripted model."""
    server = await start_test_server([], reactor=reactor(), model_name="demo")
    try:
        assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(":0/v1")
        response = await treq.get(server.url + "/models", reactor=reactor(), persistent=False)
        body = await response.json()
        assert body["data"][0]["id"] == "scripted:demo"
    finally:
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_bad_requests_are_answered_like_an_api() -> None:
    """Unknown paths 404, bodies without messages 400, a missing key 401 — all JSON."""
    server = await start_test_server(["x"], reactor=reactor(), api_key="sk-1")
    try:
        cases = [
            (server.url + "/nowhere", {"messages": []}, {}, 404),
            (server.url + "/chat/completions", {"no": "messages"}, {}, 400),
            (server.url + "/chat/completions", {"messages": USER}, {}, 401),
        ]
        for url, body, headers, status in cases:
            response = await treq.post(
                url, json=body, headers=headers, reactor=reactor(), persistent=False
            )
            assert response.code == status
            assert "error" in await response.json()
        assert len(server.requests) == 2  # the chat requests
        assert server.resource.metadata_requests == [("POST", "/v1/nowhere")]
    finally:
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_records_what_it_received() -> None:
    """requests[] keeps headers, messages and tools for assertions."""
    server = await start_test_server(["a"], reactor=reactor())
    client = OpenAIChatClient(server.profile(stream=False), reactor=reactor())
    try:
        tools = [{"type": "function", "function": {"name": "look"}}]
        await client.complete(USER, tools=tools)
        request = server.requests[0]
        assert request.messages == USER and request.tools == tools
        assert request.headers["content-type"] == "application/json"
        assert await request.finished is True and not request.disconnected
        assert request.turn == Turn(text="a")
    finally:
        await client.close()
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_one_log_event_per_request_unless_told_not_to() -> None:
    """Each answered request logs one event naming its conversation and turn (no
    separate access-log line); ``log_requests=False`` (the CLI's --quiet) logs none."""
    from twisted.logger import globalLogPublisher

    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    try:
        for log_requests, expected in ((True, 2), (False, 0)):
            events.clear()
            server = await start_test_server(["a", "b"], reactor=reactor(),
                                             log_requests=log_requests)
            client = OpenAIChatClient(server.profile(stream=False), reactor=reactor())
            try:
                await client.complete(USER)
                await client.complete(USER)
            finally:
                await client.close()
                await server.stop()
            answered = [e for e in events if "answering request" in (e.get("log_format") or "")]
            assert len(answered) == expected
            assert not [e for e in events if '"POST /v1/chat/completions' in str(e)]
    finally:
        globalLogPublisher.removeObserver(events.append)


def test_the_user_placeholder_is_found_once_per_turn() -> None:
    """Turns without ``{user_message}`` are answered as they are; with it, filled in."""
    from ai_tools.testing import ScriptedModel

    assert not Turn(text="plain", tool_calls=[("say", {"text": "hi"})]).has_placeholder
    assert Turn(tool_calls=[("say", {"text": ["x", "{user_message}"]})]).has_placeholder
    model = ScriptedModel.build(["Hi {user_message}", Turn(text="plain")])
    turn, _ = model.next_turn("c", USER)
    assert turn is not None and turn.text == "Hi hi" and not turn.has_placeholder
    plain = Turn(text="plain")
    turn, _ = model.next_turn("c", USER)
    assert turn == plain


@pytest_twisted.ensureDeferred
async def test_conversations_by_header_and_user_field() -> None:
    """X-Conversation or the body's user field picks the script."""
    server = await start_test_server(
        {"alice": ["for alice"], "bob": ["for bob"]}, reactor=reactor()
    )
    alice = OpenAIChatClient(server.profile(headers={"X-Conversation": "alice"}), reactor=reactor())
    bob = OpenAIChatClient(server.profile(extra_body={"user": "bob"}), reactor=reactor())
    try:
        assert (await bob.complete(USER)).content == "for bob"
        assert (await alice.complete(USER)).content == "for alice"
        assert [r.conversation for r in server.requests] == ["bob", "alice"]
    finally:
        await alice.close()
        await bob.close()
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_rules_answer_the_player_line() -> None:
    """A rule matched on the user message answers, and its follow-up comes after the tool."""
    script = Script(
        rules=[Rule("weather", [Turn(tool_calls=[("look", {})]), "It is sunny."])],
        default="Pardon?",
    )
    server = await start_test_server(script, reactor=reactor())
    client = OpenAIChatClient(server.profile(), reactor=reactor())
    try:
        first = await client.complete([{"role": "user", "content": "How is the weather?"}])
        assert first.tool_calls[0].name == "look"
        history = [
            {"role": "user", "content": "How is the weather?"},
            dict(first.message),
            {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "{}"},
        ]
        assert (await client.complete(history)).content == "It is sunny."
        assert (await client.complete([{"role": "user", "content": "??"}])).content == "Pardon?"
    finally:
        await client.close()
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_stop_drops_stalled_streams_and_pending_latency() -> None:
    """stop() returns even with a stalled stream and a delayed answer pending."""
    server = await start_test_server(
        {"a": [Fault.stall(after_chunks=1)], "b": [Turn(text="late", latency=30)]},
        reactor=reactor(),
    )
    once = RetryPolicy(max_attempts=1)
    stalled = OpenAIChatClient(server.profile(headers={"X-Conversation": "a"}), reactor=reactor(),
                               retry_policy=once)
    slow = OpenAIChatClient(server.profile(headers={"X-Conversation": "b"}), reactor=reactor(),
                            retry_policy=once)
    try:
        d1 = stalled.complete(USER)
        d2 = slow.complete(USER)
        await server.wait_for_requests(2)
        await server.stop()
        for d in (d1, d2):
            with pytest.raises(Exception):  # noqa: B017 - a connection error of some kind
                await d
        assert all(r.disconnected for r in server.requests)
        assert server.open_connections == 0
    finally:
        await stalled.close()
        await slow.close()


class _Lines(protocol.ProcessProtocol):
    def __init__(self) -> None:
        self.out = b""
        self.first_line: defer.Deferred[str] = defer.Deferred()
        self.ended: defer.Deferred[None] = defer.Deferred()

    def outReceived(self, data: bytes) -> None:
        self.out += data
        if b"\n" in self.out and not self.first_line.called:
            self.first_line.callback(self.out.split(b"\n", 1)[0].decode())

    def processEnded(self, reason: Any) -> None:
        if not self.first_line.called:
            self.first_line.errback(RuntimeError(f"server exited: {self.out!r}"))
        self.ended.callback(None)


@pytest_twisted.ensureDeferred
async def test_cli_serves_a_scenario_file(tmp_path: Path) -> None:
    """python -m ai_tools.testing SCENARIO serves it and says the model is scripted."""
    scenario = tmp_path / "demo.json"
    scenario.write_text(
        json.dumps(
            {"model": "demo", "rules": [{"match": "hello", "turns": ["Hello, {user_message}!"]}]}
        ),
        encoding="utf-8",
    )
    proc = _Lines()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    transport = reactor().spawnProcess(
        proc,
        sys.executable,
        [sys.executable, "-m", "ai_tools.testing", str(scenario), "--port", "0", "--quiet"],
        env=env,
    )
    try:
        line = await proc.first_line
        assert line.startswith("scripted model scripted:demo listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[-1]
        response = await treq.post(
            url + "/chat/completions",
            json={"model": "x", "messages": [{"role": "user", "content": "hello"}]},
            reactor=reactor(),
            persistent=False,
        )
        body = await response.json()
        assert body["model"] == "scripted:demo"
        assert body["choices"][0]["message"]["content"] == "Hello, hello!"
    finally:
        transport.signalProcess("TERM")
        await proc.ended


@pytest_twisted.ensureDeferred
async def test_cli_refuses_a_bad_scenario(tmp_path: Path) -> None:
    """A broken scenario file: exit code 2 and a message, no traceback."""
    bad = tmp_path / "bad.toml"
    bad.write_text("turns = [", encoding="utf-8")
    from twisted.internet.utils import getProcessOutputAndValue

    _out, err, code = await getProcessOutputAndValue(
        sys.executable,
        ["-m", "ai_tools.testing", str(bad)],
        env=dict(os.environ),
        reactor=reactor(),
    )
    assert code == 2 and b"cannot load scenario" in err and b"Traceback" not in err
