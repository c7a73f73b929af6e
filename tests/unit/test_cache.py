"""ToolCache on its own: keys, scopes, TTL on the injected clock, bounds, store, stats."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer, task
from zope.interface.verify import verifyObject

from ai_tools.execution.cache import SCOPES, CacheStats, ToolCache, cache_key
from ai_tools.interfaces import IStore
from ai_tools.store.memory import MemoryStore
from tests.unit.execution_fakes import FakeCacheStore


def value_of(d: defer.Deferred[Any]) -> Any:
    results: list[Any] = []
    d.addBoth(results.append)
    assert len(results) == 1
    return results[0]


def test_cache_key_is_canonical() -> None:
    assert cache_key("t", {"b": 1, "a": [1, {"y": 2, "x": 1}]}) == 't:{"a":[1,{"x":1,"y":2}],"b":1}'
    assert cache_key("t", {"a": 1, "b": 2}) == cache_key("t", {"b": 2, "a": 1})
    assert cache_key("t", {"a": [1, 2]}) != cache_key("t", {"a": [2, 1]})
    assert cache_key("t", {}) != cache_key("u", {})


@pytest.mark.parametrize("params", [{"a": {1, 2}}, {"a": float("nan")}, {"a": object()}])
def test_cache_key_refuses_non_json(params: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        cache_key("t", params)


@pytest.mark.parametrize("scope", SCOPES)
def test_put_then_get_in_every_scope(scope: str) -> None:
    cache = ToolCache(task.Clock())
    value_of(cache.put("ns", scope, "k", {"success": True}))
    assert value_of(cache.get("ns", scope, "k")) == {"success": True}
    assert value_of(cache.get("ns", scope, "other")) is None


@pytest.mark.parametrize("scope", SCOPES)
def test_ttl_applies_in_every_scope(scope: str) -> None:
    clock = task.Clock()
    cache = ToolCache(clock)
    cache.put("ns", scope, "k", {"v": 1}, ttl=10)
    clock.advance(9.99)
    assert value_of(cache.get("ns", scope, "k")) == {"v": 1}
    clock.advance(0.01)
    assert value_of(cache.get("ns", scope, "k")) is None
    assert cache.stats("ns").size == 0  # expired entry dropped on lookup


def test_ttl_applies_in_the_store_too() -> None:
    clock = task.Clock()
    store = FakeCacheStore()
    cache = ToolCache(clock, store=store)
    cache.put("ns", "persistent", "k", {"v": 1}, ttl=10)
    assert store.entries[("ns", "k")][1] == 10
    clock.advance(10)
    assert value_of(cache.get("ns", "persistent", "k")) is None


def test_zero_ttl_stores_nothing() -> None:
    cache = ToolCache(task.Clock())
    cache.put("ns", "tick", "k", {"v": 1}, ttl=0)
    assert value_of(cache.get("ns", "tick", "k")) is None


def test_unknown_scope_is_refused() -> None:
    cache = ToolCache(task.Clock())
    with pytest.raises(ValueError, match="unknown cache scope"):
        cache.get("ns", "forever", "k")
    with pytest.raises(ValueError, match="unknown cache scope"):
        cache.put("ns", "forever", "k", {})


def test_clear_tick_and_session_and_invalidate() -> None:
    cache = ToolCache(task.Clock())
    for scope in SCOPES:
        cache.put("ns", scope, "k", {"scope": scope})
    cache.put("other", "tick", "k", {"v": 1})
    cache.clear_tick("ns")
    assert value_of(cache.get("ns", "tick", "k")) is None
    assert value_of(cache.get("ns", "session", "k")) is not None
    cache.clear_session("ns")
    assert value_of(cache.get("ns", "session", "k")) is None
    cache.put("ns", "tick", "k", {"v": 2})
    cache.put("ns", "session", "k", {"v": 2})
    cache.invalidate("ns")
    assert value_of(cache.get("ns", "tick", "k")) is None
    assert value_of(cache.get("ns", "session", "k")) is None
    assert value_of(cache.get("ns", "persistent", "k")) == {"scope": "persistent"}
    assert value_of(cache.get("other", "tick", "k")) == {"v": 1}


def test_clearing_an_unknown_namespace_is_harmless() -> None:
    cache = ToolCache(task.Clock())
    cache.clear_tick("nobody")
    cache.clear_session("nobody")
    cache.invalidate("nobody")
    cache.forget("nobody")
    assert value_of(cache.clear_persistent("nobody")) is None
    assert cache.namespaces() == []


def test_clear_persistent_goes_to_the_store() -> None:
    store = FakeCacheStore()
    cache = ToolCache(task.Clock(), store=store)
    cache.put("ns", "persistent", "k", {"v": 1})
    cache.put("other", "persistent", "k", {"v": 1})
    value_of(cache.clear_persistent("ns"))
    assert list(store.entries) == [("other", "k")]


def test_values_are_copied_in_and_out() -> None:
    cache = ToolCache(task.Clock())
    original = {"v": 1}
    cache.put("ns", "tick", "k", original)
    original["v"] = 2
    got = value_of(cache.get("ns", "tick", "k"))
    got["v"] = 3
    assert value_of(cache.get("ns", "tick", "k")) == {"v": 1}


def test_each_scope_is_bounded_oldest_first() -> None:
    cache = ToolCache(task.Clock(), max_entries=2)
    for key in ("a", "b", "c"):
        cache.put("ns", "session", key, {"k": key})
    assert value_of(cache.get("ns", "session", "a")) is None
    assert value_of(cache.get("ns", "session", "c")) == {"k": "c"}
    cache.put("ns", "session", "b", {"k": "b2"})  # rewrite moves b to the newest place
    cache.put("ns", "session", "d", {"k": "d"})
    assert value_of(cache.get("ns", "session", "b")) == {"k": "b2"}
    assert value_of(cache.get("ns", "session", "c")) is None


def test_stats_per_namespace_and_total() -> None:
    cache = ToolCache(task.Clock())
    cache.put("a", "tick", "k", {"v": 1})
    cache.put("b", "session", "k", {"v": 1})
    cache.get("a", "tick", "k")
    cache.get("a", "tick", "missing")
    cache.get("b", "session", "k")
    assert cache.stats("a") == CacheStats(hits=1, misses=1, size=1)
    assert cache.stats() == CacheStats(hits=2, misses=1, size=2)
    assert cache.stats("a").hit_rate == 0.5
    assert CacheStats().hit_rate == 0.0
    assert cache.stats("nobody") == CacheStats()
    assert cache.namespaces() == ["a", "b"]
    cache.forget("a")
    assert cache.namespaces() == ["b"]


def test_persistent_lookups_count_in_stats() -> None:
    cache = ToolCache(task.Clock(), store=FakeCacheStore())
    cache.put("ns", "persistent", "k", {"v": 1})
    cache.get("ns", "persistent", "k")
    cache.get("ns", "persistent", "nope")
    assert cache.stats("ns") == CacheStats(hits=1, misses=1, size=0)


def test_store_read_failure_is_a_logged_miss() -> None:
    store = FakeCacheStore()
    store.fail_reads = True
    cache = ToolCache(task.Clock(), store=store)
    assert value_of(cache.get("ns", "persistent", "k")) is None
    assert cache.stats("ns").misses == 1


def test_store_write_failure_is_logged_not_raised() -> None:
    store = FakeCacheStore()
    store.cache_put = lambda *a: defer.fail(OSError("read-only"))  # type: ignore[method-assign]
    cache = ToolCache(task.Clock(), store=store)
    assert value_of(cache.put("ns", "persistent", "k", {"v": 1})) is None


def test_cancelling_a_pending_store_read_propagates() -> None:
    store = FakeCacheStore()
    store.hold = True
    cache = ToolCache(task.Clock(), store=store)
    d = cache.get("ns", "persistent", "k")
    d.cancel()
    failure = value_of(d)
    assert failure.check(defer.CancelledError)


def test_memory_store_works_as_the_persistent_backend() -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    verifyObject(IStore, store)
    cache = ToolCache(clock, store=store)
    value_of(cache.put("ns", "persistent", "k", {"v": [1, 2]}, ttl=5))
    assert value_of(cache.get("ns", "persistent", "k")) == {"v": [1, 2]}
    assert cache.stats("ns").hits == 1
    clock.advance(5)
    assert value_of(cache.get("ns", "persistent", "k")) is None
    value_of(cache.put("ns", "persistent", "k", {"v": 1}))
    assert value_of(cache.clear_persistent("ns")) is None
    assert value_of(cache.get("ns", "persistent", "k")) is None


def test_memory_scopes_answer_synchronously() -> None:
    clock = task.Clock()
    cache = ToolCache(clock)
    assert all(cache.is_local(scope) for scope in SCOPES)
    cache.put_now("ns", "session", "k", {"v": 1}, ttl=3)
    assert cache.get_now("ns", "session", "k") == {"v": 1}
    clock.advance(3)
    assert cache.get_now("ns", "session", "k") is None


def test_store_scope_refuses_the_synchronous_calls() -> None:
    cache = ToolCache(task.Clock(), store=FakeCacheStore())
    assert not cache.is_local("persistent") and cache.is_local("tick")
    with pytest.raises(ValueError, match="use get"):
        cache.get_now("ns", "persistent", "k")
    with pytest.raises(ValueError, match="use put"):
        cache.put_now("ns", "persistent", "k", {})
    with pytest.raises(ValueError, match="unknown cache scope"):
        cache.is_local("forever")
