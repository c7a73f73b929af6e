"""What every assistant of one service shares: model clients, store, registry, world, cache, clock.

:class:`SharedResources` holds them for an
:class:`~ai_tools.service.service.AssistantService`: it opens the store once (every
caller waits for the same opening), closes the model clients and the store when the
service stops, and reports on them (the ``models``, ``model_servers`` and ``store``
figures of ``stats()``).  The clock and the tool cache are made when first needed:
the global reactor is looked up only then (see :mod:`ai_tools.default_reactor`).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, cast

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.default_reactor import global_reactor
from ai_tools.interfaces import IModelServerClient, IStore
from ai_tools.json_types import JSONObject, JSONValue
from ai_tools.service.collaborators import Closable
from ai_tools.service.waiting import pass_on
from ai_tools.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from ai_tools.execution.cache import ToolCache
    from ai_tools.interfaces import ILLMClient, IStore, IWorld

__all__ = ["SharedResources"]

log = Logger()


def _memory_store(clock: IReactorTime | None) -> IStore:
    """The store of a service given none: memory only (imported on use: a layer below)."""
    from ai_tools.store.memory import MemoryStore

    return cast("IStore", MemoryStore(clock=clock))


def _default_registry() -> ToolRegistry:
    """The registry of a service given none: the default tools."""
    from ai_tools.tools import register_default_tools

    return register_default_tools()


def _status_of(client: object) -> JSONValue | None:
    """A model client's report on its server (``ModelServer.status``), if it keeps one."""
    return cast(JSONValue, client.status()) if IModelServerClient.providedBy(client) else None


class SharedResources:
    """The model clients, store, registry, world, tool cache and clock of one service.

    ``llms`` maps profile names to clients (``llm`` is the one called
    ``"default"``); ``store`` defaults to a ``MemoryStore``, ``registry`` to the
    default tools, ``clock`` to the global reactor (looked up when first needed) and
    ``cache`` to a ``ToolCache`` over the store.
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
    ) -> None:
        self.models: dict[str, ILLMClient] = dict(llms or {})
        """The model clients by profile name (the live mapping)."""
        if llm is not None:
            self.models["default"] = llm
        self.store: IStore = store if store is not None else _memory_store(clock)
        self.registry = registry if registry is not None else _default_registry()
        self.world = world
        self._clock = clock
        self._cache = cache
        self._opened: defer.Deferred[object] | None = None
        self._closed = False

    @property
    def clock(self) -> IReactorTime:
        """The reactor (or the clock given to the constructor)."""
        if self._clock is None:
            self._clock = cast(IReactorTime, global_reactor())
        return self._clock

    @property
    def cache(self) -> ToolCache:
        """The shared ``ToolCache`` (created on first use)."""
        if self._cache is None:
            from ai_tools.execution.cache import ToolCache

            self._cache = ToolCache(clock=self.clock, store=self.store)
        return self._cache

    def llm_for(self, model: str) -> ILLMClient:
        """The model client called ``model`` (KeyError if unknown)."""
        return self.models[model]

    def open(self) -> defer.Deferred[None]:
        """Open the store once; every caller gets a Deferred of that (a failed opening is
        logged, and a later call tries again)."""
        if self._opened is None:
            store: IStore = self.store
            opened: defer.Deferred[object] = defer.maybeDeferred(store.open)
            self._opened = opened
            opened.addErrback(self._open_failed)
        result: defer.Deferred[None] = defer.Deferred()
        self._opened.addBoth(pass_on, result)
        return result

    def _open_failed(self, failure: Failure) -> Failure:
        log.failure("The assistant store could not be opened", failure)
        self._opened = None  # let a later call try again
        return failure

    @defer.inlineCallbacks
    def close(self) -> Generator[defer.Deferred[Any], object, None]:
        """Close every model client once (a failure is logged), then the store if it was
        opened."""
        for name, client in self._closable_models():
            try:
                yield defer.maybeDeferred(client.close)
            except Exception:
                log.failure("Closing model client {name} failed", name=name)
        if self._opened is not None and not self._closed:
            self._closed = True
            self._opened = None
            store: Closable = self.store
            try:
                yield defer.maybeDeferred(store.close)
            except Exception:
                log.failure("Closing the assistant store failed")

    def reopen(self) -> None:
        """The service starts (again): a store closed by a stop may be opened again."""
        self._closed = False

    def _closable_models(self) -> list[tuple[str, Closable]]:
        """Each model client once (one client may serve several profiles)."""
        seen: set[int] = set()
        unique: list[tuple[str, Closable]] = []
        for name, client in self.models.items():
            if id(client) not in seen and hasattr(client, "close"):
                seen.add(id(client))
                unique.append((name, client))
        return unique

    def figures(self) -> JSONObject:
        """``models``, ``model_servers`` (their reports) and ``store`` (its report on
        itself when it keeps one, as the SQLite store does on its file)."""
        servers: JSONObject = {}
        for name, client in sorted(self.models.items()):
            status = _status_of(client)
            if status is not None:
                servers[name] = status
        health = getattr(self.store, "health", None)
        return {
            "models": list(sorted(self.models)),
            "model_servers": servers,
            "store": cast(JSONValue, health()) if callable(health) else None,
        }
