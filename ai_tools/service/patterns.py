"""Execution-pattern selection: a ReAct loop (and how long) or a single action.

The choice is composed from three layers, each refining the one before:

1. **static config** — the assistant's ``execution_config``, e.g.
   ``{"pattern": "react_loop", "max_iterations": 5}``;
2. **context config** — per-context overrides, keyed by the tick's context type
   (``conversation``, ``event``, ``autonomous`` or any type an event names),
   e.g. ``{"conversation": {"max_iterations": 3}, "building": {"max_iterations": 10}}``;
3. **model assessment** (optional, advisory) — when ``use_llm_assessment`` is on,
   the model rates the task before the loop; its suggestion may switch to a single
   action or change the iteration count, but never beyond
   ``assessment_max_iterations`` (by default the configured ``max_iterations``)
   and never when the context sets ``lock_pattern``.

Recognised keys (all optional): ``pattern`` (``react_loop`` or
``single_action``), ``max_iterations`` (1-10, default 5),
``use_llm_assessment`` (bool), ``assessment_max_iterations`` (1-10),
``lock_pattern`` (bool).  The same layers also carry the context's tool gate
(by category and by name): ``allowed_categories`` (category values such as
``"safe_chain"``) and ``allowed_tools`` (tool names); see :func:`select_gate`.
:func:`validate_execution_config` checks them up front
with messages that name the key; :func:`select_execution_pattern` itself never
raises on a bad value (it clamps), so a tick cannot die of configuration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import attrs
from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.errors import ConfigError
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.loop.config import GatePolicy
from ai_tools.numbers import is_number
from ai_tools.tools.base import ToolCategory

if TYPE_CHECKING:
    from ai_tools.interfaces import ILLMClient

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "PATTERNS",
    "REACT_LOOP",
    "SINGLE_ACTION",
    "ExecutionPattern",
    "TaskAssessment",
    "assess_task",
    "determine_context_type",
    "parse_assessment",
    "select_execution_pattern",
    "select_gate",
    "should_use_react_loop",
    "validate_execution_config",
    "wants_assessment",
]

log = Logger()

REACT_LOOP = "react_loop"
SINGLE_ACTION = "single_action"
PATTERNS = (REACT_LOOP, SINGLE_ACTION)
DEFAULT_MAX_ITERATIONS = 5
MIN_ITERATIONS, MAX_ITERATIONS = 1, 10

_KNOWN_KEYS = frozenset({
    "pattern", "max_iterations", "use_llm_assessment", "assessment_max_iterations",
    "lock_pattern", "allowed_categories", "allowed_tools",
    # read by the delegation tools (ai_tools.tools.delegation)
    "sub_agents_enabled", "sub_agent_budget",
})
_CATEGORY_VALUES = tuple(c.value for c in ToolCategory)

CONVERSATION = "conversation"
EVENT = "event"
AUTONOMOUS = "autonomous"
_SPEECH_KINDS = frozenset({"say", "whisper", "page", "tell", "message", "channel", "speech"})


@attrs.frozen
class ExecutionPattern:
    """The outcome: how this tick runs."""

    mode: str
    """``react_loop`` or ``single_action``."""
    max_iterations: int
    """Loop iterations allowed (1 in single-action mode)."""
    context_type: str
    source: str
    """The layer that decided last: ``static``, ``context`` or ``assessment``."""
    assessment: TaskAssessment | None = None

    def as_dict(self) -> JSONObject:
        """JSON form for status and observers."""
        return {
            "mode": self.mode,
            "max_iterations": self.max_iterations,
            "context_type": self.context_type,
            "source": self.source,
            "assessment": None if self.assessment is None else self.assessment.as_dict(),
        }


@attrs.frozen
class TaskAssessment:
    """The model's view of the task at hand (layer 3, advisory)."""

    complexity: str = "moderate"
    """``simple``, ``moderate`` or ``complex``."""
    pattern: str | None = None
    max_iterations: int | None = None
    reasoning: str = ""

    def as_dict(self) -> JSONObject:
        """JSON form."""
        return {
            "complexity": self.complexity,
            "pattern": self.pattern,
            "max_iterations": self.max_iterations,
            "reasoning": self.reasoning,
        }


def should_use_react_loop(pattern: ExecutionPattern) -> bool:
    """Whether the tick runs a loop (the decision point before any model call)."""
    return pattern.mode == REACT_LOOP


def _clamp_iterations(value: object, default: int) -> int:
    if not is_number(value) or not isinstance(value, int | float):
        return default
    return max(MIN_ITERATIONS, min(MAX_ITERATIONS, int(value)))


def _is_string_list(value: object) -> TypeGuard[Collection[str]]:
    return (
        isinstance(value, Sequence | frozenset | set) and not isinstance(value, str)
        and all(isinstance(v, str) for v in value)
    )


