"""The HTTP API over real HTTP on 127.0.0.1: the real loop, the scripted model, the example world.

A player speaks through ``POST /messages``; the assistant hears it, its loop
runs against the scripted model server and says something back; the SSE
stream shows every step in order; the hearing log holds the reply.  Bad
requests get JSON errors and the server keeps serving; an oversized body is
refused while it arrives; a client leaving the stream unsubscribes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.internet import defer, task
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.protocol import Protocol

from ai_tools.llm.client import OpenAIChatClient
from ai_tools.retry import RetryPolicy
from ai_tools.service.service import AssistantService
from ai_tools.testing import Turn, start_test_server
from ai_tools.web.api import WebService, make_web_service
from ai_tools.world.sandbox import SandboxWorld

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "world.toml"
REPLY = "Welcome to the Drowned Lantern, Bob!"
TOKEN = "integration-token"
JSON = {"Content-Type": "application/json"}


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


async def until(condition: Any, what: str, limit: int = 1500) -> None:
    """Let the reactor run until ``condition()`` (bounded by ``limit`` x 20 ms, not a timing)."""
    for _ in range(limit):
        if condition():
            return
        await task.deferLater(reactor(), 0.02, lambda: None)
    raise AssertionError(f"not reached: {what}")


class Collector(Protocol):
    """Reads a streamed body; ``hang_up()`` is the client leaving."""

    def __init__(self) -> None:
        self.data = b""
        self.lost: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.lost.callback(None)

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for block in self.data.decode().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.split("\n")
                          if ": " in line and not line.startswith(":"))
            if "event" in fields:
                out.append((fields["event"], json.loads(fields["data"])))
        return out

    def ids(self) -> list[int]:
        """The ``id:`` of each event, in order."""
        return [int(line[4:]) for line in self.data.decode().split("\n")
                if line.startswith("id: ")]

    def hang_up(self) -> None:
        transport: Any = self.transport
        transport.stopProducing()


class RawClient(Protocol):
    """Sends bytes, collects the answer."""

    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.closed = True


class Harness:
    """Scripted model server, service with Pip, the HTTP API; ``close`` tears all down."""

    def __init__(self) -> None:
        self.server: Any = None
        self.service: AssistantService | None = None
        self.webs: list[WebService] = []
        self.ports: list[int] = []

    async def start(self, token: str | None = None) -> str:
        r = reactor()
        self.server = await start_test_server(
            [Turn(tool_calls=[{"name": "say", "arguments": {"message": REPLY}}])], reactor=r)
        client = OpenAIChatClient(self.server.profile(stream=False), reactor=r,
                                  retry_policy=RetryPolicy(max_attempts=1))
        self.world = SandboxWorld.from_file(EXAMPLE, clock=r)
        self.service = AssistantService(llm=client, world=self.world, clock=r,
                                        tick_interval=0.05, stop_grace=2)
        self.service.startService()
        await self.service.when_ready()
        await self.service.add_assistant({"name": "pip", "character_id": "char:pip",
                                          "persona": "You are Pip, the innkeeper."})
        return await self.listen(token)

    async def listen(self, token: str | None = None, max_body: int = 4096) -> str:
        assert self.service is not None
        web = make_web_service(self.service, self.world, endpoint="tcp:0:interface=127.0.0.1",
                               token=token, max_body=max_body, clock=reactor())
        assert isinstance(web, WebService)
        web.startService()
        port = (await web.when_listening()).getHost().port
        self.webs.append(web)
        self.ports.append(port)
        return f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        for web in self.webs:
            if web.running:
                await web.stopService()
        if self.service is not None and self.service.running:
            await self.service.stopService()
        if self.server is not None:
            await self.server.stop()


@pytest.fixture(name="harness")
def harness_fixture() -> Any:
    """The harness, closed after the test."""
    h = Harness()
    yield h
    pytest_twisted.blockon(defer.ensureDeferred(h.close()))


async def get_json(url: str, method: str = "GET", **kw: Any) -> tuple[int, Any]:
    response = await treq.request(method, url, **kw)
    body = await treq.content(response)
    return response.code, json.loads(body)


@pytest_twisted.ensureDeferred
async def test_a_player_speaks_and_the_stream_shows_the_loop(harness: Harness) -> None:
    """Message in, loop events out in order, the reply in Bob's hearing log, stream closed."""
    base = await harness.start()
    assert harness.service is not None
    observers = len(harness.service._observers)
    stream = Collector()
    response = await treq.get(f"{base}/events?assistant=pip", unbuffered=True)
    assert response.code == 200
    response.deliverBody(stream)
    await until(lambda: b"connected" in stream.data, "the stream opened")

    code, body = await get_json(f"{base}/messages", "POST",
                                json={"character": "char:bob", "text": "Evening, Pip!"})
    assert code == 200 and body["assistants"] == ["pip"]
    await until(lambda: any(kind == "tick" for kind, _ in stream.events()), "a tick ended")

    kinds = [kind for kind, _ in stream.events()]
    order = ["world_message", "iteration", "tool_call", "tool_result", "termination", "tick"]
    positions = [kinds.index(kind) for kind in order]
    assert positions == sorted(positions), kinds
    events = stream.events()
    heard = [data for kind, data in events if kind == "world_message"]
    assert heard[0]["text"] == "Evening, Pip!" and heard[0]["sender_id"] == "char:bob"
    assert heard[1]["text"] == REPLY and heard[1]["from_assistant"] == "pip"
    [result] = [data for kind, data in events if kind == "tool_result"]
    assert result["tool"] == "say" and result["from_cache"] is False
    assert isinstance(result["duration_ms"], int | float)
    [end] = [data for kind, data in events if kind == "termination"]
    assert end["reason"] == "terminal_tool"

    code, body = await get_json(f"{base}/characters/char:bob/heard")
    assert body["messages"][-1]["line"] == f'Pip says, "{REPLY}"'
    code, body = await get_json(f"{base}/assistants/pip/results")
    assert body["loops"][-1]["tool_calls"][0]["tool"] == "say"
    code, body = await get_json(f"{base}/assistants/pip/history?limit=2")
    assert code == 200 and len(body["messages"]) == 2

    stream.hang_up()
    await stream.lost
    await until(lambda: harness.webs[0].resource.streams == set(), "the stream closed")
    # the API's observers stay (one for every stream) until it stops
    assert len(harness.service._observers) == observers
    await harness.webs[0].stopService()
    assert harness.world._observers == []


