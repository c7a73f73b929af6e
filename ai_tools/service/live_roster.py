"""The assistants a running service hosts: adding, restoring, removing, reconfiguring.

:class:`LiveRoster` keeps one :class:`~ai_tools.service.assistant.Assistant` per
name for an :class:`~ai_tools.service.service.AssistantService` (its
``service.roster``).  Adding one restores its saved state, schedules it, subscribes
its character when it hears, and fires once its state is saved; one whose first save
fails is withdrawn as if never added.  Removing or reconfiguring waits for its tick in
flight (at most the service's ``stop_grace``).  Which assistants come back after a
restart is :mod:`ai_tools.service.roster`'s rule.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.errors import ConfigError, NotFound
from ai_tools.interfaces import IStore
from ai_tools.json_types import JSONMapping
from ai_tools.service.assistant import AWAKE, Assistant, AssistantConfig
from ai_tools.service.tick import TickResult, at_tick
from ai_tools.service.waiting import observe, within

if TYPE_CHECKING:
    from ai_tools.service.service import AssistantService
    from ai_tools.store.state_json import EncodedState

__all__ = ["LiveRoster"]

log = Logger()


def _as_config(config: AssistantConfig | JSONMapping) -> AssistantConfig:
    return config if isinstance(config, AssistantConfig) else AssistantConfig.from_mapping(
        config)


class LiveRoster:
    """The assistants of one service by name (see the module).

    Iterating gives the names in the order they were added.
    """

    def __init__(self, service: AssistantService) -> None:
        self._service = service
        self._assistants: dict[str, Assistant] = {}
        self._adding: set[str] = set()

    # -- looking ---------------------------------------------------------------

    def get(self, name: str) -> Assistant:
        """The assistant called ``name``; :class:`~ai_tools.errors.NotFound` if none."""
        try:
            return self._assistants[name]
        except KeyError:
            raise NotFound(f"no assistant named {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._assistants

    def __iter__(self) -> Iterator[str]:
        return iter(self._assistants)

    def __len__(self) -> int:
        return len(self._assistants)

    def names(self) -> list[str]:
        """Names of the assistants, sorted."""
        return sorted(self._assistants)

    def copy(self) -> dict[str, Assistant]:
        """The assistants by name (a copy)."""
        return dict(self._assistants)

    def hosts(self, assistant: Assistant) -> bool:
        """Whether ``assistant`` is the one hosted under its name (not removed, not replaced)."""
        return self._assistants.get(assistant.name) is assistant

    # -- what the scheduler and the writer ask ------------------------------------

    def tick(self, name: str) -> defer.Deferred[TickResult]:
        """One tick of assistant ``name`` (the scheduler's tick function)."""
        assistant = self._assistants.get(name)
        if assistant is None:
            return defer.fail(NotFound(f"no assistant named {name!r}"))
        return at_tick(assistant, self._service)

    def rate_of(self, name: str) -> float:
        """Seconds between ticks of assistant ``name`` in its mode (60 once it is gone)."""
        assistant = self._assistants.get(name)
        return assistant.tick_rate if assistant is not None else 60.0

    def state_of(self, name: str) -> EncodedState | None:
        """What the writer saves of assistant ``name`` (None once it is gone)."""
        assistant = self._assistants.get(name)
        return None if assistant is None else assistant.encoded_state()

    # -- adding ----------------------------------------------------------------

    @defer.inlineCallbacks
    def add(self, config: AssistantConfig | JSONMapping, *, restore: bool = True,
            hear_after: int | None = None) -> Generator[defer.Deferred[Any], object, Assistant]:
        """Add an assistant; fires with it once its state is saved (see
        :meth:`~ai_tools.service.service.AssistantService.add_assistant`)."""
        config = _as_config(config)
        name, service = config.name, self._service
        if name in self._assistants or name in self._adding:
            raise ConfigError(f"an assistant named {name!r} already exists")
        self.check_config(config)
        if len(self._assistants) + len(self._adding) >= service.max_assistants:
            raise ConfigError(f"assistant {name!r}: this service has its maximum of "
                              f"{service.max_assistants} assistants (max_assistants)")
        self._adding.add(name)
        try:
            yield service.resources.open()
            store: IStore = service.store
            state = (yield store.load_assistant(name)) if restore else None
            assistant = Assistant.from_state(
                state if isinstance(state, Mapping) else None, config, host=service)
            self._assistants[name] = assistant
        finally:
            self._adding.discard(name)
        scheduler = service.scheduler
        scheduler.add(name)
        if assistant.pending_events and (assistant.mode == AWAKE
                                         or assistant.has_addressed_event()):
            scheduler.notify(name)
        if config.hearing:
            service.hearing.hear(assistant, hear_after)
        try:
            yield service.save_state(name)
        except Exception:
            self._withdraw(assistant)  # not saved: as if never added
            raise
        service.publish(name, {"type": "added", "restored": state is not None})
        log.info("Assistant {assistant} added ({how})", assistant=name,
                 how="restored" if state is not None else "new")
        return assistant

    def _withdraw(self, assistant: Assistant) -> None:
        """Undo an add whose first save failed: unscheduled, deaf, gone (nothing ran yet:
        the scheduler's first tick comes on a later turn)."""
        name, service = assistant.name, self._service
        service.scheduler.remove(name)
        service.hearing.unhear(name)
        if self._assistants.get(name) is assistant:
            del self._assistants[name]
        service.cache.forget(name)
        assistant.host = None
        log.warn("Assistant {assistant} was not added: its state could not be saved",
                 assistant=name)

    @defer.inlineCallbacks
    def restore_saved(self) -> Generator[defer.Deferred[Any], object, list[str]]:
        """Add every assistant the store has saved and that is not here yet; fires with
        the names restored (one that cannot be restored is logged and skipped)."""
        yield self._service.resources.open()
        store: IStore = self._service.store
        names = yield store.list_assistants()
        restored = []
        for name in cast("list[str]", names):
            if name in self._assistants or name in self._adding:
                continue
            if (yield self.restore(name)):
                restored.append(name)
        return restored

    @defer.inlineCallbacks
    def restore(self, name: str) -> Generator[defer.Deferred[Any], object, bool]:
        """Bring back one saved assistant with its saved configuration; fires True, or
        False after logging why it could not (unknown model, bad config)."""
        store: IStore = self._service.store
        state = yield store.load_assistant(name)
        saved = state.get("config") if isinstance(state, Mapping) else None
        try:
            config = AssistantConfig.from_mapping(saved or {}, f"saved assistant {name!r}")
            yield self.add(config)
        except Exception as exc:
            log.error("Saved assistant {assistant} not restored: {error}",
                      assistant=name, error=str(exc))
            return False
        return True

    # -- removing and changing ---------------------------------------------------

    def remove(self, name: str, *, forget: bool = False,
               save: bool = True) -> defer.Deferred[None]:
        """Remove an assistant: stop it, save it (or, with ``forget``, delete its state);
        see :meth:`~ai_tools.service.service.AssistantService.remove_assistant`."""
        return self._remove(self.get(name), forget, save)

    @defer.inlineCallbacks
    def _remove(self, assistant: Assistant, forget: bool,
                save: bool = True) -> Generator[defer.Deferred[Any], object, None]:
        name, service = assistant.name, self._service
        service.scheduler.remove(name)
        service.hearing.unhear(name)
        service.emergency.kill(name, "assistant removed")
        service.subagents.stop(name, "assistant removed")
        running = service.scheduler.running().get(name)
        if running is not None:
            done = (yield within(observe(running),
                                 service.stop_grace, service.clock)) \
                if save else False
            if not done:
                running.cancel()
        if save:
            yield service.save_state(name)
        del self._assistants[name]
        service.cache.forget(name)
        if forget:
            yield service.writer.flush()
            store: IStore = service.store
            yield store.delete_assistant(name)
            yield service.cache.clear_persistent(name)
        assistant.host = None
        service.publish(name, {"type": "removed", "forgotten": forget})
        log.info("Assistant {assistant} removed", assistant=name)

    @defer.inlineCallbacks
    def reconfigure(self, name: str, config: AssistantConfig | JSONMapping
                    ) -> Generator[defer.Deferred[Any], object, list[str]]:
        """Give assistant ``name`` a new configuration in place; fires with the changed
        keys (see :meth:`~ai_tools.service.service.AssistantService.reconfigure`)."""
        assistant, service = self.get(name), self._service
        config = _as_config(config)
        if config.name != name:
            raise ConfigError(f"assistant {name!r} cannot be renamed to {config.name!r}")
        self.check_config(config)
        old = assistant.config
        before = old.to_dict()
        changed = [k for k, v in config.to_dict().items() if before.get(k) != v]
        if not changed:
            return changed
        running = service.scheduler.running().get(name)
        if running is not None:
            service.emergency.kill(name, "reconfigured")
            done = yield within(observe(running),
                               service.stop_grace, service.clock)
            if not done:
                running.cancel()
        assistant.config = config
        if "persona" in changed:
            assistant.persona_override = None
        if old.character_id != config.character_id or old.hearing != config.hearing:
            service.hearing.unhear(name)
            if config.hearing:
                service.hearing.hear(assistant)
        service.scheduler.reschedule(name)  # at the new tick rate
        yield service.save_state(name)
        service.publish(name, {"type": "reconfigured", "changed": changed})
        log.info("Assistant {assistant} reconfigured: {changed}", assistant=name,
                 changed=", ".join(changed))
        return changed

    def check_config(self, config: AssistantConfig) -> None:
        """ConfigError unless this service can run ``config``: a model it has, MCP servers
        it knows, tick rates no faster than its ``min_tick_rate``."""
        service = self._service
        models = service.resources.models
        if config.model not in models:
            known = ", ".join(sorted(models)) or "none configured"
            raise ConfigError(f"assistant {config.name!r}: unknown model {config.model!r} "
                              f"(known: {known})")
        sources = service.tool_sources
        declared: frozenset[str] = sources.declared if sources is not None else frozenset()
        unknown = [n for n in config.mcp_servers if n not in declared]
        if unknown:
            known = ", ".join(sorted(declared)) or "none configured"
            raise ConfigError(f"assistant {config.name!r}: unknown MCP server(s) "
                              f"{', '.join(map(repr, unknown))} (known: {known})")
        for key in ("tick_rate", "sleep_tick_rate"):
            rate = getattr(config, key)
            if rate < service.min_tick_rate:
                raise ConfigError(f"assistant.{key} must be at least {service.min_tick_rate:g} "
                                  f"seconds (the service's min_tick_rate), not {rate!r}")
