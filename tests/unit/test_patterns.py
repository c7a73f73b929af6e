"""Tests for ai_tools.service.patterns: the three-layer execution-pattern selection."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer

from ai_tools.errors import ConfigError
from ai_tools.service.patterns import (
    REACT_LOOP,
    SINGLE_ACTION,
    TaskAssessment,
    assess_task,
    determine_context_type,
    parse_assessment,
    select_execution_pattern,
    select_gate,
    should_use_react_loop,
    validate_execution_config,
    wants_assessment,
)


def test_defaults_are_a_five_iteration_react_loop() -> None:
    pattern = select_execution_pattern({}, "autonomous")
    assert pattern.mode == REACT_LOOP
    assert pattern.max_iterations == 5
    assert pattern.source == "static"
    assert should_use_react_loop(pattern)


def test_layer1_static_config() -> None:
    pattern = select_execution_pattern({"max_iterations": 8}, "conversation")
    assert (pattern.mode, pattern.max_iterations, pattern.source) == (REACT_LOOP, 8, "static")
    single = select_execution_pattern({"pattern": "single_action"}, "conversation")
    assert (single.mode, single.max_iterations) == (SINGLE_ACTION, 1)
    assert not should_use_react_loop(single)


def test_layer2_context_override_wins_over_static() -> None:
    static = {
        "max_iterations": 5,
        "contexts": {"conversation": {"max_iterations": 2}, "building": {"max_iterations": 10}},
    }
    assert select_execution_pattern(static, "conversation").max_iterations == 2
    building = select_execution_pattern(static, "building")
    assert (building.max_iterations, building.source) == (10, "context")
    other = select_execution_pattern(static, "event")
    assert (other.max_iterations, other.source) == (5, "static")


def test_layer2_can_be_passed_separately() -> None:
    pattern = select_execution_pattern(
        {"pattern": "react_loop"}, "conversation", {"conversation": {"pattern": "single_action"}}
    )
    assert pattern.mode == SINGLE_ACTION


def test_layer3_ignored_unless_enabled() -> None:
    assessment = TaskAssessment(complexity="simple", pattern="single_action")
    pattern = select_execution_pattern({}, "conversation", assessment=assessment)
    assert pattern.mode == REACT_LOOP
    assert pattern.assessment is None
    assert not wants_assessment({}, "conversation")


def test_layer3_simple_task_becomes_single_action() -> None:
    static = {"use_llm_assessment": True}
    assert wants_assessment(static, "conversation")
    pattern = select_execution_pattern(
        static, "conversation", assessment=TaskAssessment(complexity="simple")
    )
    assert (pattern.mode, pattern.max_iterations, pattern.source) == (
        SINGLE_ACTION, 1, "assessment")
    assert pattern.as_dict()["assessment"]["complexity"] == "simple"


def test_layer3_cannot_exceed_the_ceiling() -> None:
    static = {"use_llm_assessment": True, "max_iterations": 4}
    big = TaskAssessment(complexity="complex", max_iterations=10)
    assert select_execution_pattern(static, "x", assessment=big).max_iterations == 4
    static["assessment_max_iterations"] = 7
    assert select_execution_pattern(static, "x", assessment=big).max_iterations == 7
    complex_no_count = TaskAssessment(complexity="complex")
    assert select_execution_pattern(static, "x", assessment=complex_no_count).max_iterations == 7
    fewer = TaskAssessment(complexity="moderate", max_iterations=2)
    assert select_execution_pattern(static, "x", assessment=fewer).max_iterations == 2


def test_layer3_locked_context_ignores_the_model() -> None:
    static = {
        "use_llm_assessment": True,
        "contexts": {"combat": {"lock_pattern": True, "pattern": "single_action"}},
    }
    assert not wants_assessment(static, "combat")
    pattern = select_execution_pattern(
        static, "combat", assessment=TaskAssessment(complexity="complex", pattern="react_loop")
    )
    assert pattern.mode == SINGLE_ACTION
    assert pattern.source == "context"


def test_layer3_can_be_enabled_per_context() -> None:
    static = {"contexts": {"building": {"use_llm_assessment": True}}}
    assert wants_assessment(static, "building")
    assert not wants_assessment(static, "conversation")


def test_bad_values_are_clamped_never_raised() -> None:
    pattern = select_execution_pattern(
        {"pattern": "bogus", "max_iterations": 99, "contexts": "nope"}, "x"
    )
    assert (pattern.mode, pattern.max_iterations) == (REACT_LOOP, 10)
    assert select_execution_pattern({"max_iterations": "3"}, "x").max_iterations == 5
    assert select_execution_pattern({"max_iterations": True}, "x").max_iterations == 5
    assert select_execution_pattern({"max_iterations": 0}, "x").max_iterations == 1


@given(
    static=st.dictionaries(
        st.sampled_from(["pattern", "max_iterations", "use_llm_assessment",
                         "assessment_max_iterations", "lock_pattern", "contexts"]),
        st.one_of(st.none(), st.booleans(), st.integers(-5, 50), st.text(max_size=5),
                  st.sampled_from(["react_loop", "single_action"]),
                  st.dictionaries(st.text(max_size=3), st.dictionaries(
                      st.sampled_from(["pattern", "max_iterations"]), st.integers(-3, 30)))),
    ),
    complexity=st.sampled_from(["simple", "moderate", "complex"]),
    iterations=st.one_of(st.none(), st.integers(1, 10)),
)
def test_selection_always_yields_a_valid_pattern(
    static: dict[str, Any], complexity: str, iterations: int | None
) -> None:
    """Whatever the configuration, the outcome is runnable (1-10 iterations, known mode)."""
    assessment = TaskAssessment(complexity=complexity, max_iterations=iterations)
    pattern = select_execution_pattern(static, "conversation", assessment=assessment)
    assert pattern.mode in (REACT_LOOP, SINGLE_ACTION)
    assert 1 <= pattern.max_iterations <= 10
    if pattern.mode == SINGLE_ACTION:
        assert pattern.max_iterations == 1


def test_validate_accepts_good_config() -> None:
    validate_execution_config({
        "pattern": "react_loop", "max_iterations": 10, "use_llm_assessment": False,
        "assessment_max_iterations": 3, "lock_pattern": False,
        "sub_agents_enabled": True, "sub_agent_budget": 5,
        "contexts": {"conversation": {"max_iterations": 1}},
    })


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"pattern": "loop"}, "pattern must be one of"),
        ({"max_iterations": 11}, "max_iterations must be an integer from 1 to 10"),
        ({"max_iterations": 0}, "max_iterations"),
        ({"max_iterations": True}, "max_iterations"),
        ({"use_llm_assessment": "yes"}, "use_llm_assessment must be true or false"),
        ({"iterations": 3}, "unknown key 'iterations'"),
        ({"contexts": []}, "contexts must be a mapping"),
        ({"contexts": {"chat": {"max_iterations": 20}}}, r"contexts\.chat\.max_iterations"),
        ({"contexts": {"chat": {"contexts": {}}}}, "cannot nest"),
        ({"contexts": {"chat": 3}}, "must be a mapping"),
        ({"allowed_categories": ["safe_chain", "flying"]}, "unknown flying"),
        ({"allowed_categories": "safe_chain"}, "must be a list of strings"),
        ({"allowed_tools": ["say", 3]}, "must be a list of strings"),
        ({"sub_agent_budget": 0}, "sub_agent_budget must be a positive integer"),
        ({"sub_agents_enabled": 1}, "sub_agents_enabled must be true or false"),
    ],
)
def test_validate_names_the_bad_key(config: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_execution_config(config)


def test_validate_rejects_non_mapping() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        validate_execution_config([])  # type: ignore[arg-type]


def test_context_type_from_pending_events() -> None:
    assert determine_context_type([]) == "autonomous"
    assert determine_context_type([], idle="idle") == "idle"
    assert determine_context_type([{"type": "say", "text": "hi"}]) == "conversation"
    assert determine_context_type([{"type": "arrive"}]) == "event"
    assert determine_context_type([{"kind": "whisper"}, {"type": "arrive"}]) == "conversation"
    named = [{"type": "say", "context": "building"}, {"type": "say"}]
    assert determine_context_type(named) == "building"
    assert determine_context_type(["junk", 3]) == "event"  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"complexity": "simple", "pattern": "single_action", "reasoning": "greeting"}',
         TaskAssessment("simple", "single_action", None, "greeting")),
        ('```json\n{"complexity": "complex", "max_iterations": 8}\n```',
         TaskAssessment("complex", None, 8, "")),
        ('Sure! {"complexity": "huge", "pattern": "magic", "max_iterations": 50}',
         TaskAssessment("moderate", None, 10, "")),
        ('{"max_iterations": true}', TaskAssessment("moderate", None, None, "")),
        ("no json here", None),
        ("{not json}", None),
        ("[1, 2]", None),
        (None, None),
        (42, None),
    ],
)
def test_parse_assessment_is_lenient(text: Any, expected: TaskAssessment | None) -> None:
    assert parse_assessment(text) == expected


@given(st.text())
def test_parse_assessment_never_raises(text: str) -> None:
    result = parse_assessment(text)
    assert result is None or isinstance(result, TaskAssessment)


class FakeLLM:
    """Answers every request with a fixed response, or fails."""

    def __init__(self, response: Any = None, error: Exception | None = None) -> None:
        self.response = response
        self.error = error
        self.requests: list[Any] = []

    def complete(self, messages: Any, **kw: Any) -> defer.Deferred[Any]:
        self.requests.append(messages)
        if self.error is not None:
            return defer.fail(self.error)
        return defer.succeed(self.response)


class Text:
    def __init__(self, text: str) -> None:
        self.text = text


def test_assess_task_reads_the_models_answer() -> None:
    llm = FakeLLM(Text('{"complexity": "simple"}'))
    d = assess_task(llm, "You are Ada.", "- bob (say): hi")
    assert d.result == TaskAssessment(complexity="simple")
    system, user = llm.requests[0]
    assert "You are Ada." in system["content"] and "complexity" in system["content"]
    assert user["content"] == "- bob (say): hi"


def test_assess_task_accepts_raw_openai_dicts() -> None:
    raw = {"choices": [{"message": {"content": '{"complexity": "complex"}'}}]}
    assert assess_task(FakeLLM(raw), "", "").result == TaskAssessment(complexity="complex")
    assert assess_task(FakeLLM({"choices": []}), "", "").result is None


def test_assess_task_failure_is_advisory() -> None:
    """A failing or garbage-answering model yields None, never an error."""
    assert assess_task(FakeLLM(error=RuntimeError("down")), "", "x").result is None
    assert assess_task(FakeLLM(Text("garbage")), "", "x").result is None
    assert assess_task(FakeLLM(object()), "", "x").result is None


def test_assess_task_cancellation_propagates() -> None:
    """Cancelling the assessment cancels the model request (a kill during assessment)."""
    pending: defer.Deferred[Any] = defer.Deferred()

    class Hanging:
        def complete(self, messages: Any, **kw: Any) -> defer.Deferred[Any]:
            return pending

    d = assess_task(Hanging(), "", "x")
    d.cancel()
    assert pending.called
    failure = []
    d.addErrback(failure.append)
    assert failure[0].check(defer.CancelledError)


def test_gate_per_context() -> None:
    """The context's gate: categories and names, layer 2 overriding layer 1."""
    from ai_tools.tools.base import ToolCategory

    static = {
        "allowed_categories": ["safe_chain", "terminal"],
        "contexts": {"sleep": {"allowed_categories": ["safe_chain"], "allowed_tools": ["noop"]}},
    }
    validate_execution_config(static)
    awake = select_gate(static, "conversation")
    assert awake.allowed_categories == frozenset({ToolCategory.SAFE_CHAIN, ToolCategory.TERMINAL})
    assert awake.allowed_names is None
    asleep = select_gate(static, "sleep")
    assert asleep.allowed_categories == frozenset({ToolCategory.SAFE_CHAIN})
    assert asleep.allowed_names == frozenset({"noop"})
    assert select_gate({}, "x").allowed_categories is None
    junk = select_gate({"allowed_categories": ["nope", "dangerous"], "allowed_tools": "say"}, "x")
    assert junk.allowed_categories == frozenset({ToolCategory.DANGEROUS})
    assert junk.allowed_names is None