@pytest_twisted.ensureDeferred
async def test_a_dropped_stream_resumes_where_it_left_off(harness: Harness) -> None:
    """The client hangs up; a whole loop runs while it is away; reconnecting with the
    Last-Event-ID it saw replays every event it missed, in order, then goes on live."""
    base = await harness.start()
    first = Collector()
    (await treq.get(f"{base}/events", unbuffered=True)).deliverBody(first)
    await until(lambda: b"connected" in first.data, "the stream opened")
    await get_json(f"{base}/assistants/pip/disable", "POST")
    await until(lambda: first.ids(), "an event")
    seen = first.ids()[-1]
    first.hang_up()
    await first.lost

    await get_json(f"{base}/assistants/pip/enable", "POST")
    code, _ = await get_json(f"{base}/messages", "POST",
                             json={"character": "char:bob", "text": "Evening, Pip!"})
    assert code == 200
    code, _ = await get_json(f"{base}/assistants/pip/tick", "POST")  # the tick took it

    again = Collector()
    response = await treq.get(f"{base}/events", headers={"Last-Event-ID": str(seen)},
                              unbuffered=True)
    response.deliverBody(again)
    await until(lambda: any(kind == "tick" for kind, _ in again.events()), "the replay")
    kinds = [kind for kind, _ in again.events()]
    assert kinds[0] == "enabled" and "gap" not in kinds
    for kind in ("world_message", "tool_call", "tool_result", "termination", "tick"):
        assert kind in kinds
    assert again.ids() == list(range(seen + 1, seen + 1 + len(again.ids())))
    await get_json(f"{base}/assistants/pip/disable", "POST")
    await until(lambda: again.events()[-1][0] == "disabled", "a live event after the replay")
    again.hang_up()
    await again.lost


@pytest_twisted.ensureDeferred
async def test_metrics_after_a_real_loop(harness: Harness) -> None:
    """A scrape over HTTP after a player's message: the tick and the say call are counted."""
    base = await harness.start()
    await get_json(f"{base}/messages", "POST",
                   json={"character": "char:bob", "text": "Evening, Pip!"})
    await get_json(f"{base}/assistants/pip/tick", "POST")
    response = await treq.get(f"{base}/metrics")
    assert response.code == 200
    assert response.headers.getRawHeaders("content-type") == [
        "text/plain; version=0.0.4; charset=utf-8"]
    text = (await treq.content(response)).decode()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines()
                   if line and not line.startswith("#"))
    assert float(samples['ai_tools_tool_calls_total{tool="say",status="success"}']) == 1
    ran = [k for k in samples if k.startswith('ai_tools_ticks_total{status="ran"')]
    assert ran and sum(float(samples[k]) for k in ran) >= 1
    assert float(samples['ai_tools_model_breaker_state{profile="default",state="closed"}']) == 1
    assert float(samples['ai_tools_pending_events{assistant="pip"}']) == 0
    # the loop's model_request events: one request, its latency observed
    assert float(samples['ai_tools_model_requests_total{profile="default",status="ok"}']) >= 1
    assert float(samples['ai_tools_model_request_seconds_count{profile="default"}']) >= 1