def validate_execution_config(
    config: JSONMapping, where: str = "execution_config"
) -> None:
    """Raise :class:`ConfigError` naming the bad key of an execution config.

    Accepts both a layer-1 config and its ``contexts`` mapping of layer-2 configs.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where} must be a mapping, not {type(config).__name__}")
    for key, value in config.items():
        if key == "contexts":
            _check_contexts(value, where)
        elif key not in _KNOWN_KEYS:
            known = ", ".join(sorted(_KNOWN_KEYS | {"contexts"}))
            raise ConfigError(f"{where}: unknown key {key!r} (known: {known})")
        else:
            _check_value(key, value, where)


def _check_contexts(value: object, where: str) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}.contexts must be a mapping of context type to config")
    for ctx, sub in value.items():
        validate_execution_config(sub, f"{where}.contexts.{ctx}")
        if isinstance(sub, Mapping) and "contexts" in sub:
            raise ConfigError(f"{where}.contexts.{ctx} cannot nest 'contexts'")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_value(key: str, value: object, where: str) -> None:
    """One known key's value (see :func:`validate_execution_config`)."""
    if key == "pattern" and value not in PATTERNS:
        raise ConfigError(f"{where}.pattern must be one of {', '.join(PATTERNS)}, not {value!r}")
    if key in ("max_iterations", "assessment_max_iterations") and not (
            _is_int(value) and MIN_ITERATIONS <= value <= MAX_ITERATIONS):
        raise ConfigError(f"{where}.{key} must be an integer from {MIN_ITERATIONS} to "
                          f"{MAX_ITERATIONS}, not {value!r}")
    if key == "sub_agent_budget" and not (_is_int(value) and value >= 1):
        raise ConfigError(f"{where}.sub_agent_budget must be a positive integer, not {value!r}")
    if key in ("use_llm_assessment", "lock_pattern", "sub_agents_enabled") and not isinstance(
            value, bool):
        raise ConfigError(f"{where}.{key} must be true or false, not {value!r}")
    if key in ("allowed_categories", "allowed_tools") and not _is_string_list(value):
        raise ConfigError(f"{where}.{key} must be a list of strings, not {value!r}")
    if key == "allowed_categories" and _is_string_list(value):
        bad = sorted(set(value) - set(_CATEGORY_VALUES))
        if bad:
            raise ConfigError(f"{where}.allowed_categories: unknown {', '.join(bad)}"
                              f" (known: {', '.join(_CATEGORY_VALUES)})")


def _merged(
    static: JSONMapping, context_type: str, contexts: JSONMapping | None
) -> tuple[dict[str, object], bool]:
    merged: dict[str, object] = {k: v for k, v in static.items() if k != "contexts"}
    layers = contexts if contexts is not None else static.get("contexts") or {}
    override = layers.get(context_type) if isinstance(layers, Mapping) else None
    if isinstance(override, Mapping) and override:
        merged.update(override)
        return merged, True
    return merged, False


def wants_assessment(
    static: JSONMapping, context_type: str, contexts: JSONMapping | None = None
) -> bool:
    """Whether layer 3 is on for this context (so the tick asks the model first)."""
    merged, _ = _merged(static, context_type, contexts)
    return bool(merged.get("use_llm_assessment")) and not merged.get("lock_pattern")


def select_execution_pattern(
    static: JSONMapping,
    context_type: str,
    contexts: JSONMapping | None = None,
    assessment: TaskAssessment | None = None,
) -> ExecutionPattern:
    """Compose the three layers into an :class:`ExecutionPattern`.

    ``contexts`` defaults to ``static["contexts"]``.  Bad values are clamped or
    ignored (validate configs up front with :func:`validate_execution_config`).
    """
    merged, from_context = _merged(static, context_type, contexts)
    source = "context" if from_context else "static"
    mode = merged.get("pattern", REACT_LOOP)
    if mode not in PATTERNS:
        mode = REACT_LOOP
    iterations = _clamp_iterations(merged.get("max_iterations"), DEFAULT_MAX_ITERATIONS)
    used: TaskAssessment | None = None
    if assessment is not None and merged.get("use_llm_assessment") and not merged.get(
        "lock_pattern"
    ):
        ceiling = _clamp_iterations(merged.get("assessment_max_iterations"), iterations)
        used = assessment
        source = "assessment"
        if assessment.pattern in PATTERNS:
            mode = assessment.pattern
        elif assessment.complexity == "simple":
            mode = SINGLE_ACTION
        elif assessment.complexity == "complex":
            mode = REACT_LOOP
        if assessment.max_iterations is not None:
            iterations = min(ceiling, _clamp_iterations(assessment.max_iterations, iterations))
        elif assessment.complexity == "complex":
            iterations = ceiling
        else:
            iterations = min(ceiling, iterations)
    if mode == SINGLE_ACTION:
        iterations = 1
    return ExecutionPattern(
        mode=mode, max_iterations=iterations, context_type=context_type, source=source,
        assessment=used,
    )


