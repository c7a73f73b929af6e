"""HTTP failures worded for the user; Retry-After; header redaction."""

from __future__ import annotations

import email.utils

import pytest

from ai_tools.errors import LLMRequestError, LLMServerError
from ai_tools.llm.http_errors import (
    error_for_status,
    is_retryable_status,
    parse_retry_after,
    redact_headers,
    server_message,
)

URL = "http://127.0.0.1:9/v1/chat/completions"


def err(status: int, body: bytes = b"", **kw: object):
    values = {"model": "gpt-x", "api_key_env": "OPENAI_API_KEY", "api_key_present": True}
    values.update(kw)
    return error_for_status(status, URL, body, **values)  # type: ignore[arg-type]


def test_401_names_the_key_variable() -> None:
    """401 tells which variable holds the key (and whether it is set)."""
    e = err(401, b'{"error": {"message": "Incorrect API key"}}')
    assert isinstance(e, LLMRequestError)
    assert str(e).startswith(f"401 from {URL}: check the API key in $OPENAI_API_KEY")
    assert "Incorrect API key" in str(e)
    assert "is not set" in str(err(401, api_key_present=False))
    assert "api_key_env" in str(err(401, api_key_env=None))


def test_403_404_400_are_request_errors_with_hints() -> None:
    """Client errors are not retried and say what to check."""
    assert "may use model 'gpt-x'" in str(err(403))
    e404 = err(404)
    assert isinstance(e404, LLMRequestError) and "/v1" in str(e404) and "'gpt-x'" in str(e404)
    assert "rejected the request (bad field)" in str(err(400, b'{"error": "bad field"}'))
    assert isinstance(err(422), LLMRequestError)


def test_429_and_5xx_are_server_errors() -> None:
    """Rate limits and server errors are LLMServerError carrying retry_after."""
    e = err(429, retry_after=3.0)
    assert isinstance(e, LLMServerError) and e.retry_after == 3.0 and "retry after 3s" in str(e)
    assert isinstance(err(503), LLMServerError)
    assert all(is_retryable_status(s) for s in (408, 429, 500, 502, 503, 504))
    assert not any(is_retryable_status(s) for s in (400, 401, 403, 404, 422))


def test_non_json_error_page_is_summarised() -> None:
    """An HTML error page becomes a one-line labelled snippet."""
    page = b"<html>\n<body>\n<h1>502 Bad Gateway</h1>\n</body></html>"
    message = server_message(page)
    assert message == "non-JSON body: 502 Bad Gateway"
    assert server_message(b"plain words\n  here") == "non-JSON body: plain words here"
    assert server_message(b"") == "(empty body)"
    assert server_message(b'{"detail": "Not Found"}') == "Not Found"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", 5.0),
        (b"0.5", 0.5),
        ("-3", 0.0),
        ("", None),
        (None, None),
        ("soon", None),
        ("nan", None),
    ],
)
def test_retry_after_seconds(value: object, expected: float | None) -> None:
    """Delta-seconds are read; junk is None; never negative."""
    assert parse_retry_after(value, now=1000.0) == expected  # type: ignore[arg-type]


def test_retry_after_http_date() -> None:
    """An HTTP date is turned into seconds from now."""
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(date, now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after(past, now) == 0.0


def test_redact_headers() -> None:
    """Authorization and friends never reach a log line."""
    headers = {"Authorization": [b"Bearer sk-1"], "x-api-key": "k", "Accept": "a"}
    assert redact_headers(headers) == {
        "Authorization": "<redacted>",
        "x-api-key": "<redacted>",
        "Accept": "a",
    }


def test_an_html_page_is_told_by_its_words_not_its_head() -> None:
    """A 404 page with a long head (styles, scripts) is summarised by what it says: its
    title and text, not the first 300 characters of markup."""
    page = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<style>{'body { font-family: sans-serif; margin: 0 auto; } ' * 20}</style>"
            f"<script>{'var x = 1; ' * 40}</script><title>404 Not Found</title></head>"
            "<body><h1>Not Found</h1><p>The requested URL /v1/chat/completions was not "
            "found on this server &amp; nothing else.</p></body></html>").encode()
    message = server_message(page)
    assert message.startswith("non-JSON body: 404 Not Found"), message
    assert "/v1/chat/completions was not found on this server & nothing else" in message
    assert "font-family" not in message and "var x" not in message
    assert len(message) <= 320
