"""The client's production transport (treq over its own pooled Agent) on real sockets.

The unit tests drive the same treq transport over an in-memory agent; these
check what only real connections show: gzip answers, the body limits,
connection reuse, the total deadline, and cancellation in every phase.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, task
from twisted.web import resource, server

from ai_tools.errors import LLMProtocolError, LLMServerError, LLMTimeout
from ai_tools.llm import transport
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.profile import AnswerLimits, ModelProfile, Timeouts
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, Turn, start_test_server

USER = [{"role": "user", "content": "hello"}]


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


def _answer(text: str) -> bytes:
    return json.dumps(
        {
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


class _Canned(resource.Resource):
    """Answers every POST with a fixed status, headers and body; records request headers."""

    isLeaf = True

    def __init__(self, status: int, body: bytes, headers: dict[bytes, bytes]) -> None:
        super().__init__()
        self.status = status
        self.body = body
        self.headers = headers
        self.seen: list[dict[bytes, list[bytes]]] = []

    def render_POST(self, request: Any) -> bytes:
        self.seen.append(dict(request.requestHeaders.getAllRawHeaders()))
        request.setResponseCode(self.status)
        for name, value in self.headers.items():
            request.setHeader(name, value)
        return self.body


class _Served:
    def __init__(self, canned: _Canned, port: Any, client: OpenAIChatClient) -> None:
        self.canned = canned
        self.port = port
        self.client = client

    async def stop(self) -> None:
        await self.client.close()
        await self.port.stopListening()


async def serve(status: int, body: bytes, headers: dict[bytes, bytes] | None = None,
                **profile: Any) -> _Served:
    canned = _Canned(status, body, {b"content-type": b"application/json", **(headers or {})})
    site = server.Site(canned)
    site.noisy = False
    port = reactor().listenTCP(0, site, interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}/v1"
    client = OpenAIChatClient(
        ModelProfile(base_url=url, model="m", **{"stream": False, "discover_window": False,
                                                 **profile}),
        reactor=reactor(),
        retry_policy=RetryPolicy(max_attempts=1),
    )
    return _Served(canned, port, client)


@pytest_twisted.ensureDeferred
async def test_gzip_answer_is_decoded_and_advertised() -> None:
    """Like treq, the client asks for gzip and decodes a gzip answer."""
    s = await serve(200, gzip.compress(_answer("squeezed")), {b"content-encoding": b"gzip"})
    try:
        response = await s.client.complete(USER)
        assert response.content == "squeezed"
        assert b"gzip" in b",".join(s.canned.seen[0][b"Accept-Encoding"])
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_unknown_content_encoding_is_not_decoded() -> None:
    """An encoding the client did not ask for is left alone: the body is then not JSON."""
    s = await serve(200, b"\x00\x01binary", {b"content-encoding": b"br"})
    try:
        with pytest.raises(LLMProtocolError, match="not JSON"):
            await s.client.complete(USER)
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_answer_over_the_body_limit_fails() -> None:
    """A 200 body larger than the limit is refused, not buffered without end."""
    s = await serve(200, _answer("x" * 5000), limits=AnswerLimits(body_bytes=1000))
    try:
        with pytest.raises(LLMProtocolError, match="larger than 1000 bytes"):
            await s.client.complete(USER)
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_error_body_is_cut_at_its_limit() -> None:
    """A huge error page is cut, and the status still gives the error."""
    page = json.dumps({"error": {"message": "overloaded " + "z" * 20000}}).encode()
    s = await serve(503, page, limits=AnswerLimits(error_body_bytes=200))
    try:
        with pytest.raises(LLMServerError, match="503") as info:
            await s.client.complete(USER)
        assert "z" * 300 not in str(info.value)
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_sequential_requests_reuse_one_connection() -> None:
    """The pool keeps the connection: five requests in a row, one connection."""
    srv = await start_test_server([Turn(text=f"answer {i}") for i in range(5)], reactor=reactor())
    client = OpenAIChatClient(srv.profile(stream=False), reactor=reactor())
    try:
        for i in range(5):
            assert (await client.complete(USER)).content == f"answer {i}"
        assert srv.open_connections == 1
    finally:
        await client.close()
        await srv.stop()


@pytest_twisted.ensureDeferred
async def test_total_deadline_ends_a_slow_stream() -> None:
    """timeouts.total bounds the whole attempt, with the text so far kept."""
    srv = await start_test_server(
        [Turn(text="slow words " * 50, chunk_chars=5, chunk_latency=0.05)], reactor=reactor()
    )
    client = OpenAIChatClient(
        srv.profile(stream=True, timeouts=Timeouts(total=0.3)),
        reactor=reactor(),
        retry_policy=RetryPolicy(max_attempts=1),
    )
    try:
        with pytest.raises(LLMTimeout, match=r"no complete answer within 0\.3s") as info:
            await client.complete(USER)
        assert info.value.partial_text.startswith("slow")
        assert await srv.requests[0].finished is False
    finally:
        await client.close()
        await srv.stop()


@pytest_twisted.ensureDeferred
async def test_total_deadline_before_the_headers() -> None:
    """A total deadline shorter than the headers timeout also covers the wait for headers."""
    srv = await start_test_server([Turn(text="late", latency=5)], reactor=reactor())
    client = OpenAIChatClient(
        srv.profile(stream=False, timeouts=Timeouts(headers=10, total=0.2)),
        reactor=reactor(),
        retry_policy=RetryPolicy(max_attempts=1),
    )
    try:
        with pytest.raises(LLMTimeout, match=r"no complete answer within 0\.2s"):
            await client.complete(USER)
        assert await srv.requests[0].finished is False
    finally:
        await client.close()
        await srv.stop()


@pytest_twisted.ensureDeferred
async def test_cancel_while_waiting_for_a_slot() -> None:
    """A request queued behind the concurrency cap can be cancelled; the slot stays usable."""
    srv = await start_test_server(
        [Turn(text="first", latency=0.3), Turn(text="third")], reactor=reactor()
    )
    client = OpenAIChatClient(srv.profile(stream=False, max_concurrency=1), reactor=reactor())
    try:
        first = client.complete(USER)
        queued = client.complete(USER)
        queued.cancel()
        with pytest.raises(defer.CancelledError):
            await queued
        assert (await first).content == "first"
        assert (await client.complete(USER)).content == "third"
        assert len(srv.requests) == 2
    finally:
        await client.close()
        await srv.stop()


@pytest_twisted.ensureDeferred
async def test_cancel_during_the_back_off_wait() -> None:
    """Cancelled between two attempts: no further request is sent."""
    srv = await start_test_server([Fault.server_error(), Turn(text="never")], reactor=reactor())
    client = OpenAIChatClient(
        srv.profile(stream=False),
        reactor=reactor(),
        retry_policy=RetryPolicy(max_attempts=3, base_delay=5.0, jitter=False),
    )
    try:
        d = client.complete(USER)
        await srv.wait_for_requests(1)
        await task.deferLater(reactor(), 0.1, lambda: None)  # the 500 is in; now backing off
        d.cancel()
        with pytest.raises(defer.CancelledError):
            await d
        assert len(srv.requests) == 1
    finally:
        await client.close()
        await srv.stop()


@pytest_twisted.ensureDeferred
async def test_one_endpoint_and_one_host_header_for_every_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The endpoint is built once for every request; each request carries one Host."""
    built: list[Any] = []
    original = transport._tcp_endpoint

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(transport, "_tcp_endpoint", counting)
    s = await serve(200, _answer("hi"))
    try:
        for _ in range(3):
            assert (await s.client.complete(USER)).content == "hi"
        host = f"127.0.0.1:{s.port.getHost().port}".encode()
        assert [seen[b"Host"] for seen in s.canned.seen] == [[host]] * 3
        assert len(built) == 1
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_finished_requests_leave_none_of_our_objects_in_cycles() -> None:
    """Over real sockets too, a finished call is freed by reference counting.

    (twisted.web's own request objects can form cycles that hold the request
    body's producer: that one is not ours to free.)
    """
    import gc

    s = await serve(200, _answer("hi"))
    try:
        assert (await s.client.complete(USER)).content == "hi"  # a pooled connection
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                assert (await s.client.complete(USER)).content == "hi"
        finally:
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            gc.set_debug(0)
            garbage = [f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage]
            gc.garbage.clear()
            gc.enable()
        ours = [name for name in garbage
                if name.startswith("ai_tools.") and name != "ai_tools.llm.body.BytesProducer"]
        assert ours == []
    finally:
        await s.stop()


