"""Token advisory: telling the model (and the loop) how full its context window is.

One configurable scale (DESIGN §3) serves two purposes:

* :func:`inject_token_advisory` adds a ``_token_advisory`` entry to a tool result
  the model is about to read, from MODERATE (≥50%: "consider wrapping up") through
  HIGH (≥70%: "complete the current task soon") to CRITICAL (≥80%: "must
  conclude now").  Below MODERATE nothing is added, so normal use costs no tokens.
* :func:`check_loop_continuation` is asked before every loop iteration whether
  another one may start: ``token_warning`` from 60% (continue),
  ``token_critical`` from 80% (stop), ``max_iterations`` when the iteration cap
  is reached, ``normal`` otherwise.

Usage is expressed in percent of the model's context window (``0`` to ``100``;
values above 100 are possible when a history overflows).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "DEFAULT_THRESHOLDS",
    "AdvisoryLevel",
    "AdvisoryThresholds",
    "LoopContinuation",
    "TokenAdvisory",
    "check_loop_continuation",
    "inject_token_advisory",
    "usage_percentage",
]


class AdvisoryLevel(enum.Enum):
    """How close the context window is to full."""

    NORMAL = "normal"
    MODERATE = "moderate"
    HIGH = "high"
    CRITICAL = "critical"


_NORMAL = AdvisoryLevel.NORMAL
_MESSAGES: dict[AdvisoryLevel, str] = {
    AdvisoryLevel.NORMAL: "Sufficient context available.",
    AdvisoryLevel.MODERATE: (
        "Context window {pct:.0f}% full: consider wrapping up the current operation."
    ),
    AdvisoryLevel.HIGH: (
        "Context window {pct:.0f}% full: complete the current task soon and respond."
    ),
    AdvisoryLevel.CRITICAL: (
        "Context window {pct:.0f}% full: you must conclude now with a final response."
    ),
}
_NORMAL_MESSAGE = _MESSAGES[_NORMAL]  # has no {pct}: formatting it gives it back
_NORMAL_ADVISORIES: dict[float, TokenAdvisory] = {}
"""NORMAL advisories by rounded percentage (immutable: shared by every loop)."""
_MEMO_SIZE = 4096


def _memo_key(shown: float) -> bool:
    """Whether a rounded percentage may key a memo: a float, not NaN, not -0.0
    (which equal other keys whose value would print differently: 5 and 5.0, 0.0)."""
    return type(shown) is float and shown == shown and (shown != 0.0 or str(shown) == "0.0")


def _check_percent(instance: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 < value <= 100:
        raise ValueError(f"{attribute.name} must be a percentage in (0, 100], got {value!r}")


@attrs.frozen
class AdvisoryThresholds:
    """Where the advisory levels and the continuation reasons start, in percent.

    ``moderate <= high <= critical`` and ``warning <= stop`` are enforced.
    """

    moderate: float = attrs.field(default=50.0, validator=_check_percent)
    high: float = attrs.field(default=70.0, validator=_check_percent)
    critical: float = attrs.field(default=80.0, validator=_check_percent)
    warning: float = attrs.field(default=60.0, validator=_check_percent)
    """``check_loop_continuation`` reports ``token_warning`` (and goes on) from here."""
    stop: float = attrs.field(default=80.0, validator=_check_percent)
    """``check_loop_continuation`` reports ``token_critical`` (and stops) from here."""

    def __attrs_post_init__(self) -> None:
        if not self.moderate <= self.high <= self.critical:
            raise ValueError(
                f"advisory thresholds must rise: moderate {self.moderate} <= high "
                f"{self.high} <= critical {self.critical}"
            )
        if self.warning > self.stop:
            raise ValueError(
                f"continuation warning {self.warning} must not exceed stop {self.stop}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AdvisoryThresholds:
        """Build from a config mapping; unknown keys raise ``ValueError`` naming them."""
        known = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown token threshold(s): {', '.join(unknown)}")
        return cls(**{k: float(v) for k, v in data.items()})


DEFAULT_THRESHOLDS = AdvisoryThresholds()


def usage_percentage(tokens: int, context_window: int) -> float:
    """``tokens`` as a percentage of ``context_window`` (0 for an unknown window)."""
    if context_window <= 0:
        return 0.0
    return 100.0 * max(tokens, 0) / context_window


@attrs.frozen
class TokenAdvisory:
    """The advisory for one usage figure."""

    level: AdvisoryLevel
    usage_percent: float
    message: str

    @staticmethod
    def get_level(
        usage_pct: float, thresholds: AdvisoryThresholds = DEFAULT_THRESHOLDS
    ) -> AdvisoryLevel:
        """The level ``usage_pct`` falls in."""
        if usage_pct >= thresholds.critical:
            return AdvisoryLevel.CRITICAL
        if usage_pct >= thresholds.high:
            return AdvisoryLevel.HIGH
        if usage_pct >= thresholds.moderate:
            return AdvisoryLevel.MODERATE
        return AdvisoryLevel.NORMAL

    @classmethod
    def for_usage(
        cls, usage_pct: float, thresholds: AdvisoryThresholds = DEFAULT_THRESHOLDS
    ) -> TokenAdvisory:
        """The advisory (level and model-facing message) for ``usage_pct``."""
        if not usage_pct >= thresholds.moderate:  # the usual case (NaN too): no formatting
            shown = round(usage_pct, 1)
            if not _memo_key(shown):
                return cls(_NORMAL, shown, _NORMAL_MESSAGE)
            advisory = _NORMAL_ADVISORIES.get(shown)
            if advisory is None:
                advisory = cls(_NORMAL, shown, _NORMAL_MESSAGE)
                if len(_NORMAL_ADVISORIES) < _MEMO_SIZE:
                    _NORMAL_ADVISORIES[shown] = advisory
            return advisory
        level = cls.get_level(usage_pct, thresholds)
        return cls(level, round(usage_pct, 1), _MESSAGES[level].format(pct=usage_pct))

    def as_dict(self) -> dict[str, Any]:
        """The JSON form put into tool results and loop events."""
        return {
            "level": self.level.value,
            "usage_percent": self.usage_percent,
            "message": self.message,
        }


def inject_token_advisory(
    result: Mapping[str, Any],
    usage_pct: float,
    thresholds: AdvisoryThresholds = DEFAULT_THRESHOLDS,
) -> dict[str, Any]:
    """Return ``result`` with ``_token_advisory`` added when usage is elevated.

    Below the MODERATE threshold the result comes back unchanged (as a new dict),
    so the advisory costs tokens only when it matters.  The input is not mutated:
    results may also sit in a cache.
    """
    out = dict(result)
    if not usage_pct >= thresholds.moderate:  # NORMAL (NaN too): nothing to build
        out.pop("_token_advisory", None)
        return out
    out["_token_advisory"] = TokenAdvisory.for_usage(usage_pct, thresholds).as_dict()
    return out


@attrs.frozen
class LoopContinuation:
    """Whether the ReAct loop may start another iteration, and why."""

    should_continue: bool
    reason: str
    """``normal``, ``token_warning``, ``token_critical`` or ``max_iterations``."""
    message: str
    advisory: TokenAdvisory
    iterations_remaining: int

    def as_dict(self) -> dict[str, Any]:
        """The spec's dict form."""
        return {
            "should_continue": self.should_continue,
            "reason": self.reason,
            "message": self.message,
            "advisory": self.advisory.as_dict(),
            "iterations_remaining": self.iterations_remaining,
        }


