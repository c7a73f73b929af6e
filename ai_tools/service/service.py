"""AssistantService: many assistants on one reactor, as a Twisted service.

The service composes the parts its assistants share, each a class of its own:

- :class:`~ai_tools.service.resources.SharedResources` (``service.resources``) — the
  model clients, the store, the tool registry, the world, the tool cache and the clock;
- :class:`~ai_tools.service.live_roster.LiveRoster` (``service.roster``) — one
  :class:`~ai_tools.service.assistant.Assistant` per name: adding, restoring, removing,
  reconfiguring;
- :class:`~ai_tools.service.hearing.Hearing` (``service.hearing``) — what characters
  hear in the world becomes their assistants' events;
- :class:`~ai_tools.service.subagents.Subagents` (``service.subagents``),
  :class:`~ai_tools.service.approvals.ApprovalBoard` (``service.approvals``),
  :class:`~ai_tools.service.emergency.EmergencyStop` (``service.emergency``: the kill
  and the emergency stop), :class:`~ai_tools.service.observers.Observers`
  (``service.observers``), :class:`~ai_tools.service.tracing.Tracing`
  (``service.tracing``) and :class:`~ai_tools.service.stopping.Stopping` (the steps of
  ``stopService``);
- one ``LoopingCall`` (the :class:`~ai_tools.service.scheduling.TickScheduler`) that
  starts the assistants that are due, each tick running its steps in order
  (:mod:`ai_tools.service.tick`), and a group-committing
  :class:`~ai_tools.service.state_writer.StateWriter` that persists them.

The service is what an assistant and its ticks see of their host
(:class:`~ai_tools.service.assistant.AssistantHost`).

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

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

import attrs
from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ai_tools.errors import ServiceNotRunning
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.loop import LoopConfig, LoopContext, LoopResult, execute_react_loop
from ai_tools.service.approvals import ApprovalBoard
from ai_tools.service.assistant import Assistant, AssistantConfig
from ai_tools.service.emergency import EmergencyStop
from ai_tools.service.hearing import Hearing, world_message_to_event
from ai_tools.service.live_roster import LiveRoster
from ai_tools.service.observers import Observer, Observers
from ai_tools.service.resources import SharedResources
from ai_tools.service.scheduling import TickScheduler
from ai_tools.service.state_writer import StateWriter
from ai_tools.service.stopping import Stopping
from ai_tools.service.subagents import Subagents
from ai_tools.service.tick import TickResult
from ai_tools.service.tracing import Tracing
from ai_tools.service.waiting import pass_on
from ai_tools.telemetry.setup import Telemetry
from ai_tools.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from ai_tools.execution.cache import ToolCache
    from ai_tools.interfaces import ILLMClient, IStore, IWorld
    from ai_tools.mcp.servers import McpClientService
    from ai_tools.service.leases import LeaseManager

__all__ = ["AssistantService", "LoopRunner", "Observer", "world_message_to_event"]

log = Logger()

LoopRunner = Callable[[LoopContext, LoopConfig], "defer.Deferred[LoopResult]"]
"""Runs one loop; :func:`ai_tools.loop.run.execute_react_loop` unless replaced (tests)."""

MIN_TICK_RATE = 1.0
"""The default floor of an assistant's ``tick_rate`` and ``sleep_tick_rate`` (seconds):
each tick may ask the model, so a rate of ``1e-9`` would be a model request per turn."""

MAX_ASSISTANTS = 1000
"""The default bound on the assistants one service (with workers: all of them) has."""


def _require_running(service: AssistantService, what: str) -> None:
    if not service.running:
        raise ServiceNotRunning(
            f"AssistantService.{what}(): the service is not running; call startService() "
            f"first (or add it to a running application)")


def _start_ticking(_: object, service: AssistantService) -> None:
    if service.running:
        service.scheduler.start()
        log.info("AssistantService ticking {count} assistant(s) every {interval}s",
                 count=len(service.roster), interval=service.scheduler.interval)


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
        llm: ILLMClient | None = None,
        llms: Mapping[str, ILLMClient] | None = None,
        store: IStore | None = None,
        registry: ToolRegistry | None = None,
        world: IWorld | None = None,
        clock: IReactorTime | None = None,
        cache: ToolCache | None = None,
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
        self.stop_grace = stop_grace
        self.restore_saved = restore_saved
        self.save_failures = RepeatedFailure("Could not save the state of assistants", log)
        """Failed saves of the assistants, logged once per class until one works again."""
        self.resources = SharedResources(llm=llm, llms=llms, store=store, registry=registry,
                                         world=world, clock=clock, cache=cache)
        # The shared resources under the names users know (the same objects):
        self.store: IStore = self.resources.store
        self.registry: ToolRegistry = self.resources.registry
        self.world: IWorld | None = self.resources.world
        self._llms = self.resources.models
        self.llm_for = self.resources.llm_for
        """``llm_for(model)``: the model client of that profile name (KeyError if unknown)."""
        self.run_loop: LoopRunner = loop_runner or execute_react_loop
        """Runs one ReAct loop (``execute_react_loop`` unless replaced)."""
        self._tick_interval = tick_interval
        self._max_concurrent = max_concurrent
        self._compose(Tracing(telemetry, otlp_endpoint))
        self._scheduler: TickScheduler | None = None
        self._writer: StateWriter | None = None
        self._approvals: ApprovalBoard | None = None
        self._ready: defer.Deferred[None] | None = None
        self.ownership: LeaseManager | None = None
        """Who decides which assistants this process runs when several workers share
        them (:class:`~ai_tools.service.leases.LeaseManager`): told ``stopping()`` when
        ticking stops, ``stopped()`` (releasing its leases) once every state is saved."""
        self.tool_sources: McpClientService | None = None
        """Tools from elsewhere for each loop: an :class:`~ai_tools.mcp.servers.McpClientService`
        (or None), asked by :meth:`registry_for` for the servers an assistant may use."""

    def _compose(self, tracing: Tracing) -> None:
        """The parts, and the names users know for what a part does (the part's own
        methods, no call between)."""
        self.observers = Observers(lambda: self.resources.clock)
        """Who watches the loops and ticks (:class:`~ai_tools.service.observers.Observers`)."""
        self.publish = self.observers.publish
        """``publish(name, event)``: hand an event of an assistant to the observers."""
        self.observed = self.observers.observed
        """``observed(name)``: whether an event of that assistant would reach an observer."""
        self.add_observer = self.observers.add
        """``add_observer(observer, assistant=None)``: call ``observer(event)`` for loop and
        tick events (of one assistant, or all); returns a remover
        (:meth:`~ai_tools.service.observers.Observers.add`)."""
        self.roster = LiveRoster(self)
        """The assistants by name (:class:`~ai_tools.service.live_roster.LiveRoster`)."""
        self.get = self.roster.get
        """``get(name)``: the :class:`Assistant` called ``name`` (NotFound if none)."""
        self.names = self.roster.names
        """``names()``: the assistants' names, sorted."""
        self.restore_assistant = self.roster.restore
        """``restore_assistant(name)``: bring back one saved assistant with its saved
        configuration; fires True, or False after logging why it could not."""
        self.hearing = Hearing(self.world, self.save_state)
        """What characters hear becomes events (:class:`~ai_tools.service.hearing.Hearing`)."""
        self.subagents = Subagents(self)
        """The sub-agents in flight (:class:`~ai_tools.service.subagents.Subagents`)."""
        self.emergency = EmergencyStop(self)
        """The kill and the emergency stop (:class:`~ai_tools.service.emergency.EmergencyStop`)."""
        self.tracing = tracing
        """The tracing of the loops (:class:`~ai_tools.service.tracing.Tracing`)."""
        self._stopping = Stopping(self)

    # -- the parts made on first use (the clock may be looked up late) -------------

    @property
    def clock(self) -> IReactorTime:
        """The reactor (or the clock given to the constructor)."""
        return self.resources.clock

    @property
    def cache(self) -> ToolCache:
        """The shared ``ToolCache`` (created on first use)."""
        return self.resources.cache

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
                clock=self.clock, tick=self.roster.tick, rate_of=self.roster.rate_of,
                interval=self._tick_interval, max_concurrent=self._max_concurrent,
            )
        return self._scheduler

    @property
    def writer(self) -> StateWriter:
        """The group-committing state writer."""
        if self._writer is None:
            self._writer = StateWriter(store=self.store, state_of=self.roster.state_of,
                                       clock=self.clock)
        return self._writer

    @property
    def llms(self) -> dict[str, ILLMClient]:
        """The model clients by name (a copy)."""
        return dict(self._llms)

    @property
    def telemetry(self) -> Telemetry | None:
        """The OpenTelemetry tracer loops are traced with (None: tracing off; found when
        the service starts, see :func:`~ai_tools.telemetry.telemetry_for`)."""
        return self.tracing.telemetry

    @property
    def everything_stopped(self) -> bool:
        """An emergency stop of every assistant holds (until cleared for all): callers
        from outside the loops (MCP sessions) run no tool either."""
        return self.emergency.everything_stopped

    @property
    def _observers(self) -> tuple[tuple[Observer, str | None], ...]:
        """The observers subscribed now (``observers.entries``)."""
        return self.observers.entries

    def registry_for(self, assistant: Assistant) -> ToolRegistry:
        """The tools a loop of ``assistant`` starts with, and keeps to its end.

        The registry, plus the tools of the MCP servers its ``mcp_servers``
        names that are ready now (:attr:`tool_sources`).
        """
        sources, servers = self.tool_sources, assistant.config.mcp_servers
        if sources is None or not servers:
            return self.registry
        return sources.registry_for(self.registry, servers)

    def save_state(self, name: str) -> defer.Deferred[None]:
        """Persist assistant ``name`` (grouped with others); fires once durable."""
        return self.writer.save(name)

    # -- lifecycle -------------------------------------------------------------------

    def startService(self) -> None:
        """Open the store, optionally restore saved assistants, start the timer."""
        super().startService()
        self.resources.reopen()
        self.tracing.start()
        d = self.resources.open()
        if self.restore_saved:
            d.addCallback(lambda _: self.roster.restore_saved())
        d.addCallback(_start_ticking, self)
        d.addErrback(lambda f: log.failure("AssistantService did not start", f))
        self._ready = d

    def when_ready(self) -> defer.Deferred[None]:
        """Fires once the service has started (store open, timer running)."""
        if self._ready is None:
            return defer.succeed(None)
        result: defer.Deferred[None] = defer.Deferred()
        self._ready.addBoth(pass_on, result)
        return result

    def stopService(self) -> defer.Deferred[None]:
        """Stop ticking, wait for ticks in flight (at most ``stop_grace`` s), close all."""
        d = defer.maybeDeferred(super().stopService)
        d.addCallback(lambda _: self._stopping.run(self._scheduler, self._writer,
                                                   self._approvals))
        d.addCallback(lambda _: self.tracing.stop(self.clock))
        return d

    # -- adding and removing (the roster) ---------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self.roster

    @property
    def assistants(self) -> dict[str, Assistant]:
        """The assistants by name (a copy)."""
        return self.roster.copy()

    def add_assistant(
        self, config: AssistantConfig | JSONMapping, *, restore: bool = True,
        hear_after: int | None = None,
    ) -> defer.Deferred[Assistant]:
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
        return self.roster.add(config, restore=restore, hear_after=hear_after)

    def add_assistants(
        self, configs: Iterable[AssistantConfig | JSONMapping]
    ) -> defer.Deferred[list[Assistant]]:
        """Add several assistants; fires with them (fails on the first bad one)."""
        return defer.gatherResults([self.add_assistant(c) for c in configs],
                                   consumeErrors=True)

    def restore_saved_assistants(self) -> defer.Deferred[list[str]]:
        """Add every assistant the store has saved and that is not here yet.

        Each comes back with its saved configuration; one that cannot be
        restored (unknown model, bad config) is logged and skipped.  Fires
        with the names restored.
        """
        return self.roster.restore_saved()

    def remove_assistant(
        self, name: str, *, forget: bool = False, save: bool = True
    ) -> defer.Deferred[None]:
        """Remove an assistant: stop it, save it (or, with ``forget``, delete its state).

        A tick in flight is killed and waited for (at most ``stop_grace`` s).
        Without ``save`` (another worker owns it now) the tick is cancelled at
        once and nothing is written.  Raises NotFound for an unknown name.
        """
        return self.roster.remove(name, forget=forget, save=save)

    def reconfigure(self, name: str,
                    config: AssistantConfig | JSONMapping) -> defer.Deferred[list[str]]:
        """Give assistant ``name`` a new configuration in place; fires with the changed keys.

        Its history, memories, pending events, counters and mode stay; nothing it
        hears is missed (its hearing is moved, not stopped, when the character
        changes).  A tick in flight is stopped and waited for first (at most
        ``stop_grace`` s); a new ``persona`` replaces one a tool had set.  Fires
        once saved.  ConfigError for a bad config, another name or an unknown model.
        """
        return self.roster.reconfigure(name, config)

    def check_config(self, config: AssistantConfig) -> None:
        """ConfigError unless this service can run ``config``: a model it has, tick rates
        no faster than its ``min_tick_rate``."""
        self.roster.check_config(config)

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

    def send(self, name: str, event: JSONMapping | str) -> defer.Deferred[None]:
        """Queue a pending event (a player speaking to it); fires once it is durable.

        ``event`` is a dict (``{"type": "say", "from": "bob", "text": "hi"}``)
        or a plain string.  Events sent here count as addressed to the
        assistant (they wake it) unless they say ``"addressed": false``.
        Raises ServiceNotRunning before ``startService()``.
        """
        _require_running(self, "send")
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
        _require_running(self, "run_tick")
        self.get(name)
        # (the scheduler's tick function is the roster's: its outcomes are TickResults)
        return cast("defer.Deferred[TickResult]", self.scheduler.run_now(name))

    def stop_assistant(self, name: str, reason: str = "stopped by user") -> bool:
        """Kill what the assistant is doing: cancel its model call or tool in flight.

        The loop ends with ``stopped_by_user`` and the killed call leaves no
        history entry.  Returns whether something was running.
        """
        return self.emergency.kill(name, reason)

    def emergency_stop(self, name: str | None = None, reason: str = "") -> list[str]:
        """Stop one assistant (or all): kill what runs, and every tick exits early until cleared.

        Returns the names stopped.  Persisted, so it survives a restart.
        """
        return self.emergency.stop(name, reason)

    def clear_emergency_stop(self, name: str | None = None) -> list[str]:
        """Let emergency-stopped assistants tick again; returns the names cleared."""
        return self.emergency.clear(name)

    # -- hearing and sub-agents ---------------------------------------------------------

    def hear(self, name: str, after: int | None = None) -> bool:
        """Subscribe the assistant's character in the world: what it hears becomes events.

        Its own messages are ignored.  With ``after`` (a message ``seq``), what
        the character heard after it is heard again first (see
        :meth:`Hearing.hear <ai_tools.service.hearing.Hearing.hear>`).  Returns False
        when there is no world, no character, or it is already subscribed.
        """
        return self.hearing.hear(self.get(name), after)

    def when_heard_saved(self, character_ids: Iterable[str]) -> defer.Deferred[None]:
        """Fires once what the assistants of ``character_ids`` have heard so far is durable
        (the acknowledgement of a message spoken in the world; see
        :meth:`Hearing.when_saved <ai_tools.service.hearing.Hearing.when_saved>`)."""
        return self.hearing.when_saved(character_ids)

    def start_subagent(self, assistant: Assistant, task: str, tool_names: Sequence[str],
                       budget: int) -> str:
        """Run a budgeted helper loop for ``assistant`` in the background; its report
        becomes an event (see :meth:`~ai_tools.service.subagents.Subagents.start`)."""
        return self.subagents.start(assistant, task, tool_names, budget)

    # -- looking -----------------------------------------------------------------------

    def status(self, name: str | None = None) -> JSONObject:
        """One assistant's status dict, or ``{"service": ..., "assistants": {...}}``."""
        if name is not None:
            assistant = self.get(name)
            status = assistant.status()
            status["next_tick_at"] = self.scheduler.due_at(name)
            status["cache"] = attrs.asdict(self.cache.stats(name))
            return status
        return {
            "service": self.stats(),
            "assistants": {n: self.status(n) for n in self.roster.names()},
        }

    def stats(self) -> JSONObject:
        """Service-level figures: assistants, ticks running, timer wake-ups, writes."""
        writer = self._writer
        figures: JSONObject = {
            "assistants": len(self.roster),
            "running": self.running,
            "ticks_in_flight": len(self.scheduler.running()),
            "subagents_in_flight": len(self.subagents),
            "scheduler_wakeups": self.scheduler.wakeups,
            "state_transactions": writer.transactions if writer else 0,
            "states_written": writer.states_written if writer else 0,
            "state_write_failures": writer.failures if writer else 0,
        }
        figures.update(self.resources.figures())
        return figures

    def counters(self, name: str) -> dict[str, int]:
        """The assistant's counters (ticks, loops, tool calls, cache hits, errors...)."""
        counters: dict[str, int] = self.get(name).status()["counters"]
        return counters

    def history(self, name: str) -> list[dict[str, object]]:
        """A copy of the assistant's conversation history."""
        return self.get(name).history.to_list()

    def __repr__(self) -> str:
        return f"<AssistantService {len(self.roster)} assistant(s)>"
