"""Token advisory: telling the model (and the loop) how full its context window is.

One configurable scale serves two purposes:

* :func:`inject_token_advisory` adds a ``_token_advisory`` entry to a tool result
  the model is about to read, from MODERATE (≥50%: "consider wrapping up") through
  HIGH (≥70%: "complete the current task soon") to CRITICAL (≥80%: "must
  conclude now").  Below MODERATE nothing is added, so normal use costs no tokens.
* :func:`check_loop_continuation` is asked before every loop iteration whether
  another one may start: ``token_warning`` from 60% (continue),
  ``token_critical`` from 80% (stop), ``max_iterations`` when the iteration cap
  is reached, ``normal`` otherwise.

Usage is expressed in percent of the model's context window (``0`` to ``100``;
values above 100 are possible when a history overflows), measured as
:mod:`ai_tools.loop.usage` says.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any

import attrs

from ai_tools.json_types import JSONMapping

__all__ = [
    "DEFAULT_THRESHOLDS",
    "AdvisoryLevel",
    "AdvisoryThresholds",
    "LoopContinuation",
    "TokenAdvisory",
    "advise_message",
    "check_loop_continuation",
    "inject_token_advisory",
]


class AdvisoryLevel(enum.StrEnum):
    """How close the context window is to full (each member is its string value)."""

    NORMAL = "normal"
    MODERATE = "moderate"
    HIGH = "high"
    CRITICAL = "critical"


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
def _check_percent(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
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
        level = cls.get_level(usage_pct, thresholds)
        message = _MESSAGES[level]
        if level is not AdvisoryLevel.NORMAL:  # (the normal message names no figure)
            message = message.format(pct=usage_pct)
        return cls(level, round(usage_pct, 1), message)

    def as_dict(self) -> dict[str, object]:
        """The JSON form put into tool results and loop events."""
        return {
            "level": str(self.level),
            "usage_percent": self.usage_percent,
            "message": self.message,
        }


def inject_token_advisory(
    result: JSONMapping,
    usage_pct: float,
    thresholds: AdvisoryThresholds = DEFAULT_THRESHOLDS,
) -> dict[str, object]:
    """Return ``result`` with ``_token_advisory`` added when usage is elevated.

    Below the MODERATE threshold the result comes back unchanged (as a new dict),
    so the advisory costs tokens only when it matters.  The input is not mutated:
    results may also sit in a cache.
    """
    out = dict(result)
    if TokenAdvisory.get_level(usage_pct, thresholds) is AdvisoryLevel.NORMAL:
        out.pop("_token_advisory", None)
    else:
        out["_token_advisory"] = TokenAdvisory.for_usage(usage_pct, thresholds).as_dict()
    return out


def advise_message(message: JSONMapping, advisory: TokenAdvisory) -> dict[str, object]:
    """A copy of a tool-result message whose JSON result carries ``_token_advisory``.

    Native results are ``{"role": "tool", "content": "{json}"}``; fallback ones
    ``{"role": "user", "content": "[TOOL RESULT: name]\\n{json}"}``.  A message
    whose content is not a JSON object is copied unchanged.
    """
    content = message.get("content")
    if not isinstance(content, str):
        return dict(message)
    head, sep, body = "", "", content
    if message.get("role") == "user":  # fallback format: "[TOOL RESULT: name]\n{json}"
        head, sep, body = content.partition("\n")
    try:
        result = json.loads(body)
    except ValueError:
        return dict(message)
    if not isinstance(result, dict):
        return dict(message)
    result["_token_advisory"] = advisory.as_dict()
    text = json.dumps(result, ensure_ascii=False, default=str)
    return {**message, "content": f"{head}{sep}{text}" if sep else text}


@attrs.frozen
class LoopContinuation:
    """Whether the ReAct loop may start another iteration, and why."""

    should_continue: bool
    reason: str
    """``normal``, ``token_warning``, ``token_critical`` or ``max_iterations``."""
    message: str
    advisory: TokenAdvisory
    iterations_remaining: int

    def as_dict(self) -> dict[str, object]:
        """The spec's dict form."""
        return {
            "should_continue": self.should_continue,
            "reason": self.reason,
            "message": self.message,
            "advisory": self.advisory.as_dict(),
            "iterations_remaining": self.iterations_remaining,
        }


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
    advisory = TokenAdvisory.for_usage(usage_pct, thresholds)
    remaining = max(max_iterations - iteration, 0)
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
