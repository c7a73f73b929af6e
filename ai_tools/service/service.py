"""AssistantService: many assistants on one reactor, as a Twisted service.

The service owns everything its assistants share — the tool registry, the
tool cache (one object, a namespace per assistant), the model clients, the
store and the world — and one :class:`~ai_tools.service.assistant.Assistant` state
object per assistant.  One ``LoopingCall`` (the :class:`TickScheduler`) starts
the assistants that are due; each tick runs its steps in order
(:mod:`ai_tools.service.tick`).  State is persisted after every loop iteration through
a group-committing :class:`~ai_tools.service.state_writer.StateWriter`.

Embedding it::

    service = AssistantService(llm=client, store=SQLiteStore("state.db"), world=world)
    service.setServiceParent(application)          # or service.startService()
    yield service.add_assistant({"name": "ada", "character_id": "char:ada"})
    yield service.send("ada", {"type": "say", "from": "bob", "text": "hello Ada"})

The control API (all by assistant name): :meth:`~AssistantService.add_assistant`,
:meth:`~AssistantService.remove_assistant`, :meth:`~AssistantService.reconfigure`,
:meth:`~AssistantService.enable`,
:meth:`~AssistantService.disable`, :meth:`~AssistantService.send`,
:meth:`~AssistantService.run_tick`, :meth:`~AssistantService.stop_assistant`,
:meth:`~AssistantService.emergency_stop`,
:meth:`~AssistantService.clear_emergency_stop`, :meth:`~AssistantService.status`,
:meth:`~AssistantService.counters`, :meth:`~AssistantService.history` and
:meth:`~AssistantService.add_observer`.  See ``docs/service.md``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import attrs
from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import ConfigError, NotFound, ServiceNotRunning
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.reasons import TerminationReason
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.loop import (
    GatePolicy,
    LoopConfig,
    LoopContext,
    LoopControl,
    LoopResult,
    execute_react_loop,
)
from ai_tools.service.approvals import ApprovalBoard
from ai_tools.service.assistant import AWAKE, Assistant, AssistantConfig, assistant_model
from ai_tools.service.scheduling import Clock, TickScheduler
from ai_tools.service.state_writer import StateWriter
from ai_tools.service.tick import TickResult, at_tick
from ai_tools.telemetry.setup import Telemetry, telemetry_for, trace_loop
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry

__all__ = ["AssistantService", "LoopRunner", "Observer", "world_message_to_event"]

log = Logger()

Observer = Callable[[dict[str, Any]], None]
"""Receives loop and tick events: dicts with ``type`` and ``assistant``."""

LoopRunner = Callable[[LoopContext, LoopConfig], "defer.Deferred[LoopResult]"]
"""Runs one loop; :func:`ai_tools.loop.run.execute_react_loop` unless replaced (tests)."""

MIN_TICK_RATE = 1.0
"""The default floor of an assistant's ``tick_rate`` and ``sleep_tick_rate`` (seconds):
each tick may ask the model, so a rate of ``1e-9`` would be a model request per turn."""

MAX_ASSISTANTS = 1000
"""The default bound on the assistants one service (with workers: all of them) has."""

_SUBAGENT_PERSONA = (
    "You are a helper sub-agent working for {name}. Your only job is the task in the "
    "first message: use your tools to do it, then answer with a short plain-text report "
    "of the result. Do not talk to anyone."
)
_SUBAGENT_RESULT_CHARS = 4000


def world_message_to_event(message: Any) -> dict[str, Any]:
    """A pending-event dict from what a world delivered to a listener.

    Accepts a ``WorldMessage`` (attrs), a dict, or any object with attributes;
    the message's ``kind`` also becomes the event's ``type``.
    """
    if isinstance(message, Mapping):
        data = dict(message)
    elif attrs.has(type(message)):
        data = attrs.asdict(message, recurse=True)
    elif hasattr(message, "__dict__"):
        data = {k: v for k, v in vars(message).items() if not k.startswith("_")}
    else:
        data = {"text": str(message)}
    if "type" not in data:
        data["type"] = data.get("kind") or "message"
    if "from" not in data:
        speaker = data.get("sender_key") or data.get("sender_id")
        if speaker:
            data["from"] = speaker  # how the loop's prompt names the speaker
    return data


def _sender_of(event: Mapping[str, Any]) -> Any:
    for key in ("sender_id", "sender", "from_id", "speaker_id", "source"):
        if event.get(key) is not None:
            return event[key]
    return None


def _observe(d: defer.Deferred[Any]) -> defer.Deferred[None]:
    """A new Deferred firing (with None) when ``d`` fires; ``d``'s result is untouched."""
    waiter: defer.Deferred[None] = defer.Deferred()

    def passthrough(result: Any) -> Any:
        waiter.callback(None)
        return result

    d.addBoth(passthrough)
    return waiter


def _store_health(store: Any) -> dict[str, Any] | None:
    """The store's report on itself when it keeps one (the SQLite store's file), else None."""
    health = getattr(store, "health", None)
    return health() if callable(health) else None


def _first_failure(failure: Failure) -> Failure:
    """The failure inside ``gatherResults``' ``FirstError``."""
    failure.trap(defer.FirstError)
    first: Any = failure.value
    sub: Failure = first.subFailure
    return sub


