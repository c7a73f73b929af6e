"""One assistant: its configuration, its state, and what tools may ask of it.

:class:`AssistantConfig` is what a user writes (persona, model, tick rates,
execution config...).  :class:`Assistant` is the live state the service keeps
per assistant — mode, counters, history, pending events, the tick guard and
tick bookkeeping — and implements :class:`~ai_tools.interfaces.IAssistantRuntime`
so tools reach it as ``actor.assistant``.  :meth:`Assistant.to_state` and
:meth:`Assistant.from_state` turn it into the JSON dict the store keeps.

The tick itself lives in :mod:`ai_tools.service.tick`; the assistant
talks to the service that hosts it only through :class:`AssistantHost`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.errors import AIToolsError, ConfigError
from ai_tools.execution.approval import check_approval_mode, check_tool_approval
from ai_tools.execution.engine import ExecutionState
from ai_tools.execution.history import ConversationHistory
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.interfaces import IAssistantRuntime, IModelServerClient
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.loop.compaction import DEFAULT_COMPACTION, CompactionConfig
from ai_tools.loop.config import ExitTool, LoopConfig
from ai_tools.loop.context import LoopContext, LoopControl
from ai_tools.loop.result import LoopResult
from ai_tools.loop.usage import ContextMeter
from ai_tools.numbers import is_positive_number
from ai_tools.service.patterns import validate_execution_config
from ai_tools.service.scheduling import TickScheduler
from ai_tools.settings import near_name
from ai_tools.store.state_json import EncodedState, StateEncoder
from ai_tools.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from ai_tools.execution.cache import ToolCache
    from ai_tools.interfaces import ILLMClient, IStore, IWorld
    from ai_tools.service.approvals import ApprovalBoard
    from ai_tools.service.state_writer import StateWriter
    from ai_tools.service.subagents import Subagents
    from ai_tools.service.tick import TickResult
    from ai_tools.telemetry.loop_tracer import LoopTracer
    from ai_tools.telemetry.setup import Telemetry

__all__ = [
    "AWAKE",
    "MODES",
    "SLEEP",
    "STATE_VERSION",
    "Assistant",
    "AssistantConfig",
    "AssistantHost",
    "SleepRefused",
]

log = Logger()

AWAKE = "awake"
SLEEP = "sleep"
MODES = (AWAKE, SLEEP)
STATE_VERSION = 1
"""Version of the dict written by :meth:`Assistant.to_state`."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
"""A name, whole (``fullmatch``: ``$`` would let a trailing newline through)."""
_MAX_SUBAGENT_RECORDS = 20
_DIRECT_KINDS = frozenset({"whisper", "page", "tell", "direct"})


def assistant_model(host: AssistantHost, name: str, model: str) -> ILLMClient:
    """The model client assistant ``name`` calls: the profile ``model``'s client as that
    assistant uses it (its turn in the server's queue, its own breaker:
    ``for_assistant``), or the client itself when it has no such view (a test's)."""
    client = host.llm_for(model)
    return client.for_assistant(name) if IModelServerClient.providedBy(client) else client


class SleepRefused(AIToolsError):
    """Going to sleep was refused: the assistant has done nothing since it woke."""


# -- configuration ------------------------------------------------------------


_V = TypeVar("_V")
"""The value a validator checks: whatever its field holds (narrowed with isinstance)."""


class _Field(Protocol):
    """The attrs field a validator checks (its name goes into the error)."""

    @property
    def name(self) -> str:
        """The field's name."""


def _positive_number(where: str) -> Callable[[object, _Field, float], None]:
    def check(instance: object, attribute: _Field, value: float) -> None:
        if not is_positive_number(value):
            raise ConfigError(f"{where}.{attribute.name} must be a positive number, "
                              f"not {value!r}")
    return check


def _non_negative_int(instance: object, attribute: _Field, value: _V) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"assistant.{attribute.name} must be a non-negative integer, "
                          f"not {value!r}")


def _positive_int(instance: object, attribute: _Field, value: _V) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"assistant.{attribute.name} must be a positive integer, "
                          f"not {value!r}")


def _optional_positive_int(instance: object, attribute: _Field, value: _V) -> None:
    if value is not None:
        _positive_int(instance, attribute, value)


def _optional_budget(instance: object, attribute: _Field, value: _V) -> None:
    if value is not None:
        _non_negative_int(instance, attribute, value)


