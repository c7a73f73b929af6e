"""The JSON-RPC messages both MCP directions share: encoding, bounded parsing, framing."""

from __future__ import annotations

import pytest

from ai_tools.mcp.jsonrpc import (
    INVALID_REQUEST,
    LATEST_PROTOCOL_VERSION,
    PARSE_ERROR,
    ErrorResponse,
    JSONRPCError,
    LineSplitter,
    Notification,
    Request,
    Response,
    decode_message,
    encode_message,
    negotiate_version,
)


@pytest.mark.parametrize("message", [
    Request(1, "tools/list", {"cursor": "x"}),
    Request("a", "ping"),
    Notification("notifications/initialized"),
    Response(7, {"tools": []}),
    ErrorResponse(7, -32601, "no such method", {"method": "x"}),
    ErrorResponse(None, PARSE_ERROR, "bad"),
])
def test_round_trip(message: object) -> None:
    """What is encoded parses back to the same message, on one line."""
    data = encode_message(message)  # type: ignore[arg-type]
    assert b"\n" not in data
    assert decode_message(data, 1000) == message


@pytest.mark.parametrize("text, code", [
    (b"{", PARSE_ERROR),
    (b"\xff", PARSE_ERROR),
    (b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":NaN}}', PARSE_ERROR),
    (b"[]", INVALID_REQUEST),
    (b'{"jsonrpc":"1.0","id":1,"method":"x"}', INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":true,"method":"x"}', INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":""}', INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}', INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"result":[]}', INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}', INVALID_REQUEST),
    (b'{"jsonrpc":"2.0"}', INVALID_REQUEST),
])
def test_malformed_messages_are_refused_with_their_code(text: bytes, code: int) -> None:
    """Each kind of bad input gets the JSON-RPC code a peer answers with."""
    with pytest.raises(JSONRPCError) as caught:
        decode_message(text, 1000)
    assert caught.value.code == code


def test_the_byte_bound_holds_before_parsing() -> None:
    """A message over the bound is refused without being decoded."""
    with pytest.raises(JSONRPCError, match="exceeds 10"):
        decode_message(b'{"jsonrpc":"2.0","method":"xxxxxxxx"}', 10)


def test_error_response_gives_its_exception() -> None:
    """The caller's errback gets the code, message and data of the answer."""
    error = ErrorResponse(3, -32602, "bad params", {"field": "a"}).error()
    assert (error.code, error.message, error.data) == (-32602, "bad params", {"field": "a"})


def test_version_negotiation() -> None:
    """A version we speak is echoed; any other gets our newest."""
    assert negotiate_version("2025-06-18") == "2025-06-18"
    assert negotiate_version("2024-11-05") == LATEST_PROTOCOL_VERSION
    assert negotiate_version(None) == LATEST_PROTOCOL_VERSION


def test_line_splitter_frames_across_chunks() -> None:
    """Lines split across reads come out whole; CRLF and blank lines are tolerated."""
    splitter = LineSplitter(100)
    assert splitter.feed(b'{"a":') == []
    assert splitter.feed(b'1}\r\n\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert splitter.feed(b":3}\n") == [b'{"c":3}']


def test_line_splitter_drops_an_oversized_line_and_recovers() -> None:
    """An oversized line raises once; the lines after it still come through."""
    splitter = LineSplitter(8)
    with pytest.raises(JSONRPCError):
        splitter.feed(b"x" * 20)
    assert splitter.feed(b"yyyy\n") == []          # the rest of the oversized line
    assert splitter.feed(b"ok\n") == [b"ok"]
