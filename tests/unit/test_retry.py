"""RetryPolicy delays and the retryable / non-retryable classification (DESIGN §3)."""

from __future__ import annotations

import pytest
from twisted.internet import defer, error
from twisted.python.failure import Failure

from ai_tools.errors import NotFound, PermissionDenied, ToolNotFound
from ai_tools.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_retryable_error


def test_default_policy_matches_the_design() -> None:
    p = DEFAULT_RETRY_POLICY
    assert (p.max_attempts, p.base_delay, p.multiplier, p.max_delay, p.jitter) == \
        (4, 1.0, 2.0, 10.0, True)


def test_delays_without_jitter_double_up_to_the_cap() -> None:
    p = RetryPolicy(jitter=False)
    assert [p.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_jitter_stays_between_half_and_full_delay() -> None:
    p = RetryPolicy()
    assert p.delay(3, lambda: 0.0) == 2.0
    assert p.delay(3, lambda: 1.0) == 4.0
    assert p.delay(3, lambda: 0.5) == 3.0
    assert p.delay(9, lambda: 1.0) == 10.0


@pytest.mark.parametrize("field, value", [
    ("max_attempts", 0), ("base_delay", -1), ("multiplier", 0.5), ("max_delay", -0.1),
    ("max_attempts", "4"), ("base_delay", True),
])
def test_nonsense_policies_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("exc", [
    defer.TimeoutError(), error.TimeoutError(), error.ConnectionRefusedError(),
    error.ConnectionLost(), error.DNSLookupError(), TimeoutError(), ConnectionResetError(),
    RuntimeError("upstream rate limit hit"), ValueError("please try again later"),
    OSError("Temporary failure in name resolution"),
])
def test_transient_exceptions_are_retryable(exc: BaseException) -> None:
    assert is_retryable_error(exc)
    assert is_retryable_error(Failure(exc))


@pytest.mark.parametrize("exc", [
    PermissionDenied("connection refused by the admin"), NotFound("network node"),
    ToolNotFound("timeout"), defer.CancelledError(), ValueError("bad value"), KeyError("x"),
])
def test_permanent_exceptions_are_not_retryable(exc: BaseException) -> None:
    assert not is_retryable_error(exc)


@pytest.mark.parametrize("result, expected", [
    ({"success": False, "error": "Connection reset"}, True),
    ({"success": False, "error": "Too Many Requests"}, True),
    ({"success": False, "error": "request timed out"}, True),
    ({"success": False, "error": "no such room"}, False),
    ({"success": False}, False),
    ({"success": False, "error": "no such room", "retryable": True}, True),
    ({"success": False, "error": "timeout", "retryable": False}, False),
    ({"success": True, "error": "timeout"}, False),
    ({"error": "timeout"}, False),
])
def test_returned_results(result: dict[str, object], expected: bool) -> None:
    assert is_retryable_error(result) is expected


def test_text_and_none() -> None:
    assert is_retryable_error("network unreachable")
    assert not is_retryable_error("invalid parameter")
    assert not is_retryable_error(None)