def _check_name(instance: object, attribute: _Field, value: _V) -> None:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ConfigError(
            f"assistant.name must be 1-64 letters, digits, '_', '.' or '-' (starting with a "
            f"letter or digit), not {value!r}"
        )


def _optional_str(instance: object, attribute: _Field, value: _V) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"assistant.{attribute.name} must be a string, not {value!r}")


def _str(instance: object, attribute: _Field, value: _V) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"assistant.{attribute.name} must be a string, not {value!r}")


def _bool(instance: object, attribute: _Field, value: _V) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"assistant.{attribute.name} must be true or false, not {value!r}")


def _optional_bool(instance: object, attribute: _Field, value: _V) -> None:
    if value is not None:
        _bool(instance, attribute, value)


def _check_execution_config(instance: object, attribute: _Field,
                            value: Mapping[str, object]) -> None:
    validate_execution_config(value, "assistant.execution_config")


def _to_exit_tools(value: Any) -> tuple[ExitTool, ...]:
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ConfigError(f"assistant.exit_tools must be a list, not {value!r}")
    tools = []
    for item in value:
        if isinstance(item, ExitTool):
            tools.append(item)
        elif isinstance(item, Mapping):
            unknown = sorted(set(item) - {"name", "description", "parameters"})
            if unknown or not isinstance(item.get("name"), str) or not item["name"]:
                raise ConfigError(
                    "assistant.exit_tools entries need a 'name' and may have 'description' "
                    f"and 'parameters', got {dict(item)!r}"
                )
            tools.append(ExitTool(**item))
        else:
            raise ConfigError(f"assistant.exit_tools entries must be tables, not {item!r}")
    return tuple(tools)


def _to_names(value: Any) -> tuple[str, ...]:
    # any sequence: a list from TOML or JSON, an Evennia attribute's saved list
    if isinstance(value, str) or not isinstance(value, Sequence) \
            or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"assistant.mcp_servers must be a list of server names, not {value!r}")
    return tuple(value)