@pytest_twisted.ensureDeferred
async def test_keep_alives_alone_meet_the_progress_deadline() -> None:
    """Over a real socket: comments keep bytes flowing, yet the stream ends at the
    progress deadline and the connection is dropped."""
    srv = await start_test_server(
        [Turn(text="Hello", chunk_chars=2, fault=Fault.keep_alive(after_chunks=2, interval=0.05))],
        reactor=reactor(),
    )
    client = OpenAIChatClient(
        srv.profile(stream=True, timeouts=Timeouts(idle=0.2, progress=0.4)),
        reactor=reactor(),
        retry_policy=RetryPolicy(max_attempts=1),
    )
    try:
        with pytest.raises(LLMTimeout, match="no progress") as info:
            await client.complete(USER)
        assert info.value.partial_text == "He"
        assert await srv.requests[0].finished is False
    finally:
        await client.close()
        await srv.stop()


@pytest_twisted.ensureDeferred
async def test_a_gzip_bomb_is_cut_at_the_decoded_byte_cap() -> None:
    """Over a real socket: a small gzip body that inflates past the cap is refused."""
    bomb = gzip.compress(b" " * (8 * 1024 * 1024), compresslevel=9)
    s = await serve(200, bomb, {b"content-encoding": b"gzip"},
                    limits=AnswerLimits(body_bytes=1024 * 1024))
    try:
        with pytest.raises(LLMProtocolError, match="larger than 1048576 bytes"):
            await s.client.complete(USER)
    finally:
        await s.stop()


