"""Turn HTTP failures of a model server into errors a user can act on.

Also: ``Retry-After`` parsing (seconds or an HTTP date) and header redaction,
so that an API key never reaches a log line.
"""

from __future__ import annotations

import email.utils
import html
import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ai_tools.errors import LLMError, LLMRequestError, LLMServerError
from ai_tools.json_types import JSONMapping

if TYPE_CHECKING:
    from twisted.web.http_headers import Headers

RETRYABLE_STATUSES = frozenset({408, 425, 429})
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})


def is_retryable_status(status: int) -> bool:
    """429, 408, 425 and every 5xx are worth another attempt."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def parse_retry_after(value: str | bytes | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP date).

    ``now`` is the current POSIX time.  Returns None when absent or unreadable,
    never a negative number.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1", "replace")
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - now
    if seconds != seconds or seconds == float("inf"):  # NaN or inf
        return None
    return max(0.0, seconds)


def redact_headers(headers: JSONMapping) -> dict[str, object]:
    """A copy of ``headers`` with credentials replaced by ``<redacted>``."""
    return {
        k: ("<redacted>" if str(k).lower() in SECRET_HEADERS else v) for k, v in headers.items()
    }


def server_message(body: bytes, limit: int = 300) -> str:
    """The error text in a response body: ``error.message`` of a JSON body, else a snippet.

    Non-JSON bodies (an HTML error page from a proxy) are reduced to a short,
    single-line snippet and labelled as such.
    """
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return "(empty body)"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        snippet = " ".join(_page_text(text).split())[:limit]
        return f"non-JSON body: {snippet}"
    if isinstance(value, Mapping):
        error = value.get("error", value.get("detail", value.get("message")))
        if isinstance(error, Mapping):
            error = error.get("message") or error.get("detail") or json.dumps(dict(error))
        if error is not None:
            return " ".join(str(error).split())[:limit]
    return " ".join(text.split())[:limit]


_HIDDEN = re.compile(r"<(script|style|head)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_PAGE_CHARS = 8192
"""How much of an HTML page is read for its words (bounds the regular expressions' work)."""


def _page_text(text: str) -> str:
    """What an HTML error page says (its title, then its text without markup, scripts or
    styles); other text as it is.  An error page's head can fill the snippet before a
    word of the page is said."""
    if not text.startswith("<"):
        return text
    text = text[:_PAGE_CHARS]
    title = _TITLE.search(text)
    body = _TAG.sub(" ", _HIDDEN.sub(" ", text))
    words = html.unescape(body)
    if title is not None:
        heading = html.unescape(_TAG.sub(" ", title.group(1))).strip()
        if heading and not " ".join(words.split()).startswith(heading):
            words = f"{heading}: {words}"
    return words


def describe_failure(failure: BaseException) -> str:
    """Readable text for connection failures wrapped by twisted.web."""
    reasons = getattr(failure, "reasons", None)
    if reasons:
        inner = "; ".join(
            (r.getErrorMessage() if hasattr(r, "getErrorMessage") else str(r)) for r in reasons
        )
        return f"{type(failure).__name__}: {inner}"
    return f"{type(failure).__name__}: {failure}"


def error_for_status(
    status: int,
    url: str,
    body: bytes,
    *,
    model: str,
    api_key_env: str | None,
    api_key_present: bool,
    retry_after: float | None = None,
) -> LLMError:
    """The error for a non-2xx answer, worded so the user knows what to fix."""
    detail = server_message(body)
    where = f"{status} from {url}"
    if status == 401:
        if api_key_env and not api_key_present:
            hint = f"check the API key in ${api_key_env} (the variable is not set)"
        elif api_key_env:
            hint = f"check the API key in ${api_key_env}"
        else:
            hint = (
                "the server wants an API key: put it in an environment variable and "
                "name that variable in api_key_env (or $AI_TOOLS_LLM_API_KEY_ENV)"
            )
        return LLMRequestError(f"{where}: {hint} ({detail})", status=status, url=url)
    if status == 403:
        key = f"the key in ${api_key_env}" if api_key_env else "this client"
        return LLMRequestError(
            f"{where}: access denied; check that {key} may use model {model!r} ({detail})",
            status=status,
            url=url,
        )
    if status == 404:
        return LLMRequestError(
            f"{where}: not found; check the base URL (it usually ends in /v1) and the "
            f"model name {model!r} ({detail})",
            status=status,
            url=url,
        )
    if status == 429:
        wait = f"; retry after {retry_after:.0f}s" if retry_after is not None else ""
        return LLMServerError(
            f"{where}: rate limited{wait} ({detail})",
            status=status,
            url=url,
            retry_after=retry_after,
        )
    if is_retryable_status(status):
        return LLMServerError(
            f"{where}: server error ({detail})", status=status, url=url, retry_after=retry_after
        )
    if status == 400:
        return LLMRequestError(
            f"{where}: the server rejected the request ({detail})", status=status, url=url
        )
    return LLMRequestError(f"{where}: {detail}", status=status, url=url)


def header_value(headers: Headers, name: str) -> str | None:
    """First value of header ``name`` from a twisted ``Headers`` (or None)."""
    raw: Iterable[str | bytes] | None = headers.getRawHeaders(name)
    if not raw:
        return None
    for value in raw:
        return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None