def _frozen_mapping(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _check_approval(instance: object, attribute: _Field, value: _V) -> None:
    check_approval_mode(value, f"assistant.{attribute.name}")


def _check_tool_approval(instance: object, attribute: _Field, value: _V) -> None:
    check_tool_approval(value, f"assistant.{attribute.name}")


@attrs.frozen
class AssistantConfig:
    """How one assistant is set up.  Every field but ``name`` has a default.

    Bad values raise :class:`~ai_tools.errors.ConfigError` naming the key.
    """

    name: str = attrs.field(validator=_check_name)
    character_id: str | None = attrs.field(default=None, validator=_optional_str)
    """The character it acts as in the world (no character: its ticks exit early)."""
    persona: str = attrs.field(default="", validator=_str)
    """The persona / system prompt (a tool may replace it at run time)."""
    model: str = attrs.field(default="default", validator=_str)
    """Which of the service's model clients it uses."""
    tick_rate: float = attrs.field(default=5.0, validator=_positive_number("assistant"))
    """Seconds between ticks while awake."""
    sleep_tick_rate: float = attrs.field(default=60.0, validator=_positive_number("assistant"))
    """Seconds between ticks while asleep."""
    sleep_duration: float = attrs.field(default=3600.0, validator=_positive_number("assistant"))
    """How long a sleep lasts when no duration is given (the schedule end)."""
    min_activity_before_sleep: int = attrs.field(default=1, validator=_non_negative_int)
    """Successful tool calls needed after waking before it may sleep again."""
    reflection_interval: int = attrs.field(default=0, validator=_non_negative_int)
    """Reflect after this many ticks that ran a loop (0: never)."""
    sleep_maintenance: bool = attrs.field(default=True, validator=_bool)
    """Run one maintenance loop (memory consolidation, journal) per sleep."""
    autonomous: bool = attrs.field(default=False, validator=_bool)
    """Run the loop on ticks with nothing pending (otherwise those ticks are idle)."""
    execution_config: JSONMapping = attrs.field(
        factory=dict, converter=_frozen_mapping, validator=_check_execution_config
    )
    """Layers 1 and 2 of pattern selection and the gates (see :mod:`ai_tools.service.patterns`)."""
    tool_budget: int | None = attrs.field(default=None, validator=_optional_budget)
    """Tool calls allowed per tick (None: unlimited)."""
    approval: str = attrs.field(default="never", validator=_check_approval)
    """``operator``: its DANGEROUS tools' calls wait for an operator's yes (``never``: not)."""
    tool_approval: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_mapping, validator=_check_tool_approval)
    """Single tools' approval (``{name: "never" | "operator"}``), over ``approval``."""
    approval_timeout: float = attrs.field(default=300.0,
                                          validator=_positive_number("assistant"))
    """Seconds a call waits for an operator before it is refused as timed out."""
    exit_tools: tuple[ExitTool, ...] = attrs.field(default=(), converter=_to_exit_tools)
    native_tools: bool | None = attrs.field(default=None, validator=_optional_bool)
    """Native tool calling; None: as the model profile says (native by default)."""
    stream: bool | None = attrs.field(default=None, validator=_optional_bool)
    status_at_end: bool | None = attrs.field(default=None, validator=_optional_bool)
    """The loop's status after the history, for prompt caches (see ``LoopConfig``); None:
    the model server's default (on where its chat template takes it, see
    ``ModelServer.takes_status_at_end``)."""
    consecutive_error_cap: int = attrs.field(default=5, validator=_positive_int)
    max_history: int = attrs.field(default=200, validator=_positive_int)
    """Messages kept; older ones are truncated after each tick."""
    max_pending_events: int = attrs.field(default=100, validator=_positive_int)
    """Events kept waiting; beyond it the oldest are dropped (counted, logged, in the status)."""
    unavailable_after: int = attrs.field(default=3, validator=_non_negative_int)
    """Failed attempts at answering pending events (the model asked and failing; a
    refusal by an open circuit breaker is no attempt) after which the assistant
    says ``unavailable_line`` once; the events stay pending (0: never say it)."""
    unavailable_line: str = attrs.field(
        default="Sorry, I can't answer right now. I'll get back to you as soon as I can.",
        validator=_str)
    """What the assistant says in the world when it cannot answer for now."""
    gave_up_line: str = attrs.field(
        default="Sorry, I lost my train of thought. Could you say that again?",
        validator=_str)
    """What the assistant says in the world when a loop that took players' messages ended
    without answering them there: a failed loop or one at its iteration limit, with no
    terminal (speaking) tool call that succeeded ("": say nothing)."""
    context_window: int | None = attrs.field(default=None, validator=_optional_positive_int)
    """Override of the model's context window in tokens."""
    compaction: CompactionConfig = DEFAULT_COMPACTION
    hearing: bool = attrs.field(default=True, validator=_bool)
    """Subscribe the character in the world: what it hears becomes pending events."""
    enabled: bool = attrs.field(default=True, validator=_bool)
    """Initial state for a new assistant (a saved state keeps its own)."""
    mcp_servers: tuple[str, ...] = attrs.field(default=(), converter=_to_names)
    """The ``[mcp.servers.NAME]`` whose tools it may use (none unless named)."""

    @classmethod
    def from_mapping(cls, data: JSONMapping, where: str = "assistant") -> AssistantConfig:
        """Build from a config table; unknown keys and bad values are ConfigErrors."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a table, not {type(data).__name__}")
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            hints = [f"{key} (did you mean {close!r}?)" if close else key
                     for key, close in ((k, near_name(str(k), known)) for k in unknown)]
            raise ConfigError(f"{where}: unknown key(s) {', '.join(hints)}")
        if "name" not in data:
            raise ConfigError(f"{where}: 'name' is required")
        values: dict[str, Any] = dict(data)  # (checked by the fields' validators)
        if isinstance(values.get("compaction"), Mapping):
            try:
                values["compaction"] = CompactionConfig(**values["compaction"])
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{where}.compaction: {exc}") from None
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("assistant", where, 1)) from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_dict(self) -> JSONObject:
        """JSON form (round-trips through :meth:`from_mapping`)."""
        data: JSONObject = attrs.asdict(self, recurse=False)
        data["execution_config"] = cast(JSONObject, dict(self.execution_config))
        data["tool_approval"] = cast(JSONObject, dict(self.tool_approval))
        data["exit_tools"] = [
            {"name": t.name, "description": t.description,
             "parameters": cast(JSONObject, dict(t.parameters))}
            for t in self.exit_tools
        ]
        data["compaction"] = attrs.asdict(self.compaction)
        return data


# -- the host -----------------------------------------------------------------


class AssistantHost(Protocol):
    """What an assistant and its ticks need from the service hosting it.

    The :class:`~ai_tools.service.service.AssistantService` is one: its shared
    resources, its writer, its observers and its parts.  An assistant brings its
    own next tick forward (``scheduler``) when an event arrives or its mode changes.
    """

    @property
    def clock(self) -> IReactorTime:
        """The reactor or a ``task.Clock``."""

    @property
    def registry(self) -> ToolRegistry:
        """The tool registry."""

    def registry_for(self, assistant: Assistant) -> ToolRegistry:
        """The tools a loop of ``assistant`` starts with (the registry, MCP servers' tools)."""

    @property
    def cache(self) -> ToolCache:
        """The shared ``ToolCache``."""

    @property
    def world(self) -> IWorld | None:
        """The world the assistants act in (or None)."""

    @property
    def store(self) -> IStore:
        """The store of the assistants' states, records and persistent cache."""

    @property
    def llm_for(self) -> Callable[[str], ILLMClient]:
        """The model client of a profile name."""

    @property
    def save_failures(self) -> RepeatedFailure:
        """Where failed saves are logged: once per class (a full disk fails them all)."""

    def save_state(self, name: str) -> defer.Deferred[None]:
        """Persist assistant ``name``; fires once durable."""

    @property
    def writer(self) -> StateWriter:
        """The grouped state writer (``save_soon`` for bookkeeping that may lag)."""

    @property
    def scheduler(self) -> TickScheduler:
        """The tick scheduler: ``notify`` brings a tick forward, ``reschedule`` applies a
        new tick rate."""

    @property
    def approvals(self) -> ApprovalBoard:
        """The board of calls waiting for an operator."""

    @property
    def publish(self) -> Callable[[str, dict[str, object]], None]:
        """Hands a loop/tick event of an assistant (by name) to the observers."""

    @property
    def observed(self) -> Callable[[str], bool]:
        """Whether an event of an assistant (by name) would reach an observer now."""

    @property
    def telemetry(self) -> Telemetry | None:
        """The OpenTelemetry tracer loops are traced with (None: tracing off)."""

    @property
    def subagents(self) -> Subagents:
        """Runs the sub-agents assistants delegate tasks to."""

    @property
    def run_loop(self) -> Callable[[LoopContext, LoopConfig], defer.Deferred[LoopResult]]:
        """Runs one ReAct loop (``execute_react_loop`` unless a test overrides it)."""


# -- the assistant -------------------------------------------------------------


def _addressed(event: JSONMapping, config: AssistantConfig) -> bool:
    """Whether an event is addressed to this assistant (it wakes a sleeper)."""
    flag = event.get("addressed")
    if isinstance(flag, bool):
        return flag
    kind = event.get("type", event.get("kind"))
    if kind in _DIRECT_KINDS:
        return True
    targets = {config.name.lower()}
    if config.character_id:
        targets.add(config.character_id.lower())
    for key in ("to", "target", "target_id", "receiver"):
        value = event.get(key)
        if isinstance(value, str) and value.lower() in targets:
            return True
    text = event.get("text", event.get("message"))
    if isinstance(text, str):
        return re.search(rf"\b{re.escape(config.name)}\b", text, re.IGNORECASE) is not None
    return False


def normalise_event(event: object, now: float) -> dict[str, object]:
    """A pending-event dict from what a caller passed (a dict or a plain string).

    Raises TypeError for anything else, or for a dict that cannot be stored
    (keys must be strings, values JSON-serialisable).
    """
    if isinstance(event, str):
        data: dict[str, object] = {"type": "message", "text": event}
    elif isinstance(event, Mapping):
        if not all(isinstance(k, str) for k in event):
            raise TypeError("event keys must be strings")
        data = dict(event)
    else:
        raise TypeError(f"an event must be a dict or a string, not {type(event).__name__}")
    data.setdefault("received_at", now)
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"an event must be JSON-serialisable: {exc}") from None
    return data