@pytest_twisted.ensureDeferred
async def test_tick_over_http_returns_the_result(harness: Harness) -> None:
    """POST tick answers with the tick's result once it ends."""
    base = await harness.start()
    assert harness.service is not None
    harness.service.scheduler.stop()  # only our request ticks
    harness.service.get("pip").pending_events.append(
        {"type": "say", "from": "Bob", "text": "hello", "addressed": True})
    code, body = await get_json(f"{base}/assistants/pip/tick", "POST")
    assert code == 200
    assert body["assistant"] == "pip"
    assert body["status"] == "ran"
    assert body["loop"]["termination_reason"] == "terminal_tool"
    assert body["loop"]["results"][0]["tool"] == "say"


@pytest_twisted.ensureDeferred
async def test_bad_requests_get_json_errors_and_serving_goes_on(harness: Harness) -> None:
    """Each bad request gets its status and a JSON error; GET / works after each."""
    base = await harness.start()
    cases: list[tuple[str, str, dict[str, Any], int]] = [
        ("POST", "/messages", {"data": b"{nope", "headers": JSON}, 400),
        ("POST", "/messages", {"json": [1, 2]}, 400),
        ("POST", "/messages", {"json": {"character": "char:bob"}}, 422),
        ("POST", "/messages", {"json": {"character": 7, "text": "x"}}, 422),
        ("POST", "/messages", {"json": {"character": "char:zed", "text": "x"}}, 404),
        ("GET", "/assistants/zed", {}, 404),
        ("PUT", "/assistants/pip", {}, 405),
        ("GET", "/assistants/pip/history?limit=lots", {}, 400),
        ("POST", "/messages", {"data": b'{"text": "' + b"x" * 5000 + b'"}',
                               "headers": JSON}, 413),
    ]
    for method, path, kw, status in cases:
        code, body = await get_json(base + path, method, **kw)
        assert (code, body["status"]) == (status, status), (method, path, body)
        assert isinstance(body["error"], str) and body["error"]
        code, _ = await get_json(base + "/")
        assert code == 200


@pytest_twisted.ensureDeferred
async def test_an_oversized_body_is_refused_before_it_is_all_sent(harness: Harness) -> None:
    """With Content-Length over the limit the 413 arrives while the client still sends."""
    await harness.start()
    port = harness.ports[0]
    client = RawClient()
    await connectProtocol(TCP4ClientEndpoint(reactor(), "127.0.0.1", port), client)
    transport: Any = client.transport
    transport.write(b"POST /messages HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\n"
                           b"Content-Length: 10000000\r\n\r\n" + b"x" * 1000)
    await until(lambda: b"\r\n\r\n{" in client.data and client.data.endswith(b"}"),
                "the 413 answer")
    head, _, body = client.data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["status"] == 413
    transport.loseConnection()
    code, _ = await get_json(f"http://127.0.0.1:{port}/")
    assert code == 200


@pytest_twisted.ensureDeferred
async def test_a_chunked_body_is_cut_off(harness: Harness) -> None:
    """Without a length, the 413 comes once the count passes the limit."""
    await harness.start()
    port = harness.ports[0]
    client = RawClient()
    await connectProtocol(TCP4ClientEndpoint(reactor(), "127.0.0.1", port), client)
    transport: Any = client.transport
    transport.write(b"POST /messages HTTP/1.1\r\nHost: x\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n")
    for _ in range(5):
        transport.write(b"400\r\n" + b"y" * 1024 + b"\r\n")
    await until(lambda: client.data.startswith(b"HTTP/1.1 413") and client.data.endswith(b"}"),
                "the 413 answer")
    transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_token_over_real_http(harness: Harness) -> None:
    """With a token: 401 without it, 200 with it."""
    await harness.start()
    base = await harness.listen(token=TOKEN)
    code, body = await get_json(f"{base}/assistants")
    assert code == 401 and body["status"] == 401
    code, _ = await get_json(f"{base}/assistants",
                             headers={"Authorization": f"Bearer {TOKEN}"})
    assert code == 200


@pytest_twisted.ensureDeferred
async def test_stopping_closes_streams_and_the_port(harness: Harness) -> None:
    """stopService ends open streams and closes the port."""
    base = await harness.start()
    stream = Collector()
    response = await treq.get(f"{base}/events", unbuffered=True)
    response.deliverBody(stream)
    await until(lambda: b"connected" in stream.data, "the stream opened")
    web = harness.webs[0]
    await web.stopService()
    await stream.lost
    with pytest.raises(ConnectionRefusedError):
        await connectProtocol(TCP4ClientEndpoint(reactor(), "127.0.0.1", harness.ports[0]),
                              RawClient())
