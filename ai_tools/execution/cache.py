"""The tool-result cache: one object per service, one namespace per assistant.

A cacheable tool (``Tool.cacheable``) names a scope (``Tool.cache_scope``) and
optionally a time-to-live (``Tool.cache_ttl``, seconds on the injected clock):

``tick``
    cleared when the assistant's tick starts (:meth:`ToolCache.clear_tick`);
``session``
    cleared on a mode change or a restart (:meth:`ToolCache.clear_session`);
``persistent``
    kept in the store (``IStore.cache_get``/``cache_put``), so it survives
    restarts; without a store it behaves like ``session``.

The TTL applies in every scope.  The key is the tool name plus the canonical
JSON (sorted keys, compact) of the *validated* parameters (:func:`cache_key`),
so lists and nested objects work.  The execution engine never caches failures,
and a successful DANGEROUS call :meth:`invalidates <ToolCache.invalidate>` the
assistant's tick and session entries because the world changed.

Values are copied (one level) in and out, so a caller adding keys to a result
(the token advisory does) does not change what the cache holds.
"""

from __future__ import annotations

from typing import cast

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.interfaces import IStore
from ai_tools.json_encoding import canonical_json
from ai_tools.json_types import JSONMapping

__all__ = ["SCOPES", "CacheStats", "ToolCache", "cache_key", "canonical_json"]

log = Logger()

SCOPES = ("tick", "session", "persistent")
"""The cache scopes, shortest-lived first."""

_LOCAL_SCOPES = ("tick", "session")


def cache_key(tool_name: str, params: JSONMapping) -> str:
    """``name`` + canonical JSON of ``params``; TypeError/ValueError if not JSON."""
    return f"{tool_name}:{canonical_json(params)}"


@attrs.frozen
class CacheStats:
    """Counters for the console: lookups that hit or missed, entries held in memory."""

    hits: int = 0
    misses: int = 0
    size: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before any lookup)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


@attrs.define(eq=False)
class _Namespace:
    """One assistant's in-memory entries: ``{scope: {key: (value, expires_at)}}``."""

    entries: dict[str, dict[str, tuple[dict[str, object], float | None]]] = attrs.field(
        factory=lambda: {"tick": {}, "session": {}, "persistent": {}}
    )
    hits: int = 0
    misses: int = 0

    def size(self) -> int:
        return sum(len(scope) for scope in self.entries.values())


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise ValueError(f"unknown cache scope {scope!r}; expected one of {', '.join(SCOPES)}")