@implementer(IAssistantRuntime)
@attrs.define(eq=False)
class Assistant:
    """The live state of one assistant (see the module docstring).

    Created by the service; ``host`` is None only in tests that drive the
    state alone.
    """

    config: AssistantConfig
    host: AssistantHost | None = None
    mode: str = AWAKE
    mode_reason: str = ""
    enabled: bool = True
    emergency_stopped: bool = False
    history: ConversationHistory = attrs.field(factory=ConversationHistory)
    pending_events: list[dict[str, object]] = attrs.field(factory=list)
    persona_override: str | None = None
    execution_state: ExecutionState = attrs.field(factory=ExecutionState)
    counters: dict[str, int] = attrs.field(factory=dict)
    tick_number: int = 0
    ticks_since_reflection: int = 0
    sleep_until: float | None = None
    sleep_maintenance_done: bool = False
    last_tick: JSONObject | None = None
    subagents: dict[str, dict[str, object]] = attrs.field(factory=dict)
    failed_deliveries: int = 0
    """Failed attempts at answering the pending events since they were last answered."""
    unavailable_said: bool = False
    """Whether ``unavailable_line`` was said since the pending events were last answered."""
    # Runtime only (never persisted):
    model_refused: bool = False
    """Whether its last tick was skipped because a breaker refused its model (the
    change is published once, as a ``model_state`` event, not at every tick)."""
    ticking: bool = False
    """The tick guard: True while a tick runs (released in ``finally``)."""
    control: LoopControl | None = None
    """Stop switch of the loop in flight."""
    tracer: LoopTracer | None = None
    """The loop in flight's :class:`~ai_tools.telemetry.loop_tracer.LoopTracer` (tracing
    on): a sub-agent it starts is traced as a child of the delegating call."""
    current_tick: defer.Deferred[TickResult] | None = None
    """The tick in flight (cancelled by a kill when no loop is running)."""
    tick_started_at: float | None = None
    tick_errors: list[str] = attrs.field(factory=list)
    """Errors met by the tick in flight (logged once when it ends)."""
    meter: ContextMeter = attrs.field(factory=ContextMeter)
    """Measures the context usage; the tick and its loops share it (counts kept)."""
    _config_dict: tuple[AssistantConfig, JSONObject] | None = None
    _encoder: StateEncoder = attrs.field(factory=StateEncoder)

    def __repr__(self) -> str:
        return f"<Assistant {self.name} {self.mode}{' ticking' if self.ticking else ''}>"

    # -- IAssistantRuntime attributes -------------------------------------------

    @property
    def name(self) -> str:
        """The assistant's name (unique in its service)."""
        return self.config.name

    @property
    def llm(self) -> ILLMClient | None:
        """The assistant's model client (None without a host): its own view of the
        profile's client (see :func:`assistant_model`)."""
        if self.host is None:
            return None
        return assistant_model(self.host, self.name, self.config.model)

    @property
    def execution_config(self) -> JSONMapping:
        """The execution config (pattern layers, gates, delegation settings)."""
        return self.config.execution_config

    @property
    def persona(self) -> str:
        """The current persona / system prompt."""
        return self.persona_override if self.persona_override is not None else self.config.persona

    @property
    def activity_since_wake(self) -> int:
        """Successful tool calls since the assistant last woke (the sleep safeguard)."""
        return self.execution_state.activity_since_wake

    @property
    def tick_rate(self) -> float:
        """Seconds until the next tick in the current mode."""
        return self.config.sleep_tick_rate if self.mode == SLEEP else self.config.tick_rate

    def count(self, counter: str, n: int = 1) -> None:
        """Add ``n`` to a counter."""
        self.counters[counter] = self.counters.get(counter, 0) + n

    def _now(self) -> float:
        return self.host.clock.seconds() if self.host is not None else 0.0

    def _save(self, *, report: bool = False) -> defer.Deferred[None]:
        """Save this state (grouped with others); a failure is logged and counted, and
        with ``report`` also passed on (for callers that acknowledge what they saved)."""
        if self.host is None:
            return defer.succeed(None)
        failures = self.host.save_failures
        d = self.host.save_state(self.name)
        d.addCallbacks(self._saved, self._save_failed, callbackArgs=(failures,),
                       errbackArgs=(failures, report))
        return d

    @staticmethod
    def _saved(result: None, failures: RepeatedFailure) -> None:
        failures.worked()
        return result

    def _save_failed(self, failure: Failure, failures: RepeatedFailure, report: bool = False
                     ) -> Failure | None:
        self.count("store_errors")  # (each counted; logged once per class: a full disk)
        failures.failed(failure, assistant=self.name)
        return failure if report else None

    def _publish(self, event: dict[str, object]) -> None:
        if self.host is not None:
            self.host.publish(self.name, event)

    # -- IAssistantRuntime methods ---------------------------------------------

    def set_mode(
        self, mode: str, reason: str = "", duration: float | None = None, force: bool = False
    ) -> bool:
        """Fall asleep or wake up; returns whether the mode changed.

        Falling asleep sets the schedule end (``duration`` seconds, default
        ``sleep_duration``).  It is refused with :class:`SleepRefused` while the
        assistant has done fewer than ``min_activity_before_sleep`` successful
        tool calls since it woke (the ``activity_since_wake`` safeguard), unless
        ``force``.  Waking resets that count.  Session cache entries are dropped
        on every change.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if mode == self.mode:
            return False
        now = self._now()
        if mode == SLEEP:
            needed = self.config.min_activity_before_sleep
            if not force and self.activity_since_wake < needed:
                raise SleepRefused(
                    f"cannot sleep yet: {self.activity_since_wake} of {needed} required "
                    "actions done since waking up; deal with what woke you first"
                )
            if duration is not None and not is_positive_number(duration):
                raise ValueError(f"sleep duration must be a positive number, not {duration!r}")
            self.sleep_until = now + (duration if duration is not None
                                      else self.config.sleep_duration)
            self.sleep_maintenance_done = False
            self.count("sleeps")
        else:
            self.sleep_until = None
            self.execution_state.activity_since_wake = 0
            self.count("wakes")
        self.mode = mode
        self.mode_reason = reason
        if self.host is not None:
            self.host.cache.clear_session(self.name)
            self._tick_rate_changed(self.host.scheduler)
        self._publish({"type": "mode", "mode": mode, "reason": reason,
                       "sleep_until": self.sleep_until})
        self._save()
        return True

    def queue_event(self, event: object) -> defer.Deferred[None]:
        """Queue a pending event for the next tick; fires once it is saved (fails if not).

        A string becomes ``{"type": "message", "text": ...}``.  Beyond
        ``max_pending_events`` the oldest events are dropped (counted as
        ``events_dropped``).  An event addressed to a sleeping assistant (a
        whisper, its name mentioned, ``"addressed": true``) wakes it at its
        next tick, which is brought forward.
        """
        data = normalise_event(event, self._now())
        self.pending_events.append(data)
        self.cap_pending_events()
        self.count("events_received")
        if self.host is not None and (self.mode == AWAKE or _addressed(data, self.config)):
            self.host.scheduler.notify(self.name)  # a sleeper only for an event addressed to it
        return self._save(report=True)

    def _tick_rate_changed(self, scheduler: TickScheduler) -> None:
        """Its mode changed: the next tick comes at the new rate (at once when it woke
        with events waiting)."""
        if self.name not in scheduler:
            return
        scheduler.reschedule(self.name)
        if self.mode == AWAKE and self.pending_events:
            scheduler.notify(self.name)

    def cap_pending_events(self) -> int:
        """Drop the oldest pending events beyond ``max_pending_events``; returns how many.

        Every drop is counted (``events_dropped``, shown in the status) and logged.
        """
        overflow = len(self.pending_events) - self.config.max_pending_events
        if overflow <= 0:
            return 0
        del self.pending_events[:overflow]
        self.count("events_dropped", overflow)
        log.warn("{assistant} had more than {cap} pending events: the {count} oldest were "
                 "dropped ({total} so far)", assistant=self.name,
                 cap=self.config.max_pending_events, count=overflow,
                 total=self.counters["events_dropped"])
        return overflow

    def has_addressed_event(self) -> bool:
        """Whether a pending event is addressed to this assistant."""
        return any(_addressed(e, self.config) for e in self.pending_events)

    def set_system_prompt(self, text: str) -> defer.Deferred[None]:
        """Replace the persona (kept in the saved state); fires once saved."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the system prompt must be a non-empty string")
        self.persona_override = text
        self._publish({"type": "persona", "length": len(text)})
        return self._save()

    def start_subagent(self, task: str, tool_names: Sequence[str], budget: int) -> str:
        """Start a delegated sub-agent in the background; returns its id at once."""
        if self.host is None:
            raise AIToolsError("this assistant has no service to run a sub-agent")
        return self.host.subagents.start(self, task, tool_names, budget)

    def subagent_status(self, task_id: str) -> dict[str, object] | None:
        """The status dict of a delegated task, or None."""
        record = self.subagents.get(task_id)
        return dict(record) if record is not None else None

    def record_subagent(self, task_id: str, record: dict[str, object]) -> None:
        """Store a sub-agent's status (the newest few are kept)."""
        self.subagents[task_id] = record
        finished = [k for k, v in self.subagents.items() if v.get("status") != "running"]
        for task_id in finished[: max(0, len(self.subagents) - _MAX_SUBAGENT_RECORDS)]:
            del self.subagents[task_id]

    def status(self) -> dict[str, Any]:
        """A JSON-serialisable summary: mode, flags, counters, tick bookkeeping."""
        counters = dict(self.counters)
        counters.update(self.execution_state.counters())
        return {
            "name": self.name,
            "character_id": self.config.character_id,
            "model": self.config.model,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "enabled": self.enabled,
            "emergency_stopped": self.emergency_stopped,
            "ticking": self.ticking,
            "tick_number": self.tick_number,
            "tick_rate": self.tick_rate,
            "ticks_since_reflection": self.ticks_since_reflection,
            "reflection_interval": self.config.reflection_interval,
            "activity_since_wake": self.activity_since_wake,
            "sleep_until": self.sleep_until,
            "pending_events": len(self.pending_events),
            "events_dropped": self.counters.get("events_dropped", 0),
            "failed_deliveries": self.failed_deliveries,
            "history_length": len(self.history),
            "context_percent": (round(self.meter.last.percent, 1)
                                if self.meter.last is not None else None),
            "tool_budget": self.config.tool_budget,
            "counters": counters,
            "last_tick": dict(self.last_tick) if self.last_tick else None,
            "current_tool_call": self.execution_state.current_tool_call,
            "subagents": {k: v.get("status") for k, v in self.subagents.items()},
        }

    # -- persistence -------------------------------------------------------------

    def to_state(self) -> dict[str, object]:
        """The JSON dict the store keeps (config included, runtime fields left out).

        It shares lists and dicts with the live assistant (a checkpoint after
        every iteration must be cheap): encode or copy it at once, as the
        stores do, and do not modify it.
        """
        history, pending = self._history_and_pending()
        state = self._state_fields(pending)
        state["config"] = self._config_json_dict()
        # Messages are never modified in place (ConversationHistory's rule) and
        # the store encodes the state when it is handed over: no deep copy needed.
        state["history"] = history
        return state

    def encoded_state(self) -> EncodedState:
        """:meth:`to_state` with its JSON text, encoding only what changed since the last one.

        What the service hands to the store after every iteration: the
        configuration and the history messages already encoded are re-used.
        Raises TypeError/ValueError if the state is not JSON-serialisable.
        """
        history, pending = self._history_and_pending()
        rest = self._state_fields(pending)
        # Replaced, never modified, once per tick: its JSON is kept like the config's.
        replaced = {"last_tick": rest.pop("last_tick")}
        return EncodedState(self._encoder.encode_parts(
            self._config_json_dict(), history, rest, replaced))

    def _history_and_pending(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """The history messages and pending events a state written now holds.

        While a loop's model call is in flight, the batch of pending events it
        delivered is not taken yet: the loop's delivery says what to save (the
        batch pending, the history without its message), so a process killed
        after this write answers the batch when it starts again.
        """
        messages, pending = self.history.messages, list(self.pending_events)
        delivery = self.control.delivery if self.control is not None else None
        return (messages, pending) if delivery is None else delivery.saved(messages, pending)

    def _config_json_dict(self) -> JSONObject:
        cached = self._config_dict
        if cached is None or cached[0] is not self.config:
            cached = self._config_dict = (self.config, self.config.to_dict())
        return cached[1]

    def _state_fields(self, pending: list[dict[str, object]]) -> dict[str, object]:
        """Every saved field but ``config`` and ``history`` (``pending``: the events)."""
        execution: dict[str, object] = dict(self.execution_state.counters())
        execution["current_tool_call"] = self.execution_state.current_tool_call
        return dict(
            version=STATE_VERSION,
            mode=self.mode,
            mode_reason=self.mode_reason,
            enabled=self.enabled,
            emergency_stopped=self.emergency_stopped,
            pending_events=pending,
            persona_override=self.persona_override,
            execution=execution,
            counters=self.counters,
            tick_number=self.tick_number,
            ticks_since_reflection=self.ticks_since_reflection,
            sleep_until=self.sleep_until,
            sleep_maintenance_done=self.sleep_maintenance_done,
            last_tick=self.last_tick,
            subagents=self.subagents,
            failed_deliveries=self.failed_deliveries,
            unavailable_said=self.unavailable_said,
        )

    @classmethod
    def from_state(
        cls,
        state: JSONMapping | None,
        config: AssistantConfig | None = None,
        host: AssistantHost | None = None,
    ) -> Assistant:
        """Rebuild an assistant from :meth:`to_state`'s dict.

        ``config`` (the configuration as the user has it now) wins over the
        saved one; without it the saved config is used.  A history whose last
        tool call was cut off by a crash is repaired (the call gets an
        "interrupted" answer), and sub-agents that were running are marked
        interrupted.  Malformed fields fall back to defaults (logged).
        """
        state = dict(state or {})
        if config is None:
            saved = state.get("config")
            if not isinstance(saved, Mapping):
                raise ConfigError("saved assistant state has no config; pass one")
            config = AssistantConfig.from_mapping(saved, "saved assistant config")
        assistant = cls(config=config, host=host, enabled=config.enabled)
        if state:
            saved = _SavedState(state, config.name)
            assistant._restore(saved)
            assistant._restore_execution(saved.get("execution", Mapping, {}) or {})
            assistant._restore_subagents(saved.get("subagents", Mapping, {}) or {})
        return assistant

    def _restore(self, saved: _SavedState) -> None:
        """The plain fields of a saved state (see :meth:`from_state`)."""
        mode = saved.state.get("mode", AWAKE)
        self.mode = mode if mode in MODES else AWAKE
        self.mode_reason = saved.get("mode_reason", str, "") or ""
        self.enabled = bool(saved.get("enabled", bool, self.config.enabled))
        self.emergency_stopped = bool(saved.get("emergency_stopped", bool, False))
        history = saved.get("history", list, [])
        self.history = ConversationHistory.from_list(
            [m for m in history or () if isinstance(m, Mapping)])
        events = saved.get("pending_events", list, [])
        self.pending_events = [dict(e) for e in events or () if isinstance(e, Mapping)]
        self.persona_override = saved.get("persona_override", str, None)
        counters = saved.get("counters", Mapping, {}) or {}
        self.counters = {k: v for k, v in counters.items()
                         if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}
        self.tick_number = saved.count("tick_number")
        self.ticks_since_reflection = saved.count("ticks_since_reflection")
        self.failed_deliveries = saved.count("failed_deliveries")
        self.unavailable_said = bool(saved.get("unavailable_said", bool, False))
        sleep_until = saved.get("sleep_until", (int, float), None)
        self.sleep_until = float(sleep_until) if sleep_until is not None else None
        self.sleep_maintenance_done = bool(saved.get("sleep_maintenance_done", bool, False))
        last_tick = saved.get("last_tick", Mapping, None)
        self.last_tick = dict(last_tick) if last_tick else None

    def _restore_execution(self, execution: JSONMapping) -> None:
        state = self.execution_state
        for key in ("activity_since_wake", "calls", "retries", "cache_hits", "timeouts",
                    "errors"):
            value = execution.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                setattr(state, key, value)
        current = execution.get("current_tool_call")
        state.current_tool_call = dict(current) if isinstance(current, Mapping) else None

    def _restore_subagents(self, subagents: JSONMapping) -> None:
        """Sub-agent records; one that was running when the process stopped is interrupted."""
        for task_id, record in subagents.items():
            if isinstance(task_id, str) and isinstance(record, Mapping):
                record = dict(record)
                if record.get("status") == "running":
                    record["status"] = "interrupted"
                    record["error"] = "the process stopped while the task ran"
                self.subagents[task_id] = record


@attrs.frozen
class _SavedState:
    """A saved state read defensively: a malformed field falls back to its default (logged)."""

    state: JSONMapping
    name: str

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        """The field ``key`` if it is a ``kind`` (or None), else ``default``."""
        value = self.state.get(key, default)
        if value is not None and not isinstance(value, kind):
            log.warn("Saved state of {assistant}: bad {key!r}, using the default",
                     assistant=self.name, key=key)
            return default
        return value

    def count(self, key: str) -> int:
        """A non-negative integer field (0 if absent or bad)."""
        return max(0, int(self.get(key, int, 0) or 0))

