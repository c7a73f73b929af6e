"""Tests for ai_tools.loop.advisory: advisory levels, injection, loop continuation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.loop.advisory import (
    DEFAULT_THRESHOLDS,
    AdvisoryLevel,
    AdvisoryThresholds,
    TokenAdvisory,
    advise_message,
    check_loop_continuation,
    inject_token_advisory,
)


@pytest.mark.parametrize(
    ("pct", "level"),
    [
        (0.0, AdvisoryLevel.NORMAL),
        (49.9, AdvisoryLevel.NORMAL),
        (50.0, AdvisoryLevel.MODERATE),
        (69.9, AdvisoryLevel.MODERATE),
        (70.0, AdvisoryLevel.HIGH),
        (79.9, AdvisoryLevel.HIGH),
        (80.0, AdvisoryLevel.CRITICAL),
        (150.0, AdvisoryLevel.CRITICAL),
    ],
)
def test_levels_follow_default_thresholds(pct: float, level: AdvisoryLevel) -> None:
    """The default scale is MODERATE >=50, HIGH >=70, CRITICAL >=80 (DESIGN §3)."""
    assert TokenAdvisory.get_level(pct) is level


def test_messages_name_the_action() -> None:
    """Each elevated level tells the model what to do, with the figure."""
    assert "wrapping up" in TokenAdvisory.for_usage(55).message
    assert "soon" in TokenAdvisory.for_usage(75).message
    critical = TokenAdvisory.for_usage(85)
    assert "conclude now" in critical.message
    assert "85%" in critical.message
    assert critical.as_dict() == {
        "level": "critical", "usage_percent": 85.0, "message": critical.message,
    }


def test_inject_below_moderate_adds_nothing_and_copies() -> None:
    """Normal usage costs no tokens; the input dict is never mutated."""
    result = {"success": True, "value": 1}
    out = inject_token_advisory(result, 10.0)
    assert out == result
    assert out is not result


def test_inject_removes_a_stale_advisory_when_usage_dropped() -> None:
    """A result that already carries an advisory (e.g. from a cache) is not left stale."""
    stale = {"success": True, "_token_advisory": {"level": "high"}}
    assert "_token_advisory" not in inject_token_advisory(stale, 5.0)


@pytest.mark.parametrize(("pct", "level"), [(50, "moderate"), (70, "high"), (80, "critical")])
def test_inject_at_each_level(pct: float, level: str) -> None:
    """From MODERATE up, the result carries ``_token_advisory`` with the level."""
    result = {"success": True}
    out = inject_token_advisory(result, pct)
    assert out["_token_advisory"]["level"] == level
    assert "_token_advisory" not in result


def test_custom_thresholds_shift_levels() -> None:
    """Thresholds are configurable."""
    th = AdvisoryThresholds(moderate=10, high=20, critical=30, warning=15, stop=25)
    assert TokenAdvisory.get_level(12, th) is AdvisoryLevel.MODERATE
    assert inject_token_advisory({}, 31, th)["_token_advisory"]["level"] == "critical"
    assert check_loop_continuation(26, 0, 5, th).reason == "token_critical"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"moderate": 0},
        {"high": 101},
        {"moderate": 80, "high": 70},
        {"high": 90, "critical": 85},
        {"warning": 90, "stop": 80},
    ],
)
def test_bad_thresholds_are_refused(kwargs: dict[str, float]) -> None:
    """Thresholds out of range or out of order raise ValueError."""
    with pytest.raises(ValueError):
        AdvisoryThresholds(**kwargs)


def test_thresholds_from_mapping() -> None:
    """A config mapping builds thresholds; an unknown key is named in the error."""
    assert AdvisoryThresholds.from_mapping({"moderate": "40"}).moderate == 40.0
    with pytest.raises(ValueError, match="modrate"):
        AdvisoryThresholds.from_mapping({"modrate": 40})


def test_continuation_reasons() -> None:
    """normal below 60%, token_warning from 60% (continue), token_critical from 80%."""
    normal = check_loop_continuation(10, 0, 5)
    assert (normal.should_continue, normal.reason, normal.iterations_remaining) == (
        True, "normal", 5)
    warning = check_loop_continuation(60, 1, 5)
    assert (warning.should_continue, warning.reason) == (True, "token_warning")
    assert warning.iterations_remaining == 4
    critical = check_loop_continuation(80, 1, 5)
    assert (critical.should_continue, critical.reason) == (False, "token_critical")
    assert critical.as_dict()["advisory"]["level"] == "critical"


def test_continuation_stops_at_max_iterations() -> None:
    """Iteration ``max_iterations`` (0-based) may not start."""
    assert check_loop_continuation(0, 4, 5).should_continue
    done = check_loop_continuation(0, 5, 5)
    assert (done.should_continue, done.reason, done.iterations_remaining) == (
        False, "max_iterations", 0)


def test_tokens_win_over_iteration_cap() -> None:
    """When both apply, the more urgent token reason is reported."""
    assert check_loop_continuation(95, 5, 5).reason == "token_critical"


def test_usage_percentage() -> None:
    """Percent of the window (the one measure's formula)."""
    from ai_tools.loop.usage import ContextUsage

    assert ContextUsage(500, 1000).percent == 50.0
    assert ContextUsage(-3, 1000).percent == 0.0


@given(st.floats(min_value=0, max_value=200, allow_nan=False), st.integers(0, 12),
       st.integers(1, 10))
def test_continuation_is_consistent(pct: float, iteration: int, max_iter: int) -> None:
    """should_continue is False exactly for the stop reasons."""
    c = check_loop_continuation(pct, iteration, max_iter)
    assert c.should_continue == (c.reason in {"normal", "token_warning"})
    if pct >= DEFAULT_THRESHOLDS.stop:
        assert c.reason == "token_critical"
    elif iteration >= max_iter:
        assert c.reason == "max_iterations"
    assert 0 <= c.iterations_remaining <= max_iter


def test_normal_answers() -> None:
    """Below every threshold: no advisory text to format, the usage rounded as shown."""
    from ai_tools.loop.advisory import LoopContinuation

    for pct in (0.0, 12.34, 5):
        advisory = TokenAdvisory.for_usage(pct)
        assert advisory.level is AdvisoryLevel.NORMAL
        assert advisory.usage_percent == round(pct, 1)
        assert advisory.message == "Sufficient context available."
        assert check_loop_continuation(pct, 2, 5) == LoopContinuation(
            True, "normal", "Sufficient context available.", advisory, 3)
    assert check_loop_continuation(12.34, 5, 5).reason == "max_iterations"
    assert check_loop_continuation(12.34, 4, 5).iterations_remaining == 1
    nan = inject_token_advisory({"success": True, "_token_advisory": {}}, float("nan"))
    assert nan == {"success": True}


@pytest.mark.parametrize(("message", "json_part"), [
    ({"role": "tool", "tool_call_id": "c1", "content": '{"success": true}'}, None),
    ({"role": "user", "content": '[TOOL RESULT: look]\n{"success": true}'},
     "[TOOL RESULT: look]"),
])
def test_advise_message_adds_the_advisory_to_the_json(message: dict[str, Any],
                                                     json_part: str | None) -> None:
    """The sent copy of a fresh tool result carries the advisory; the stored one does not."""
    import json

    advisory = TokenAdvisory.for_usage(75.0)
    advised = advise_message(message, advisory)
    body = advised["content"].partition("\n")[2] if json_part else advised["content"]
    assert json.loads(body)["_token_advisory"]["level"] == "high"
    if json_part:
        assert advised["content"].startswith(json_part)
    assert "_token_advisory" not in message["content"]
    plain = {"role": "tool", "tool_call_id": "c", "content": "not json"}
    assert advise_message(plain, advisory) == plain
