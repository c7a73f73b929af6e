"""Retries with deferred-based exponential backoff, shared by tools and model requests.

The default policy: 4 attempts; delay before attempt n+1 is
``min(max_delay, base * multiplier ** (n - 1))`` with jitter; waits go through
``task.deferLater`` on an injected clock so tests drive them with ``task.Clock``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet import defer, error
from twisted.python.failure import Failure

from ai_tools.numbers import is_number

_RETRYABLE_TEXT = re.compile(
    r"timeout|timed out|connection|network|temporar|rate limit|too many requests|try again",
    re.IGNORECASE,
)

_RETRYABLE_EXCEPTIONS: tuple[type[BaseException], ...] = (
    defer.TimeoutError,
    error.TimeoutError,
    error.ConnectError,
    error.ConnectionLost,
    error.ConnectionClosed,
    error.DNSLookupError,
    TimeoutError,
    ConnectionError,
)


def _at_least(minimum: float) -> Callable[[Any, Any, Any], None]:
    def check(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
        if not is_number(value) or value < minimum:
            raise ValueError(f"RetryPolicy.{attribute.name} must be a number >= {minimum}, "
                             f"got {value!r}")

    return check


@attrs.frozen
class RetryPolicy:
    """How often and how long to wait between attempts."""

    max_attempts: int = attrs.field(default=4, validator=_at_least(1))
    base_delay: float = attrs.field(default=1.0, validator=_at_least(0))
    multiplier: float = attrs.field(default=2.0, validator=_at_least(1))
    max_delay: float = attrs.field(default=10.0, validator=_at_least(0))
    jitter: bool = True

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based).

        With jitter the delay is drawn uniformly from [50%, 100%] of the
        exponential value ("equal jitter"), so it never exceeds ``max_delay``
        and never collapses to zero.
        """
        raw = min(self.max_delay, self.base_delay * self.multiplier ** (attempt - 1))
        if not self.jitter:
            return raw
        return raw * (0.5 + 0.5 * rand())


DEFAULT_RETRY_POLICY = RetryPolicy()


def is_retryable_error(err: BaseException | Failure | dict[str, object] | str | None) -> bool:
    """Whether a failure is transient and worth another attempt.

    Accepts a raised exception (or its Failure), a tool's returned
    ``{"success": False, "error": ...}`` dict, or error text.  Validation
    errors, unknown tools and permission refusals are never retryable.
    """
    from ai_tools.errors import NotFound, PermissionDenied, ToolNotFound

    if err is None:
        return False
    if isinstance(err, Failure):
        err = err.value
    if isinstance(err, dict):
        if err.get("success") is not False:
            return False
        if err.get("retryable") is not None:
            return bool(err["retryable"])
        return bool(_RETRYABLE_TEXT.search(str(err.get("error", ""))))
    if isinstance(err, str):
        return bool(_RETRYABLE_TEXT.search(err))
    if isinstance(err, PermissionDenied | NotFound | ToolNotFound | defer.CancelledError):
        return False
    if isinstance(err, _RETRYABLE_EXCEPTIONS):
        return True
    return bool(_RETRYABLE_TEXT.search(str(err)))
