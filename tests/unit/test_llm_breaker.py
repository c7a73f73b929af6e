"""The circuit breaker: closed → open → half-open → closed/open."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from ai_tools.errors import LLMUnavailable
from ai_tools.llm.breaker import BreakerState, CircuitBreaker


def make(threshold: int = 3, cooldown: float = 10.0) -> tuple[Clock, CircuitBreaker]:
    clock = Clock()
    return clock, CircuitBreaker(clock, failure_threshold=threshold, cooldown=cooldown, name="m")


def test_opens_after_threshold_consecutive_failures() -> None:
    """N failures in a row open the circuit; calls then fail fast."""
    _, breaker = make()
    for _ in range(2):
        breaker.before_attempt()
        breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED
    breaker.before_attempt()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    with pytest.raises(LLMUnavailable, match=r"3 consecutive failures; next try in 10\.0s"):
        breaker.before_attempt()
    with pytest.raises(LLMUnavailable):
        breaker.check()


def test_success_resets_the_count() -> None:
    """A success between failures starts the count again."""
    _, breaker = make()
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED


def test_half_open_lets_one_probe_through_and_closes_on_success() -> None:
    """After the cooldown, one probe goes; others still fail fast; success closes."""
    clock, breaker = make()
    for _ in range(3):
        breaker.record_failure()
    clock.advance(10)
    breaker.check()  # no longer raises: cooldown over
    breaker.before_attempt()
    assert breaker.state is BreakerState.HALF_OPEN
    with pytest.raises(LLMUnavailable, match="probe"):
        breaker.before_attempt()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    breaker.before_attempt()


def test_failed_probe_reopens_for_another_cooldown() -> None:
    """A failing probe opens the circuit again from now."""
    clock, breaker = make()
    for _ in range(3):
        breaker.record_failure()
    clock.advance(10)
    breaker.before_attempt()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.advance(9)
    with pytest.raises(LLMUnavailable):
        breaker.before_attempt()
    clock.advance(1)
    breaker.before_attempt()
    assert breaker.state is BreakerState.HALF_OPEN


def test_cancelled_probe_frees_the_slot() -> None:
    """release_probe lets another probe through."""
    clock, breaker = make()
    for _ in range(3):
        breaker.record_failure()
    clock.advance(10)
    breaker.before_attempt()
    breaker.release_probe()
    breaker.before_attempt()


def test_bad_settings_are_refused() -> None:
    """Threshold below 1 or negative cooldown are errors."""
    with pytest.raises(ValueError):
        CircuitBreaker(Clock(), failure_threshold=0)
    with pytest.raises(ValueError):
        CircuitBreaker(Clock(), cooldown=-1)
