"""A circuit breaker: stop hammering a model server that keeps failing.

closed → (``failure_threshold`` consecutive failed attempts) → open: every
request fails at once with :class:`~ai_tools.errors.LLMUnavailable` →
(``cooldown`` seconds later) → half-open: one probe request goes through;
its success closes the circuit, its failure opens it for another cooldown.
Time comes from an injected clock (``seconds()``), so tests use ``task.Clock``.
"""

from __future__ import annotations

import enum

import attrs
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel

from ai_tools.errors import LLMUnavailable


class BreakerState(enum.Enum):
    """Where the circuit stands."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@attrs.define(eq=False)
class CircuitBreaker:
    """Counts consecutive failures of one model endpoint.

    Call :meth:`before_attempt` before each HTTP attempt (it raises while
    open), then :meth:`record_success` or :meth:`record_failure`.
    """

    clock: IReactorTime
    failure_threshold: int = 5
    cooldown: float = 30.0
    name: str = "model"
    state: BreakerState = attrs.field(default=BreakerState.CLOSED, init=False)
    consecutive_failures: int = attrs.field(default=0, init=False)
    opened_at: float | None = attrs.field(default=None, init=False)
    _probe_in_flight: bool = attrs.field(default=False, init=False)
    _log = Logger()

    def __attrs_post_init__(self) -> None:
        if self.failure_threshold < 1 or self.cooldown < 0:
            raise ValueError("circuit breaker: failure_threshold >= 1 and cooldown >= 0")

    def check(self) -> None:
        """Raise LLMUnavailable if the circuit is open and its cooldown still runs."""
        if self.state is BreakerState.OPEN:
            assert self.opened_at is not None
            remaining = self.opened_at + self.cooldown - self.clock.seconds()
            if remaining > 0:
                raise self._unavailable(remaining)

    def refusal(self) -> LLMUnavailable | None:
        """The error an attempt would meet now (open and cooling down, or half-open with
        its one probe out), else None; changes nothing."""
        if self.state is BreakerState.CLOSED:
            return None
        assert self.opened_at is not None
        remaining = self.opened_at + self.cooldown - self.clock.seconds()
        if self.state is BreakerState.OPEN and remaining > 0:
            return self._unavailable(remaining)
        if self.state is BreakerState.HALF_OPEN and self._probe_in_flight:
            return self._unavailable(0.0)
        return None

    def before_attempt(self) -> None:
        """Let an attempt through, or raise LLMUnavailable while the circuit is open."""
        if self.state is BreakerState.CLOSED:
            return
        now = self.clock.seconds()
        assert self.opened_at is not None
        remaining = self.opened_at + self.cooldown - now
        if self.state is BreakerState.OPEN and remaining <= 0:
            self._set(BreakerState.HALF_OPEN)
        if self.state is BreakerState.HALF_OPEN and not self._probe_in_flight:
            self._probe_in_flight = True
            return
        raise self._unavailable(remaining)

    def _unavailable(self, remaining: float) -> LLMUnavailable:
        return LLMUnavailable(
            f"{self.name} is unavailable: {self.consecutive_failures} consecutive failures; "
            + (
                f"next try in {remaining:.1f}s"
                if remaining > 0
                else "a probe request is in flight"
            )
        )

    def record_success(self) -> None:
        """The server answered sensibly: close the circuit."""
        self._probe_in_flight = False
        self.consecutive_failures = 0
        if self.state is not BreakerState.CLOSED:
            self.opened_at = None
            self._set(BreakerState.CLOSED)

    def record_failure(self) -> None:
        """One more failed attempt; open the circuit at the threshold."""
        self._probe_in_flight = False
        self.consecutive_failures += 1
        if self.state is BreakerState.HALF_OPEN or (
            self.state is BreakerState.CLOSED
            and self.consecutive_failures >= self.failure_threshold
        ):
            self.opened_at = self.clock.seconds()
            self._set(BreakerState.OPEN)
        elif self.state is BreakerState.OPEN:
            self.opened_at = self.clock.seconds()

    def release_probe(self) -> None:
        """A probe ended without a verdict (cancelled): let another one through."""
        self._probe_in_flight = False

    def _set(self, state: BreakerState) -> None:
        if state is not self.state:  # opening is the outage's one warning
            self._log.emit(
                LogLevel.warn if state is BreakerState.OPEN else LogLevel.info,
                "Circuit for {name}: {old} -> {new} after {failures} consecutive failures",
                name=self.name,
                old=self.state.value,
                new=state.value,
                failures=self.consecutive_failures,
            )
            self.state = state