def test_an_ip_address_gets_a_plain_tcp_endpoint_and_a_name_a_resolving_one() -> None:
    """A refused connection to an address is known at once (a HostnameEndpoint reports
    it only after its attempt delay); a name is resolved as before."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import (
        HostnameEndpoint,
        TCP4ClientEndpoint,
        TCP6ClientEndpoint,
    )

    assert isinstance(transport._tcp_endpoint(reactor, "127.0.0.1", 80, 5), TCP4ClientEndpoint)
    assert isinstance(transport._tcp_endpoint(reactor, "[::1]", 80, 5), TCP6ClientEndpoint)
    assert isinstance(transport._tcp_endpoint(reactor, "::1", 80, 5), TCP6ClientEndpoint)
    assert isinstance(transport._tcp_endpoint(reactor, "model.internal", 80, 5),
                      HostnameEndpoint)


@pytest_twisted.ensureDeferred
async def test_a_dead_local_server_is_a_connection_error_at_once() -> None:
    """Nothing listens on the port: the request fails with a connection error, on the
    first attempt's refusal (no 0.3 s wait per attempt)."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ServerEndpoint

    from ai_tools.errors import LLMConnectionError

    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
        server.Site(resource.Resource()))
    number = port.getHost().port
    await port.stopListening()  # the port is free again: connections are refused
    client = OpenAIChatClient(ModelProfile(base_url=f"http://127.0.0.1:{number}/v1",
                                           model="m"),
                              reactor=reactor, retry_policy=RetryPolicy(max_attempts=1))
    try:
        with pytest.raises(LLMConnectionError):
            await client.complete(USER)
    finally:
        await client.close()