@defer.inlineCallbacks
def _within(d: defer.Deferred[Any], seconds: float, clock: Clock) -> Any:
    """Wait for ``d`` at most ``seconds``; returns True if it fired in time."""
    waiter: defer.Deferred[bool] = defer.Deferred()

    def fired(_: Any) -> None:
        if not waiter.called:
            waiter.callback(True)

    def timeout() -> None:
        if not waiter.called:
            waiter.callback(False)

    timer = clock.callLater(seconds, timeout)
    d.addBoth(fired)
    in_time = yield waiter
    if timer.active():
        timer.cancel()
    return in_time


def _abandon_trace(result: Any, tracer: Any) -> Any:
    """A traced loop ended: close its spans if no ``termination`` event did."""
    tracer.abandon("the loop ended without a termination event")
    return result


def _memory_store(clock: Any) -> Any:
    """The store of a service given none: memory only (imported on use: a layer below)."""
    from ai_tools.store.memory import MemoryStore

    return MemoryStore(clock=clock)


def _default_registry() -> ToolRegistry:
    """The registry of a service given none: the default tools."""
    from ai_tools.tools import register_default_tools

    return register_default_tools()


class AssistantService(MultiService):
    """Hosts assistants on one reactor (a ``MultiService``; compares by identity).

    Every argument is optional:

    ``llm`` / ``llms``
        The model client (``ILLMClient``) assistants use by default, and/or a
        mapping of named clients (an assistant picks one with its ``model``
        key; ``llm`` is the one called ``"default"``).  The service closes
        them when it stops.
    ``store``
        An ``IStore`` (default: a ``MemoryStore``); opened when the service
        starts (or the first assistant is added), closed when it stops.
    ``registry``
        The ``ToolRegistry`` (default: the default tool library).
    ``world``
        The ``IWorld`` tools act on; assistants with ``hearing`` on are
        subscribed to what their character hears.
    ``clock``
        The reactor (default: the global one, looked up when first needed).
    ``cache``
        The ``ToolCache`` (default: one over ``store``).
    ``tick_interval``, ``max_concurrent``
        The scheduler's wake-up period and how many ticks may run at once.
    ``stop_grace``
        Seconds ``stopService`` waits for ticks in flight before cancelling them.
    ``loop_runner``
        Replaces ``execute_react_loop`` (tests, benchmarks).
    ``restore_saved``
        On start, also bring back every assistant the store knows (with its
        saved configuration).
    ``telemetry``, ``otlp_endpoint``
        OpenTelemetry tracing (``docs/observability.md``): the
        :class:`~ai_tools.telemetry.Telemetry` to trace loops with, else found at
        start — the program's own tracer provider if it set one, else an OTLP/HTTP
        export to ``otlp_endpoint`` or the ``OTEL_EXPORTER_OTLP_*`` endpoint, else off.
    """

    def __init__(
        self,
        *,
        llm: Any = None,
        llms: Mapping[str, Any] | None = None,
        store: Any = None,
        registry: ToolRegistry | None = None,
        world: Any = None,
        clock: Any = None,
        cache: Any = None,
        tick_interval: float = 1.0,
        max_concurrent: int = 100,
        stop_grace: float = 10.0,
        loop_runner: LoopRunner | None = None,
        restore_saved: bool = False,
        telemetry: Telemetry | None = None,
        otlp_endpoint: str | None = None,
        min_tick_rate: float = MIN_TICK_RATE,
        max_assistants: int = MAX_ASSISTANTS,
    ) -> None:
        super().__init__()
        self.min_tick_rate = min_tick_rate
        self.max_assistants = max_assistants
        self.save_failures = RepeatedFailure("Could not save the state of assistants", log)
        """Failed saves of the assistants, logged once per class until one works again."""
        self._clock = clock
        self._llms: dict[str, Any] = dict(llms or {})
        if llm is not None:
            self._llms["default"] = llm
        self.store = store if store is not None else _memory_store(clock)
        self.registry = registry if registry is not None else _default_registry()
        self.world = world
        self._cache = cache
        self.stop_grace = stop_grace
        self.restore_saved = restore_saved
        self._loop_runner: LoopRunner = loop_runner or execute_react_loop
        self._tick_interval = tick_interval
        self._max_concurrent = max_concurrent
        self._init_tables()
        self.telemetry = telemetry
        """The OpenTelemetry tracer loops are traced with (None: tracing off; found when
        the service starts, see :func:`~ai_tools.telemetry.telemetry_for`)."""
        self._otlp_endpoint = otlp_endpoint
        self._found_telemetry: Telemetry | None = None
        self.ownership: Any = None
        """Who decides which assistants this process runs when several workers share
        them (:class:`~ai_tools.service.leases.LeaseManager`): told ``stopping()`` when
        ticking stops, ``stopped()`` (releasing its leases) once every state is saved."""
        self.tool_sources: Any = None
        """Tools from elsewhere for each loop: an :class:`~ai_tools.mcp.servers.McpClientService`
        (or None), asked by :meth:`registry_for` for the servers an assistant may use."""

    def _init_tables(self) -> None:
        """The assistants, observers and sub-agents, empty; the parts made at start, absent."""
        self._assistants: dict[str, Assistant] = {}
        self._adding: set[str] = set()
        # A tuple, replaced on change: publishing iterates it without a copy.
        self._observers: tuple[tuple[Observer, str | None], ...] = ()
        self._hearing: dict[str, Callable[[], Any]] = {}
        self._subagents: dict[tuple[str, str], tuple[defer.Deferred[Any], LoopControl]] = {}
        self._opened: defer.Deferred[None] | None = None
        self._closed = False
        self._scheduler: TickScheduler | None = None
        self._writer: StateWriter | None = None
        self._approvals: ApprovalBoard | None = None
        self._ready: defer.Deferred[None] | None = None
        self._observer_errors = itertools.count()
        self.everything_stopped = False
        """An emergency stop of every assistant holds (until cleared for all): callers
        from outside the loops (MCP sessions) run no tool either.  Not saved: each
        assistant's own stop is."""

    # -- shared resources (the AssistantHost protocol) ----------------------------

    def registry_for(self, assistant: Assistant) -> ToolRegistry:
        """The tools a loop of ``assistant`` starts with, and keeps to its end.

        The registry, plus the tools of the MCP servers its ``mcp_servers``
        names that are ready now (:attr:`tool_sources`).
        """
        sources, servers = self.tool_sources, assistant.config.mcp_servers
        if sources is None or not servers:
            return self.registry
        return cast(ToolRegistry, sources.registry_for(self.registry, servers))

    @property
    def clock(self) -> Any:
        """The reactor (or the clock given to the constructor)."""
        if self._clock is None:
            self._clock = global_reactor()
        return self._clock

    @property
    def cache(self) -> Any:
        """The shared ``ToolCache`` (created on first use)."""
        if self._cache is None:
            from ai_tools.execution.cache import ToolCache

            self._cache = ToolCache(clock=self.clock, store=self.store)
        return self._cache

    @property
    def approvals(self) -> ApprovalBoard:
        """The calls waiting for an operator's approval (created on first use)."""
        if self._approvals is None:
            self._approvals = ApprovalBoard(self.clock, self.publish)
        return self._approvals

    @property
    def scheduler(self) -> TickScheduler:
        """The tick scheduler (one ``LoopingCall`` for every assistant)."""
        if self._scheduler is None:
            self._scheduler = TickScheduler(
                clock=self.clock, tick=self._scheduled_tick, rate_of=self._rate_of,
                interval=self._tick_interval, max_concurrent=self._max_concurrent,
            )
        return self._scheduler

    @property
    def writer(self) -> StateWriter:
        """The group-committing state writer."""
        if self._writer is None:
            self._writer = StateWriter(store=self.store, state_of=self._state_of,
                                       clock=self.clock)
        return self._writer

    def llm_for(self, model: str) -> Any:
        """The model client called ``model`` (KeyError if unknown)."""
        return self._llms[model]

    @property
    def llms(self) -> dict[str, Any]:
        """The model clients by name (a copy)."""
        return dict(self._llms)

    def save_state(self, name: str) -> defer.Deferred[None]:
        """Persist assistant ``name`` (grouped with others); fires once durable."""
        return self.writer.save(name)

    def save_state_soon(self, name: str) -> None:
        """Persist assistant ``name`` within a second, grouped with other saves."""
        self.writer.save_soon(name)

    def _state_of(self, name: str) -> Mapping[str, Any] | None:
        assistant = self._assistants.get(name)
        return None if assistant is None else assistant.encoded_state()

    def publish(self, name: str, event: dict[str, Any]) -> None:
        """Hand an event of assistant ``name`` to the observers (their errors are logged)."""
        if not self._observers:
            return
        if "assistant" not in event:
            event["assistant"] = name
        if "time" not in event:
            event["time"] = (self._clock or self.clock).seconds()
        for observer, only in self._observers:
            if only is not None and only != name:
                continue
            try:
                observer(event)
            except Exception:
                log.failure("Observer {observer!r} failed on a {kind} event of {assistant}",
                            observer=observer, kind=event.get("type"), assistant=name)

    def observed(self, name: str) -> bool:
        """Whether an event of assistant ``name`` would reach an observer now.

        Loops ask before building each event (``LoopContext.observed``): with no
        observer subscribed (a console, an event stream, tracing), none is built.
        """
        for _, only in self._observers:
            if only is None or only == name:
                return True
        return False

    def mode_changed(self, assistant: Assistant) -> None:
        """Apply the new tick rate; an assistant that woke with events runs soon."""
        scheduler = self.scheduler
        if assistant.name not in scheduler:
            return
        scheduler.reschedule(assistant.name)
        if assistant.mode == AWAKE and assistant.pending_events:
            scheduler.notify(assistant.name)

    def events_queued(self, assistant: Assistant, addressed: bool) -> None:
        """Bring the next tick forward (a sleeper only for an event addressed to it)."""
        if assistant.mode == AWAKE or addressed:
            self.scheduler.notify(assistant.name)

    def run_loop(self, ctx: LoopContext, config: LoopConfig) -> defer.Deferred[LoopResult]:
        """Run one ReAct loop with the configured runner."""
        return self._loop_runner(ctx, config)

    def _rate_of(self, name: str) -> float:
        assistant = self._assistants.get(name)
        return assistant.tick_rate if assistant is not None else 60.0

    # -- lifecycle -------------------------------------------------------------------

    def _open(self) -> defer.Deferred[None]:
        """Open the store once; every caller gets a Deferred of that."""
        if self._opened is None:
            opened: defer.Deferred[None] = defer.maybeDeferred(self.store.open)
            self._opened = opened
            opened.addErrback(self._open_failed)
        result: defer.Deferred[None] = defer.Deferred()
        self._opened.addBoth(self._chain, result)
        return result

    @staticmethod
    def _chain(value: Any, target: defer.Deferred[Any]) -> Any:
        if isinstance(value, Failure):
            target.errback(value)
        else:
            target.callback(value)
        return value

    def _open_failed(self, failure: Failure) -> Failure:
        log.failure("The assistant store could not be opened", failure)
        self._opened = None  # let a later call try again
        return failure

    def startService(self) -> None:
        """Open the store, optionally restore saved assistants, start the timer."""
        super().startService()
        self._closed = False
        if self.telemetry is None:
            self.telemetry = self._found_telemetry = telemetry_for(self._otlp_endpoint)
        d = self._open()
        if self.restore_saved:
            d.addCallback(lambda _: self.restore_saved_assistants())
        d.addCallback(self._start_ticking)
        d.addErrback(lambda f: log.failure("AssistantService did not start", f))
        self._ready = d

    def _start_ticking(self, _: Any) -> None:
        if self.running:
            self.scheduler.start()
            log.info("AssistantService ticking {count} assistant(s) every {interval}s",
                     count=len(self._assistants), interval=self._tick_interval)

    def when_ready(self) -> defer.Deferred[None]:
        """Fires once the service has started (store open, timer running)."""
        if self._ready is None:
            return defer.succeed(None)
        result: defer.Deferred[None] = defer.Deferred()
        self._ready.addBoth(self._chain, result)
        return result

    def stopService(self) -> defer.Deferred[None]:
        """Stop ticking, wait for ticks in flight (at most ``stop_grace`` s), close all."""
        d = defer.maybeDeferred(super().stopService)
        d.addCallback(lambda _: self._shutdown())
        d.addCallback(lambda _: self._stop_telemetry())
        return d

    def _stop_telemetry(self) -> defer.Deferred[None] | None:
        """Export the last spans of ai_tools' own OpenTelemetry providers (bounded wait)."""
        telemetry = self.telemetry
        if telemetry is not None and telemetry is self._found_telemetry:
            self.telemetry = self._found_telemetry = None  # a restart looks again
        return telemetry.shutdown(self.clock) if telemetry is not None else None

    @defer.inlineCallbacks
    def _shutdown(self) -> Any:
        if self._scheduler is not None:
            self._scheduler.stop()
        if self.ownership is not None:
            self.ownership.stopping()
        for name in list(self._hearing):
            self._unhear(name)
        if self._approvals is not None:  # a yes to a stopped process would approve nothing
            self._approvals.refuse_all("the service is stopping (a restart refuses every "
                                       "call still waiting)")
        in_flight = self._in_flight()
        if in_flight:
            done = yield _within(self._all_finished(), self.stop_grace, self.clock)
            if not done:  # (with no grace at all, cancelling is what was asked for)
                log.emit(LogLevel.warn if self.stop_grace > 0 else LogLevel.info,
                         "Stopping: {count} tick(s) still running after {grace}s; cancelling",
                         count=len(self._in_flight()), grace=self.stop_grace)
                self._cancel_in_flight()
                yield _within(self._all_finished(), self.stop_grace, self.clock)
        yield self._final_save()
        for name, client in self._unique_llms():
            try:
                yield defer.maybeDeferred(client.close)
            except Exception:
                log.failure("Closing model client {name} failed", name=name)
        if self._opened is not None and not self._closed:
            self._closed = True
            self._opened = None
            try:
                yield defer.maybeDeferred(self.store.close)
            except Exception:
                log.failure("Closing the assistant store failed")
        return None

    @defer.inlineCallbacks
    def _final_save(self) -> Any:
        """Save every assistant; then let the other workers have them (if shared)."""
        if self._writer is not None or self._assistants:
            for name in self._assistants:
                self.writer.save(name).addErrback(self._final_save_failed, name)
            yield self.writer.flush()
        if self.ownership is not None:
            try:
                yield defer.maybeDeferred(self.ownership.stopped)
            except Exception:
                log.failure("Releasing this worker's assistants failed")

    def _final_save_failed(self, failure: Failure, name: str) -> None:
        log.error("Final save of {assistant} failed: {error}", assistant=name,
                  error=failure.getErrorMessage())

    def _unique_llms(self) -> list[tuple[str, Any]]:
        seen: set[int] = set()
        unique = []
        for name, client in self._llms.items():
            if id(client) not in seen and hasattr(client, "close"):
                seen.add(id(client))
                unique.append((name, client))
        return unique

    def _in_flight(self) -> list[defer.Deferred[Any]]:
        ticks = list(self._scheduler.running().values()) if self._scheduler else []
        return ticks + [d for d, _ in self._subagents.values()]

    def _all_finished(self) -> defer.Deferred[Any]:
        waits: list[defer.Deferred[Any]] = []
        if self._scheduler is not None:
            waits.append(self._scheduler.when_idle())
        for d, _ in list(self._subagents.values()):
            waits.append(_observe(d))
        return defer.DeferredList(waits)

    def _cancel_in_flight(self) -> None:
        for assistant in self._assistants.values():
            if assistant.control is not None:
                assistant.control.stop("service stopping", TerminationReason.SHUTDOWN)
        if self._scheduler is not None:
            self._scheduler.cancel_running()
        for d, control in list(self._subagents.values()):
            control.stop("service stopping", TerminationReason.SHUTDOWN)
            d.cancel()

    # -- adding and removing --------------------------------------------------------

    def get(self, name: str) -> Assistant:
        """The assistant called ``name``; :class:`~ai_tools.errors.NotFound` if none."""
        try:
            return self._assistants[name]
        except KeyError:
            raise NotFound(f"no assistant named {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._assistants

    def names(self) -> list[str]:
        """Names of the assistants, sorted."""
        return sorted(self._assistants)

    @property
    def assistants(self) -> dict[str, Assistant]:
        """The assistants by name (a copy)."""
        return dict(self._assistants)

    @defer.inlineCallbacks
    def add_assistant(
        self, config: AssistantConfig | Mapping[str, Any], *, restore: bool = True,
        hear_after: int | None = None,
    ) -> Any:
        """Add an assistant; fires with its :class:`Assistant` once its state is saved.

        ``config`` is an :class:`AssistantConfig` or a mapping of its fields.
        With ``restore`` (the default) a state saved under the same name —
        history, pending events, mode, counters — is loaded (its tool calls cut
        off by a crash get an "interrupted" answer); the given configuration
        wins over the saved one.  ``hear_after``: see :meth:`hear`.  Fails with
        ConfigError for a bad config, a duplicate name or an unknown model, and
        with the store's error when its state cannot be saved (then it is not
        added: nothing of it stays in the service).
        """
        if not isinstance(config, AssistantConfig):
            config = AssistantConfig.from_mapping(config)
        name = config.name
        if name in self._assistants or name in self._adding:
            raise ConfigError(f"an assistant named {name!r} already exists")
        self.check_config(config)
        if len(self._assistants) + len(self._adding) >= self.max_assistants:
            raise ConfigError(f"assistant {name!r}: this service has its maximum of "
                              f"{self.max_assistants} assistants (max_assistants)")
        self._adding.add(name)
        try:
            yield self._open()
            state = (yield self.store.load_assistant(name)) if restore else None
            assistant = Assistant.from_state(state, config, host=self)
            self._assistants[name] = assistant
        finally:
            self._adding.discard(name)
        self.scheduler.add(name)
        if assistant.pending_events and (assistant.mode == AWAKE
                                         or assistant.has_addressed_event()):
            self.scheduler.notify(name)
        if config.hearing:
            self.hear(name, hear_after)
        try:
            yield self.save_state(name)
        except Exception:
            self._withdraw(assistant)  # not saved: as if never added
            raise
        self.publish(name, {"type": "added", "restored": state is not None})
        log.info("Assistant {assistant} added ({how})", assistant=name,
                 how="restored" if state is not None else "new")
        return assistant

    def _withdraw(self, assistant: Assistant) -> None:
        """Undo an add whose first save failed: unscheduled, deaf, gone (nothing ran yet:
        the scheduler's first tick comes on a later turn)."""
        name = assistant.name
        self.scheduler.remove(name)
        self._unhear(name)
        if self._assistants.get(name) is assistant:
            del self._assistants[name]
        self.cache.forget(name)
        assistant.host = None
        log.warn("Assistant {assistant} was not added: its state could not be saved",
                 assistant=name)

    @defer.inlineCallbacks
    def restore_saved_assistants(self) -> Any:
        """Add every assistant the store has saved and that is not here yet.

        Each comes back with its saved configuration; one that cannot be
        restored (unknown model, bad config) is logged and skipped.  Fires
        with the names restored.
        """
        yield self._open()
        names = yield self.store.list_assistants()
        restored = []
        for name in names:
            if name in self._assistants or name in self._adding:
                continue
            if (yield self.restore_assistant(name)):
                restored.append(name)
        return restored

    @defer.inlineCallbacks
    def restore_assistant(self, name: str) -> Any:
        """Bring back one saved assistant with its saved configuration; fires True, or
        False after logging why it could not (unknown model, bad config)."""
        state = yield self.store.load_assistant(name)
        try:
            config = AssistantConfig.from_mapping((state or {}).get("config") or {},
                                                  f"saved assistant {name!r}")
            yield self.add_assistant(config)
        except Exception as exc:
            log.error("Saved assistant {assistant} not restored: {error}",
                      assistant=name, error=str(exc))
            return False
        return True

    def remove_assistant(
        self, name: str, *, forget: bool = False, save: bool = True
    ) -> defer.Deferred[None]:
        """Remove an assistant: stop it, save it (or, with ``forget``, delete its state).

        A tick in flight is killed and waited for (at most ``stop_grace`` s).
        Without ``save`` (another worker owns it now) the tick is cancelled at
        once and nothing is written.  Raises NotFound for an unknown name.
        """
        return self._remove(self.get(name), forget, save)

    @defer.inlineCallbacks
    def _remove(self, assistant: Assistant, forget: bool, save: bool = True) -> Any:
        name = assistant.name
        self.scheduler.remove(name)
        self._unhear(name)
        self.stop_assistant(name, "assistant removed")
        for key in [k for k in self._subagents if k[0] == name]:
            _, control = self._subagents[key]
            control.stop("assistant removed")
        running = self.scheduler.running().get(name)
        if running is not None:
            done = (yield _within(_observe(running), self.stop_grace, self.clock)) if save \
                else False
            if not done:
                running.cancel()
        if save:
            yield self.save_state(name)
        del self._assistants[name]
        self.cache.forget(name)
        if forget:
            yield self.writer.flush()
            yield self.store.delete_assistant(name)
            yield self.cache.clear_persistent(name)
        assistant.host = None
        self.publish(name, {"type": "removed", "forgotten": forget})
        log.info("Assistant {assistant} removed", assistant=name)
        return None

    @defer.inlineCallbacks
    def reconfigure(self, name: str, config: AssistantConfig | Mapping[str, Any]) -> Any:
        """Give assistant ``name`` a new configuration in place; fires with the changed keys.

        Its history, memories, pending events, counters and mode stay; nothing it
        hears is missed (its hearing is moved, not stopped, when the character
        changes).  A tick in flight is stopped and waited for first (at most
        ``stop_grace`` s); a new ``persona`` replaces one a tool had set.  Fires
        once saved.  ConfigError for a bad config, another name or an unknown model.
        """
        assistant = self.get(name)
        if not isinstance(config, AssistantConfig):
            config = AssistantConfig.from_mapping(config)
        if config.name != name:
            raise ConfigError(f"assistant {name!r} cannot be renamed to {config.name!r}")
        self.check_config(config)
        old = assistant.config
        before = old.to_dict()
        changed = [k for k, v in config.to_dict().items() if before.get(k) != v]
        if not changed:
            return changed
        running = self.scheduler.running().get(name)
        if running is not None:
            self.stop_assistant(name, "reconfigured")
            done = yield _within(_observe(running), self.stop_grace, self.clock)
            if not done:
                running.cancel()
        assistant.config = config
        if "persona" in changed:
            assistant.persona_override = None
        if old.character_id != config.character_id or old.hearing != config.hearing:
            self._unhear(name)
            if config.hearing:
                self.hear(name)
        self.scheduler.reschedule(name)  # at the new tick rate
        yield self.save_state(name)
        self.publish(name, {"type": "reconfigured", "changed": changed})
        log.info("Assistant {assistant} reconfigured: {changed}", assistant=name,
                 changed=", ".join(changed))
        return changed

    def check_config(self, config: AssistantConfig) -> None:
        """ConfigError unless this service can run ``config``: a model it has, tick rates
        no faster than its ``min_tick_rate``."""
        self._check_model(config)
        for key in ("tick_rate", "sleep_tick_rate"):
            rate = getattr(config, key)
            if rate < self.min_tick_rate:
                raise ConfigError(f"assistant.{key} must be at least {self.min_tick_rate:g} "
                                  f"seconds (the service's min_tick_rate), not {rate!r}")

    def _check_model(self, config: AssistantConfig) -> None:
        """The model profile and the MCP servers an assistant names exist."""
        if config.model not in self._llms:
            known = ", ".join(sorted(self._llms)) or "none configured"
            raise ConfigError(f"assistant {config.name!r}: unknown model {config.model!r} "
                              f"(known: {known})")
        declared: frozenset[str] = getattr(self.tool_sources, "declared", frozenset())
        unknown = [n for n in config.mcp_servers if n not in declared]
        if unknown:
            known = ", ".join(sorted(declared)) or "none configured"
            raise ConfigError(f"assistant {config.name!r}: unknown MCP server(s) "
                              f"{', '.join(map(repr, unknown))} (known: {known})")

    # -- control ---------------------------------------------------------------------

    def enable(self, name: str) -> defer.Deferred[None]:
        """Let the assistant tick again; fires once saved."""
        assistant = self.get(name)
        assistant.enabled = True
        self.scheduler.reschedule(name, due=self.clock.seconds())
        if assistant.pending_events:
            self.scheduler.notify(name)
        self.publish(name, {"type": "enabled"})
        return self.save_state(name)

    def disable(self, name: str) -> defer.Deferred[None]:
        """Make the assistant's ticks exit early (a tick in flight finishes); fires once saved."""
        assistant = self.get(name)
        assistant.enabled = False
        self.publish(name, {"type": "disabled"})
        return self.save_state(name)

    def send(self, name: str, event: Any) -> defer.Deferred[None]:
        """Queue a pending event (a player speaking to it); fires once it is durable.

        ``event`` is a dict (``{"type": "say", "from": "bob", "text": "hi"}``)
        or a plain string.  Events sent here count as addressed to the
        assistant (they wake it) unless they say ``"addressed": false``.
        Raises ServiceNotRunning before ``startService()``.
        """
        self._check_running("send")
        assistant = self.get(name)
        if isinstance(event, Mapping) and "addressed" not in event:
            event = {**event, "addressed": True}
        elif isinstance(event, str):
            event = {"type": "message", "text": event, "addressed": True}
        return assistant.queue_event(event)

    def run_tick(self, name: str) -> defer.Deferred[TickResult]:
        """Run one tick of ``name`` now; fires with its :class:`~ai_tools.service.tick.TickResult`.

        Never overlaps a tick in flight: it fires with that tick's result
        instead, so ``send()`` then ``run_tick()`` gives the tick that took the
        event, whether or not the timer got there first.  Raises NotFound for
        an unknown name, ServiceNotRunning before ``startService()``.
        """
        self._check_running("run_tick")
        self.get(name)
        return self.scheduler.run_now(name)

    def _check_running(self, what: str) -> None:
        if not self.running:
            raise ServiceNotRunning(
                f"AssistantService.{what}(): the service is not running; call startService() "
                f"first (or add it to a running application)")

    def _scheduled_tick(self, name: str) -> defer.Deferred[Any]:
        assistant = self._assistants.get(name)
        if assistant is None:
            return defer.fail(NotFound(f"no assistant named {name!r}"))
        return at_tick(assistant, self)

    def stop_assistant(self, name: str, reason: str = "stopped by user") -> bool:
        """Kill what the assistant is doing: cancel its model call or tool in flight.

        The loop ends with ``stopped_by_user`` and the killed call leaves no
        history entry.  Returns whether something was running.
        """
        assistant = self.get(name)
        if assistant.control is not None:
            assistant.control.stop(reason)
            self.publish(name, {"type": "stopped", "reason": reason})
            return True
        if assistant.current_tick is not None:
            # Outside a loop (compaction, assessment): cancel the step in flight.
            assistant.current_tick.cancel()
            self.publish(name, {"type": "stopped", "reason": reason})
            return True
        return False

    def emergency_stop(self, name: str | None = None, reason: str = "") -> list[str]:
        """Stop one assistant (or all): kill what runs, and every tick exits early until cleared.

        Returns the names stopped.  Persisted, so it survives a restart.
        """
        names = [name] if name is not None else list(self._assistants)
        if name is None:
            self.everything_stopped = True
        for n in names:
            assistant = self.get(n)
            assistant.emergency_stopped = True
            self.stop_assistant(n, reason or "emergency stop")
            self.publish(n, {"type": "emergency_stop", "reason": reason})
            self.save_state(n).addErrback(lambda f: None)
        log.warn("Emergency stop of {names}: {reason}", names=", ".join(names), reason=reason)
        return names

    def clear_emergency_stop(self, name: str | None = None) -> list[str]:
        """Let emergency-stopped assistants tick again; returns the names cleared."""
        names = [name] if name is not None else [
            n for n, a in self._assistants.items() if a.emergency_stopped]
        if name is None:
            self.everything_stopped = False
        for n in names:
            assistant = self.get(n)
            assistant.emergency_stopped = False
            self.publish(n, {"type": "emergency_stop_cleared"})
            self.save_state(n).addErrback(lambda f: None)
        return names

    # -- looking -----------------------------------------------------------------------

    def status(self, name: str | None = None) -> dict[str, Any]:
        """One assistant's status dict, or ``{"service": ..., "assistants": {...}}``."""
        if name is not None:
            assistant = self.get(name)
            status = assistant.status()
            status["next_tick_at"] = self.scheduler.due_at(name)
            status["cache"] = attrs.asdict(self.cache.stats(name))
            return status
        return {
            "service": self.stats(),
            "assistants": {n: self.status(n) for n in sorted(self._assistants)},
        }

    def stats(self) -> dict[str, Any]:
        """Service-level figures: assistants, ticks running, timer wake-ups, writes."""
        writer = self._writer
        return {
            "assistants": len(self._assistants),
            "running": self.running,
            "ticks_in_flight": len(self.scheduler.running()),
            "subagents_in_flight": len(self._subagents),
            "scheduler_wakeups": self.scheduler.wakeups,
            "state_transactions": writer.transactions if writer else 0,
            "states_written": writer.states_written if writer else 0,
            "state_write_failures": writer.failures if writer else 0,
            "models": sorted(self._llms),
            "model_servers": {name: client.status() for name, client in sorted(
                self._llms.items()) if callable(getattr(client, "status", None))},
            "store": _store_health(self.store),
        }

    def counters(self, name: str) -> dict[str, int]:
        """The assistant's counters (ticks, loops, tool calls, cache hits, errors...)."""
        counters: dict[str, int] = self.get(name).status()["counters"]
        return counters

    def history(self, name: str) -> list[dict[str, Any]]:
        """A copy of the assistant's conversation history."""
        return self.get(name).history.to_list()

    def add_observer(self, observer: Observer, assistant: str | None = None) -> Callable[[], None]:
        """Call ``observer(event)`` for loop and tick events (of one assistant, or all).

        Events are dicts with ``type`` — ``iteration``, ``tool_call``,
        ``tool_result`` (with ``duration_ms`` and ``from_cache``), ``signal``,
        ``termination``, ``text_delta``, ``tick``, ``mode``, ``added``,
        ``removed``, ``stopped``... — plus ``assistant`` and ``time``.
        Returns a callable that removes the observer.
        """
        entry = (observer, assistant)
        self._observers = (*self._observers, entry)

        def remove() -> None:
            if entry in self._observers:
                observers = list(self._observers)
                observers.remove(entry)
                self._observers = tuple(observers)

        return remove

    # -- hearing --------------------------------------------------------------------------

    def hear(self, name: str, after: int | None = None) -> bool:
        """Subscribe the assistant's character in the world: what it hears becomes events.

        Its own messages are ignored.  With ``after`` (a message ``seq``), what
        the character heard after it (as far as the world's log of what it
        heard goes) is heard again first, in the same turn: a worker taking
        over an assistant hears what came after its saved state.  Returns False
        when there is no world, no character, or it is already subscribed.
        """
        assistant = self.get(name)
        char_id = assistant.config.character_id
        if self.world is None or not char_id or name in self._hearing:
            return False
        if after is not None:
            for message in self.world.heard(char_id, after=after):
                self._heard(name, char_id, message)

        def listener(message: Any) -> None:
            self._heard(name, char_id, message)

        try:
            unsubscribe = self.world.subscribe(char_id, listener)
        except Exception:
            log.failure("Could not subscribe {assistant} ({char}) to the world",
                        assistant=name, char=char_id)
            return False
        self._hearing[name] = unsubscribe if callable(unsubscribe) else (lambda: None)
        return True

    def _heard(self, name: str, char_id: str, message: Any) -> None:
        """What ``name``'s character heard becomes a pending event (its own words do not)."""
        try:
            event = world_message_to_event(message)
            if _sender_of(event) == char_id:
                return
            live = self._assistants.get(name)
            if live is not None:
                # A failed write is logged and counted by the assistant; whoever
                # acknowledges the message learns it through when_heard_saved().
                live.queue_event(event).addErrback(lambda _: None)
        except Exception:
            log.failure("Hearing of {assistant} failed on {message!r}",
                        assistant=name, message=message)

    def when_heard_saved(self, character_ids: Iterable[str]) -> defer.Deferred[None]:
        """Fires once what the assistants of ``character_ids`` have heard so far is durable.

        The acknowledgement of a message spoken in the world (``POST /messages``
        answers only after it): the world calls the hearing listeners while it
        delivers, so once the delivery returned, the next state write of each
        hearing assistant whose character is among ``character_ids`` holds
        what it heard.  Those writes join the ones the hearing already asked
        for (no extra transaction).  Fails with the store's error when a write
        fails (a full disk, a missing file): the message may then be lost.
        """
        wanted = set(character_ids)
        saves = [self.save_state(name) for name, assistant in self._assistants.items()
                 if name in self._hearing and assistant.config.character_id in wanted]
        if not saves:
            return defer.succeed(None)
        saved: defer.Deferred[Any] = defer.gatherResults(saves, consumeErrors=True)
        saved.addCallbacks(lambda _: None, _first_failure)
        return saved

    def _unhear(self, name: str) -> None:
        unsubscribe = self._hearing.pop(name, None)
        if unsubscribe is not None:
            try:
                unsubscribe()
            except Exception:
                log.failure("Unsubscribing {assistant} from the world failed", assistant=name)

    # -- sub-agents -----------------------------------------------------------------------

    def start_subagent(
        self, assistant: Assistant, task: str, tool_names: Sequence[str], budget: int
    ) -> str:
        """Run a budgeted helper loop in the background; its report becomes an event.

        The helper gets a fresh history, only ``tool_names`` (never delegation,
        persona or sleep tools) and at most ``budget`` tool calls.
        """
        from ai_tools.tools.delegation import NOT_DELEGABLE

        if not isinstance(task, str) or not task.strip():
            raise ValueError("a sub-agent needs a task")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"a sub-agent budget must be a positive integer, not {budget!r}")
        assistant.count("subagents")
        task_id = f"sub-{assistant.counters['subagents']}"
        allowed = frozenset(n for n in tool_names if n not in NOT_DELEGABLE)
        record: dict[str, Any] = {
            "id": task_id, "task": task, "tools": sorted(allowed), "budget": budget,
            "status": "running", "started_at": self.clock.seconds(),
        }
        assistant.record_subagent(task_id, record)
        control = LoopControl()
        ctx = self._subagent_context(assistant, task_id, task, allowed, control)
        config = LoopConfig(max_iterations=10, tool_budget=budget,
                            native_tools=assistant.config.native_tools,
                            stream=assistant.config.stream)
        tracer = trace_loop(ctx, self.telemetry, task_id=task_id, parent=(
            assistant.tracer.tool_context() if assistant.tracer is not None else None))
        d = defer.maybeDeferred(self.run_loop, ctx, config)
        if tracer is not None:
            d.addBoth(_abandon_trace, tracer)
        self._subagents[(assistant.name, task_id)] = (d, control)
        d.addBoth(self._subagent_finished, assistant, record)
        self.publish(assistant.name, {"type": "subagent_started", "task_id": task_id})
        return task_id

    def _subagent_context(self, assistant: Assistant, task_id: str, task: str,
                          allowed: frozenset[str], control: LoopControl) -> LoopContext:
        """A helper loop's context: a fresh history, the task as its event, few tools."""
        name = assistant.name
        return LoopContext(
            assistant_name=f"{name}/{task_id}",
            actor=Actor(assistant.config.character_id, world=self.world, store=self.store,
                        assistant=assistant),
            registry=self.registry,
            llm=assistant_model(self, assistant.name, assistant.config.model),
            history=ConversationHistory(),
            clock=self.clock,
            cache=self.cache,
            cache_namespace=name,
            gate=GatePolicy(allowed_names=allowed),
            system_prompt=_SUBAGENT_PERSONA.format(name=name),
            pending_events=[{"type": "task", "from": name, "text": task}],
            on_event=lambda e: self.publish(name, {**e, "subagent": task_id}),
            observed=functools.partial(self.observed, name),
            stop_check=lambda: assistant.emergency_stopped,
            control=control,
            execution_options={"approval": self.approvals.hook(assistant)},
        )

    def _subagent_finished(self, result: Any, assistant: Assistant,
                           record: dict[str, Any]) -> None:
        """Record how a helper loop ended; its report becomes an event of its assistant."""
        task_id = record["id"]
        self._subagents.pop((assistant.name, task_id), None)
        if isinstance(result, Failure):
            status, text, reason = "failed", "", result.getErrorMessage()
            used = None
        else:
            reason = result.termination_reason
            status = ("stopped" if reason.stopped
                      else "failed" if result.failed else "done")
            text = result.text[-_SUBAGENT_RESULT_CHARS:]
            remaining = result.tool_budget_remaining
            used = record["budget"] - remaining if remaining is not None else None
        record.update({"status": status, "result": text, "termination_reason": reason,
                       "tool_calls": used, "finished_at": self.clock.seconds()})
        if self._assistants.get(assistant.name) is assistant:
            assistant.record_subagent(task_id, record)
            assistant.queue_event({
                "type": "subagent_result", "task_id": task_id, "status": status,
                "text": text or f"(no report; ended with {reason})", "addressed": True,
            }).addErrback(lambda f: None)

    # -- convenience ----------------------------------------------------------------------

    def add_assistants(
        self, configs: Iterable[AssistantConfig | Mapping[str, Any]]
    ) -> defer.Deferred[list[Assistant]]:
        """Add several assistants; fires with them (fails on the first bad one)."""
        return defer.gatherResults([self.add_assistant(c) for c in configs],
                                   consumeErrors=True)

    def __repr__(self) -> str:
        return f"<AssistantService {len(self._assistants)} assistant(s)>"