def select_gate(
    static: JSONMapping, context_type: str, contexts: JSONMapping | None = None
) -> GatePolicy:
    """The tool gate of ``context_type``: allowed categories and names (None: no limit).

    Unknown category values are ignored here (validation reports them).
    """
    merged, _ = _merged(static, context_type, contexts)
    categories = merged.get("allowed_categories")
    names = merged.get("allowed_tools")
    allowed_categories = None
    if isinstance(categories, Sequence | frozenset | set) and not isinstance(categories, str):
        allowed_categories = frozenset(
            ToolCategory(c) for c in categories if c in _CATEGORY_VALUES
        )
    allowed_names = None
    if isinstance(names, Sequence | frozenset | set) and not isinstance(names, str):
        allowed_names = frozenset(n for n in names if isinstance(n, str))
    return GatePolicy(allowed_categories=allowed_categories, allowed_names=allowed_names)


def determine_context_type(
    pending_events: Sequence[JSONMapping], idle: str = AUTONOMOUS
) -> str:
    """Classify a tick by what is pending.

    An event may name its context (``{"context": "building", ...}``); the
    newest such name wins.  Otherwise someone speaking makes it a
    ``conversation``, any other event an ``event``, and nothing pending the
    ``idle`` type (``autonomous``).
    """
    kinds: set[str] = set()
    for event in reversed(pending_events):
        if not isinstance(event, Mapping):
            continue
        named = event.get("context")
        if isinstance(named, str) and named:
            return named
        kind = event.get("type", event.get("kind"))
        if isinstance(kind, str):
            kinds.add(kind)
    if not pending_events:
        return idle
    return CONVERSATION if kinds & _SPEECH_KINDS else EVENT


# -- layer 3: asking the model -----------------------------------------------

_ASSESSMENT_PROMPT = (
    "Before acting, rate the task below. Answer with one JSON object only: "
    '{"complexity": "simple" | "moderate" | "complex", '
    '"pattern": "single_action" | "react_loop", "max_iterations": 1-10, '
    '"reasoning": "<one sentence>"}. A simple task needs one action (answering a '
    "greeting); a complex one needs several steps (looking around, searching, then acting)."
)

_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_assessment(text: object) -> TaskAssessment | None:
    """Read a :class:`TaskAssessment` from model output; None if there is none.

    Lenient: takes the first JSON object found in the text (fenced or not)
    and ignores fields with unusable values.  Never raises.
    """
    if not isinstance(text, str):
        return None
    match = _JSON_OBJECT.search(text)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    complexity = data.get("complexity")
    if complexity not in ("simple", "moderate", "complex"):
        complexity = "moderate"
    pattern = data.get("pattern")
    if pattern not in PATTERNS:
        pattern = None
    iterations = data.get("max_iterations")
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        iterations = None
    reasoning = data.get("reasoning")
    return TaskAssessment(
        complexity=complexity, pattern=pattern,
        max_iterations=None if iterations is None else _clamp_iterations(iterations, 5),
        reasoning=reasoning[:500] if isinstance(reasoning, str) else "",
    )


def _response_text(response: object) -> str | None:
    """The text of a chat response (ChatResponse-like object or raw dict)."""
    for attr in ("text", "content"):
        value = getattr(response, attr, None)
        if isinstance(value, str):
            return value
    if isinstance(response, Mapping):
        try:
            content = response["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return None
        return content if isinstance(content, str) else None
    return None


@defer.inlineCallbacks
def assess_task(
    llm: ILLMClient, persona: str, events_text: str
) -> Generator[defer.Deferred[Any], object, TaskAssessment | None]:
    """Ask ``llm`` to rate the pending task (layer 3); fires with a TaskAssessment or None.

    Advisory: any failure (error, garbage answer) gives None and the tick goes
    on with layers 1 and 2.  Cancelling the Deferred cancels the request.
    """
    messages = [
        {"role": "system", "content": f"{persona}\n\n{_ASSESSMENT_PROMPT}".strip()},
        {"role": "user", "content": events_text or "Nothing new has happened."},
    ]
    try:
        response = yield defer.maybeDeferred(llm.complete, messages)
    except defer.CancelledError:
        raise
    except Exception as exc:
        log.info("Task assessment failed, using configured pattern: {error}", error=str(exc))
        return None
    return parse_assessment(_response_text(response))