@attrs.define(eq=False)
class ToolCache:
    """Cached tool results per assistant namespace and scope.

    ``store`` (an :class:`~ai_tools.interfaces.IStore`) backs the persistent
    scope; ``max_entries`` bounds each in-memory scope of each namespace (the
    oldest entry goes first).
    """

    clock: IReactorTime
    """An ``IReactorTime`` (the reactor, or ``task.Clock`` in tests)."""
    store: IStore | None = None
    """An :class:`~ai_tools.interfaces.IStore`, or None (persistent scope kept in memory)."""
    max_entries: int = 1024
    _spaces: dict[str, _Namespace] = attrs.field(init=False, factory=dict)

    def _space(self, namespace: str) -> _Namespace:
        space = self._spaces.get(namespace)
        if space is None:
            space = self._spaces[namespace] = _Namespace()
        return space

    # -- lookups -----------------------------------------------------------------

    def is_local(self, scope: str) -> bool:
        """Whether ``scope`` lives in memory (answered by :meth:`get_now`), not in the store."""
        _check_scope(scope)
        return scope != "persistent" or self.store is None

    def get_now(self, namespace: str, scope: str, key: str) -> dict[str, object] | None:
        """The cached value (a copy) or None, for a memory scope (see :meth:`is_local`)."""
        if not self.is_local(scope):
            raise ValueError(f"the {scope} scope lives in the store: use get()")
        space = self._space(namespace)
        entries = space.entries[scope]
        found = entries.get(key)
        if found is not None:
            value, expires_at = found
            if expires_at is None or expires_at > self.clock.seconds():
                space.hits += 1
                return dict(value)
            del entries[key]
        space.misses += 1
        return None

    def get(self, namespace: str, scope: str, key: str) -> defer.Deferred[dict[str, object] | None]:
        """The cached value (a copy) or None, in any scope; fired at once for memory scopes."""
        if self.is_local(scope):
            return defer.succeed(self.get_now(namespace, scope, key))
        space = self._space(namespace)
        store = cast(IStore, self.store)  # (not local: the store is there)
        d = defer.maybeDeferred(store.cache_get, namespace, key, self.clock.seconds())
        d.addCallbacks(self._count_persistent, self._read_failed,
                       callbackArgs=(space,), errbackArgs=(space, namespace))
        return d

    @staticmethod
    def _count_persistent(value: object, space: _Namespace) -> dict[str, object] | None:
        if isinstance(value, dict):
            space.hits += 1
            return dict(value)
        space.misses += 1
        return None

    @staticmethod
    def _read_failed(failure: Failure, space: _Namespace, namespace: str) -> Failure | None:
        if failure.check(defer.CancelledError):
            return failure
        log.failure("Persistent cache read failed for {namespace}", failure, namespace=namespace)
        space.misses += 1
        return None

    def put_now(self, namespace: str, scope: str, key: str, value: JSONMapping,
                ttl: float | None = None) -> None:
        """Store ``value`` (a copy) in a memory scope for ``ttl`` seconds (None: until cleared).

        A ``ttl`` of zero or less stores nothing.
        """
        if not self.is_local(scope):
            raise ValueError(f"the {scope} scope lives in the store: use put()")
        if ttl is not None and ttl <= 0:
            return
        expires_at = None if ttl is None else self.clock.seconds() + ttl
        entries = self._space(namespace).entries[scope]
        entries.pop(key, None)
        entries[key] = (dict(value), expires_at)
        if len(entries) > self.max_entries:
            del entries[next(iter(entries))]

    def put(
        self,
        namespace: str,
        scope: str,
        key: str,
        value: JSONMapping,
        ttl: float | None = None,
    ) -> defer.Deferred[None]:
        """Store ``value`` in any scope; see :meth:`put_now`.

        Persistent writes that fail are logged, never raised: a cache is an
        optimisation.
        """
        if self.is_local(scope):
            self.put_now(namespace, scope, key, value, ttl)
            return defer.succeed(None)
        if ttl is not None and ttl <= 0:
            return defer.succeed(None)
        expires_at = None if ttl is None else self.clock.seconds() + ttl
        store = cast(IStore, self.store)  # (not local: the store is there)
        d = defer.maybeDeferred(store.cache_put, namespace, key, dict(value), expires_at)
        d.addCallbacks(lambda _: None, self._log_store_failure, errbackArgs=(namespace,))
        return d

    @staticmethod
    def _log_store_failure(failure: Failure, namespace: str) -> None:
        log.failure("Persistent cache write failed for {namespace}", failure,
                    namespace=namespace)

    # -- clearing ----------------------------------------------------------------

    def clear_tick(self, namespace: str) -> None:
        """Drop ``namespace``'s tick entries (a tick starts)."""
        space = self._spaces.get(namespace)
        if space is not None:
            space.entries["tick"].clear()

    def clear_session(self, namespace: str) -> None:
        """Drop ``namespace``'s session entries (mode change, restart)."""
        space = self._spaces.get(namespace)
        if space is not None:
            space.entries["session"].clear()

    def invalidate(self, namespace: str) -> None:
        """Drop ``namespace``'s tick and session entries (a DANGEROUS tool changed the world)."""
        self.clear_tick(namespace)
        self.clear_session(namespace)

    def clear_persistent(self, namespace: str) -> defer.Deferred[None]:
        """Drop ``namespace``'s persistent entries (in the store, or in memory without one)."""
        space = self._spaces.get(namespace)
        if space is not None:
            space.entries["persistent"].clear()
        if self.store is None:
            return defer.succeed(None)
        d = defer.maybeDeferred(self.store.cache_invalidate, namespace)
        d.addCallback(lambda _: None)
        return d

    def forget(self, namespace: str) -> None:
        """Drop everything held in memory for ``namespace`` (an assistant was removed)."""
        self._spaces.pop(namespace, None)

    # -- observing ---------------------------------------------------------------

    def stats(self, namespace: str | None = None) -> CacheStats:
        """Counters of one namespace, or totals over all of them.

        ``size`` counts entries held in memory (expired ones until they are
        looked up again); persistent entries in a store are not counted.
        """
        spaces = [self._spaces[namespace]] if namespace in self._spaces else []
        if namespace is None:
            spaces = list(self._spaces.values())
        return CacheStats(
            hits=sum(s.hits for s in spaces),
            misses=sum(s.misses for s in spaces),
            size=sum(s.size() for s in spaces),
        )

    def namespaces(self) -> list[str]:
        """Namespaces with in-memory state, sorted."""
        return sorted(self._spaces)