_NORMAL_CONTINUATIONS: dict[tuple[float, int], LoopContinuation] = {}
"""The usual answer of :func:`check_loop_continuation`, by advisory and iterations left
(values are immutable, so one instance serves every loop)."""


def check_loop_continuation(
    usage_pct: float,
    iteration: int,
    max_iterations: int,
    thresholds: AdvisoryThresholds = DEFAULT_THRESHOLDS,
) -> LoopContinuation:
    """Decide whether iteration number ``iteration`` (0-based) may start.

    Token exhaustion wins over the iteration cap, because it is the more
    urgent thing to tell the operator.
    """
    if (usage_pct < thresholds.moderate and usage_pct < thresholds.warning
            and usage_pct < thresholds.stop and iteration < max_iterations):
        # the usual answer, when one was made already (what the steps below return)
        shown = round(usage_pct, 1)
        # (_memo_key(shown): not NaN, as usage_pct is below a threshold)
        if type(shown) is float and (shown or str(shown) == "0.0"):
            normal = _NORMAL_CONTINUATIONS.get((shown, max_iterations - iteration))
            if normal is not None:
                return normal
    advisory = TokenAdvisory.for_usage(usage_pct, thresholds)
    remaining = max(max_iterations - iteration, 0)
    if (advisory.level is _NORMAL and iteration < max_iterations
            and usage_pct < thresholds.warning and usage_pct < thresholds.stop
            and _memo_key(advisory.usage_percent)):
        key = (advisory.usage_percent, remaining)
        normal = _NORMAL_CONTINUATIONS.get(key)
        if normal is None:
            normal = LoopContinuation(True, "normal", "Sufficient context available.",
                                      advisory, remaining)
            if len(_NORMAL_CONTINUATIONS) < _MEMO_SIZE:
                _NORMAL_CONTINUATIONS[key] = normal
        return normal
    if usage_pct >= thresholds.stop:
        return LoopContinuation(
            False, "token_critical",
            f"Context window {usage_pct:.0f}% full: stopping the loop.", advisory, remaining,
        )
    if iteration >= max_iterations:
        return LoopContinuation(
            False, "max_iterations",
            f"Reached the limit of {max_iterations} iterations.", advisory, 0,
        )
    if usage_pct >= thresholds.warning:
        return LoopContinuation(
            True, "token_warning",
            f"Context window {usage_pct:.0f}% full: consider wrapping up.", advisory, remaining,
        )
    return LoopContinuation(True, "normal", "Sufficient context available.", advisory, remaining)
