"""The request body limit, enforced while the body arrives (a real HTTPChannel, in memory)."""

from __future__ import annotations

import io
import json
from typing import Any, cast

import pytest
from twisted.internet import task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.web.resource import Resource

from ai_tools.web.api import ApiSite
from ai_tools.web.body import LINGER_BYTES, LINGER_SECONDS, LimitedRequest, parse_json_body
from ai_tools.web.errors import ApiError


class Spy(Resource):
    """Counts renders and answers with the body length."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def render_POST(self, request: Any) -> bytes:
        body = request.content.read()
        self.bodies.append(body)
        return str(len(body)).encode()


REQUESTS: list[LimitedRequest] = []


class RecordedRequest(LimitedRequest):
    """A LimitedRequest that the tests can find."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        REQUESTS.append(self)


def connect(limit: int = 10) -> tuple[Spy, Any, StringTransport, task.Clock]:
    """A site with ``limit`` over a StringTransport; (resource, channel, transport, clock)."""
    clock = task.Clock()
    spy = Spy()
    site = ApiSite(cast(Any, spy), max_body=limit, clock=clock)
    site.requestFactory = RecordedRequest
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    transport = StringTransport()
    channel.makeConnection(transport)
    return spy, channel, transport, clock


def head(length: int | None = None, extra: str = "") -> bytes:
    lines = ["POST /messages HTTP/1.1", "Host: 127.0.0.1"]
    if length is None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def test_site_uses_the_limited_request() -> None:
    """ApiSite builds LimitedRequests."""
    assert ApiSite.requestFactory is LimitedRequest


def test_a_body_under_the_limit_is_processed() -> None:
    """Bodies up to the limit reach the resource whole."""
    spy, channel, transport, _ = connect(10)
    channel.dataReceived(head(10) + b"0123456789")
    assert spy.bodies == [b"0123456789"]
    assert transport.value().startswith(b"HTTP/1.1 200")


def test_a_declared_length_over_the_limit_is_refused_before_the_body() -> None:
    """Content-Length over the limit: 413 at once, nothing of the body read or kept."""
    spy, channel, transport, clock = connect(10)
    channel.dataReceived(head(1000))
    answer = transport.value()
    assert answer.startswith(b"HTTP/1.1 413")
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body == {"error": "request body too large: the limit is 10 bytes", "status": 413}
    assert b"Connection: close" in answer
    channel.dataReceived(b"x" * 500)  # drained, not kept, no second answer
    assert transport.value() == answer
    assert spy.bodies == []
    assert not transport.disconnecting
    clock.advance(LINGER_SECONDS)  # the client never finished: closed after the linger
    assert transport.disconnecting


def test_the_whole_refused_body_arriving_closes_at_once() -> None:
    """Once the refused body is drained the connection closes (no timer left)."""
    spy, channel, transport, clock = connect(10)
    channel.dataReceived(head(20))
    channel.dataReceived(b"x" * 20)
    assert transport.disconnecting
    assert spy.bodies == []
    channel.connectionLost(Exception("closed"))
    assert clock.getDelayedCalls() == []


def test_a_chunked_body_is_cut_off_when_it_grows_past_the_limit() -> None:
    """Without a length, the 413 comes as soon as the count passes the limit."""
    spy, channel, transport, _ = connect(10)
    channel.dataReceived(head(None) + chunk(b"12345678"))
    assert transport.value() == b""  # 8 bytes: still fine
    channel.dataReceived(chunk(b"12345678"))
    assert transport.value().startswith(b"HTTP/1.1 413")
    request = REQUESTS[-1]
    assert request.body_refused
    assert request.content is not None
    assert request.content.getvalue() == b""  # what came is dropped
    channel.dataReceived(chunk(b"more") + b"0\r\n\r\n")
    assert spy.bodies == []
    assert transport.disconnecting


def test_no_100_continue_after_a_413() -> None:
    """A client that asked for 100-continue gets the 413 only."""
    _, channel, transport, _ = connect(10)
    channel.dataReceived(head(1000, "Expect: 100-continue"))
    assert b"100 Continue" not in transport.value()
    assert transport.value().startswith(b"HTTP/1.1 413")


def test_a_flood_after_the_refusal_closes_at_once() -> None:
    """Draining is bounded: past LINGER_BYTES the connection closes without waiting."""
    _, channel, transport, _ = connect(10)
    channel.dataReceived(head(10 * LINGER_BYTES))
    channel.dataReceived(b"x" * (LINGER_BYTES + 1))
    assert transport.disconnecting


def test_the_default_limit_applies_without_a_site_setting() -> None:
    """A request whose channel has no site falls back to the default."""
    from twisted.web.http import HTTPChannel
    from twisted.web.server import Site

    from ai_tools.web.body import DEFAULT_MAX_BODY

    channel = HTTPChannel()
    channel.site = Site(Resource())  # type: ignore[attr-defined]  # a plain site
    channel.makeConnection(StringTransport())
    request = LimitedRequest(channel)
    assert request.max_body == DEFAULT_MAX_BODY


class _Body:
    def __init__(self, data: bytes) -> None:
        self.content = io.BytesIO(data)


@pytest.mark.parametrize(("data", "status"), [
    (b"", 400), (b"   ", 400), (b"{", 400), (b"[]", 400), (b"null", 400), (b"\xff", 400),
    (b'{"a": "' + b"x" * 100 + b'"}', 413),
])
def test_parse_json_body_refusals(data: bytes, status: int) -> None:
    """Everything but a JSON object under the limit is an ApiError with its status."""
    with pytest.raises(ApiError) as caught:
        parse_json_body(_Body(data), 50)
    assert caught.value.status == status


def test_parse_json_body_reads_an_object() -> None:
    """A JSON object comes back as a dict (also after the content was read once)."""
    body = _Body(b'{"text": "hi"}')
    body.content.read()
    assert parse_json_body(body, 50) == {"text": "hi"}
