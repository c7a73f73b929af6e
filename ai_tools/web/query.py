"""The HTTP API's query parameters: text, bounded integers, booleans — or a clear 400."""

from __future__ import annotations

from twisted.web.server import Request

from ai_tools.web.errors import ApiError

__all__ = ["MAX_LIMIT", "query_bool", "query_int", "query_text"]

MAX_LIMIT = 1000
"""Largest ``limit`` a list endpoint answers."""


def query_text(request: Request, key: str) -> str | None:
    """The last value of query parameter ``key`` (None when absent); 400 if not UTF-8."""
    values = request.args.get(key.encode("ascii"))
    if not values:
        return None
    try:
        text: str = values[-1].decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, f"query parameter {key!r} is not UTF-8", field=key) from None
    return text


def query_int(request: Request, key: str, default: int | None, low: int = 0,
              high: int = MAX_LIMIT) -> int | None:
    """Query parameter ``key`` as an integer within ``low``..``high`` (else 400)."""
    text = query_text(request, key)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"{key} must be an integer, not {text!r}", field=key) from None
    if not low <= value <= high:
        raise ApiError(400, f"{key} must be between {low} and {high}, not {value}",
                       field=key)
    return value


def query_bool(request: Request, key: str) -> bool:
    """Query parameter ``key`` as a boolean (``true``/``false``, ``1``/``0``, ``yes``/``no``)."""
    text = (query_text(request, key) or "false").lower()
    if text not in ("true", "false", "1", "0", "yes", "no"):
        raise ApiError(400, f"{key} must be true or false, not {text!r}", field=key)
    return text in ("true", "1", "yes")
