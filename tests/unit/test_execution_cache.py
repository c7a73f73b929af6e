"""The engine and the cache: scopes, TTL, failures never cached, DANGEROUS invalidation."""

from __future__ import annotations

from typing import Any

from twisted.internet import task

from ai_tools.execution.cache import ToolCache, cache_key
from ai_tools.execution.engine import ExecutionContext
from ai_tools.execution.outcome import CallStatus
from tests.unit.execution_fakes import FakeCacheStore, call, make_context, run


def calls_of(ctx: ExecutionContext, name: str) -> list[dict[str, Any]]:
    return ctx.registry.get_tool(name).calls  # type: ignore[union-attr]


def test_tick_scope_hit_then_cleared_by_a_new_tick() -> None:
    ctx = make_context()
    first = run(ctx, call("look", "c1", text="room"))
    second = run(ctx, call("look", "c2", text="room"))
    assert not first.from_cache and second.from_cache
    assert second.result == first.result and second.status == CallStatus.SUCCESS
    assert second.attempts == 0 and second.dispatched
    assert len(calls_of(ctx, "look")) == 1
    assert ctx.state.cache_hits == 1 and ctx.state.calls == 2
    ctx.cache.clear_tick("bot")  # type: ignore[union-attr]
    assert not run(ctx, call("look", "c3", text="room")).from_cache
    assert len(calls_of(ctx, "look")) == 2


def test_cache_hit_is_recorded_in_history_like_a_run() -> None:
    ctx = make_context()
    run(ctx, call("look", "c1", text="room"))
    run(ctx, call("look", "c2", text="room"))
    assert [m["role"] for m in ctx.history.messages] == ["assistant", "tool"] * 2
    assert ctx.history.messages[3]["tool_call_id"] == "c2"
    assert ctx.history.messages[3]["content"] == ctx.history.messages[1]["content"]


def test_different_parameters_are_different_entries() -> None:
    ctx = make_context()
    run(ctx, call("look", "c1", text="a"))
    assert not run(ctx, call("look", "c2", text="b")).from_cache


def test_key_is_canonical_for_lists_and_key_order() -> None:
    ctx = make_context()
    run(ctx, {"id": "c1", "tool": "look", "parameters": {"text": "a", "tags": ["x", "y"]}})
    again = run(ctx, {"id": "c2", "tool": "look",
                      "parameters": {"tags": ["x", "y"], "text": "a"}})
    assert again.from_cache
    reordered = run(ctx, {"id": "c3", "tool": "look",
                          "parameters": {"tags": ["y", "x"], "text": "a"}})
    assert not reordered.from_cache


def test_key_uses_validated_parameters() -> None:
    """A coerced parameter ("3" → 3) maps to the same entry as the clean value."""
    ctx = make_context()
    run(ctx, {"id": "c1", "tool": "look", "parameters": {"text": "a", "count": 3}})
    again = run(ctx, {"id": "c2", "tool": "look", "parameters": {"text": "a", "count": "3"}})
    assert again.from_cache
    assert calls_of(ctx, "look") == [{"text": "a", "count": 3}]


def test_session_scope_survives_ticks_until_its_ttl() -> None:
    ctx = make_context()
    clock: task.Clock = ctx.clock
    run(ctx, call("recall", "c1", text="x"))
    ctx.cache.clear_tick("bot")  # type: ignore[union-attr]
    clock.advance(59.9)
    assert run(ctx, call("recall", "c2", text="x")).from_cache
    clock.advance(0.1)  # TTL is 60 s
    assert not run(ctx, call("recall", "c3", text="x")).from_cache
    assert len(calls_of(ctx, "recall")) == 2


def test_session_scope_cleared_on_mode_change() -> None:
    ctx = make_context()
    run(ctx, call("recall", "c1", text="x"))
    ctx.cache.clear_session("bot")  # type: ignore[union-attr]
    assert not run(ctx, call("recall", "c2", text="x")).from_cache


def test_tick_scope_honours_a_ttl() -> None:
    ctx = make_context()
    clock: task.Clock = ctx.clock
    look = ctx.registry.get_tool("look")
    type(look).cache_ttl = 5.0  # type: ignore[union-attr]
    try:
        run(ctx, call("look", "c1", text="x"))
        clock.advance(5)
        assert not run(ctx, call("look", "c2", text="x")).from_cache
    finally:
        type(look).cache_ttl = None  # type: ignore[union-attr]


def test_persistent_scope_survives_a_restart() -> None:
    store = FakeCacheStore()
    clock = task.Clock()
    ctx = make_context(clock=clock, cache=ToolCache(clock, store=store))
    run(ctx, call("archive", "c1", text="x"))
    assert len(store.entries) == 1
    restarted = make_context(clock=clock, cache=ToolCache(clock, store=store))
    again = run(restarted, call("archive", "c2", text="x"))
    assert again.from_cache and calls_of(restarted, "archive") == []
    clock.advance(3600)
    assert not run(restarted, call("archive", "c3", text="x")).from_cache


def test_persistent_read_failure_runs_the_tool() -> None:
    store = FakeCacheStore()
    store.fail_reads = True
    clock = task.Clock()
    ctx = make_context(clock=clock, cache=ToolCache(clock, store=store))
    assert run(ctx, call("archive", text="x")).status == CallStatus.SUCCESS
    assert len(calls_of(ctx, "archive")) == 1


def test_failures_are_never_cached() -> None:
    ctx = make_context()
    look = ctx.registry.get_tool("look")
    outcomes = iter([{"success": False, "error": "too dark"}, {"success": True, "seen": 1}])
    look.execute = lambda actor, **p: next(outcomes)  # type: ignore[union-attr, method-assign]
    assert run(ctx, call("look", "c1", text="x")).status == CallStatus.TOOL_ERROR
    second = run(ctx, call("look", "c2", text="x"))
    assert not second.from_cache and second.result == {"success": True, "seen": 1}
    assert ctx.cache.stats("bot").size == 1  # type: ignore[union-attr]


def test_dangerous_success_invalidates_tick_and_session_only() -> None:
    store = FakeCacheStore()
    clock = task.Clock()
    ctx = make_context(clock=clock, cache=ToolCache(clock, store=store))
    run(ctx, call("look", "c1", text="x"))
    run(ctx, call("recall", "c2", text="x"))
    run(ctx, call("archive", "c3", text="x"))
    run(ctx, call("dig", "c4", text="hole"))
    assert not run(ctx, call("look", "c5", text="x")).from_cache
    assert not run(ctx, call("recall", "c6", text="x")).from_cache
    assert run(ctx, call("archive", "c7", text="x")).from_cache


def test_dangerous_failure_does_not_invalidate() -> None:
    ctx = make_context()
    run(ctx, call("look", "c1", text="x"))
    run(ctx, call("dig", "c2", text="fail"))
    assert run(ctx, call("look", "c3", text="x")).from_cache


def test_dangerous_success_leaves_other_assistants_alone() -> None:
    clock = task.Clock()
    cache = ToolCache(clock)
    mine = make_context(clock=clock, cache=cache, cache_namespace="a")
    other = make_context(clock=clock, cache=cache, cache_namespace="b")
    run(other, call("look", "c1", text="x"))
    run(mine, call("dig", "c2", text="hole"))
    assert run(other, call("look", "c3", text="x")).from_cache


def test_namespaces_are_separate() -> None:
    clock = task.Clock()
    cache = ToolCache(clock)
    a = make_context(clock=clock, cache=cache, cache_namespace="a")
    b = make_context(clock=clock, cache=cache, cache_namespace="b")
    run(a, call("look", "c1", text="x"))
    assert not run(b, call("look", "c2", text="x")).from_cache


def test_mutating_an_outcome_does_not_change_the_cache() -> None:
    ctx = make_context()
    first = run(ctx, call("look", "c1", text="x"))
    first.result["_token_advisory"] = "wrap up"
    second = run(ctx, call("look", "c2", text="x"))
    assert "_token_advisory" not in second.result
    second.result["extra"] = 1
    assert "extra" not in run(ctx, call("look", "c3", text="x")).result


def test_no_cache_object_means_no_caching() -> None:
    ctx = make_context(cache=None)
    run(ctx, call("look", "c1", text="x"))
    assert not run(ctx, call("look", "c2", text="x")).from_cache


def test_stats_follow_engine_lookups() -> None:
    ctx = make_context()
    run(ctx, call("look", "c1", text="x"))
    run(ctx, call("look", "c2", text="x"))
    run(ctx, call("echo", "c3", text="x"))  # not cacheable: no lookup
    stats = ctx.cache.stats("bot")  # type: ignore[union-attr]
    assert (stats.hits, stats.misses, stats.size) == (1, 1, 1)


def test_engine_key_matches_cache_key() -> None:
    ctx = make_context()
    run(ctx, call("look", "c1", text="x"))
    d = ctx.cache.get("bot", "tick", cache_key("look", {"text": "x"}))  # type: ignore[union-attr]
    found: list[Any] = []
    d.addCallback(found.append)
    assert found[0]["success"] is True


def test_the_key_is_the_validated_parameters() -> None:
    """Validation comes first (spec 000 steps 5 then 6): every spelling that validates
    to the same parameters is answered by the one cached result."""
    ctx = make_context()
    run(ctx, call("look", "c1", text="a", count="3"))
    assert run(ctx, call("look", "c2", text="a", count="3")).from_cache
    assert run(ctx, call("look", "c3", text="a", count=3)).from_cache
    assert len(calls_of(ctx, "look")) == 1


def test_invalid_arguments_never_hit_the_cache() -> None:
    ctx = make_context()
    run(ctx, call("look", "c1", text="a"))
    outcome = run(ctx, call("look", "c2", text=["not", "text"]))
    assert outcome.status == "invalid_parameters" and not outcome.from_cache


def test_cached_answer_respects_the_gate() -> None:
    class NoSafe:
        def allows(self, name: str, category: Any) -> bool:
            return False

    clock = task.Clock()
    cache = ToolCache(clock)
    run(make_context(clock=clock, cache=cache), call("look", "c1", text="a"))
    blocked = run(make_context(clock=clock, cache=cache, gate=NoSafe()),
                  call("look", "c2", text="a"))
    assert blocked.status == "blocked_by_tool_mode" and not blocked.from_cache


def test_persistent_scope_keys_by_the_validated_parameters() -> None:
    store = FakeCacheStore()
    clock = task.Clock()
    ctx = make_context(clock=clock, cache=ToolCache(clock, store=store))
    run(ctx, call("archive", "c1", text="a", count="3"))
    assert sorted(k for _, k in store.entries) == ['archive:{"count":3,"text":"a"}']
    assert run(ctx, call("archive", "c2", text="a", count=3)).from_cache


def test_persistent_read_failure_with_bad_arguments_answers_the_validation_error() -> None:
    store = FakeCacheStore()
    store.fail_reads = True
    clock = task.Clock()
    ctx = make_context(clock=clock, cache=ToolCache(clock, store=store))
    outcome = run(ctx, call("archive", text=5))
    assert outcome.status == "invalid_parameters"
    assert calls_of(ctx, "archive") == []


def test_unserialisable_success_is_neither_cached_nor_counted() -> None:
    """A success the model is told is an ``invalid_result`` is not cached, not activity.

    The shape check comes before caching and counting: the next identical call
    runs the tool again instead of answering the error from the cache.
    """
    ctx = make_context()
    look = ctx.registry.get_tool("look")
    outcomes = iter([{"success": True, "seen": {1, 2}}, {"success": True, "seen": [1, 2]}])
    look.execute = lambda actor, **p: next(outcomes)  # type: ignore[union-attr, method-assign]
    first = run(ctx, call("look", "c1", text="x"))
    assert first.status == CallStatus.INVALID_RESULT and not first.success
    assert ctx.state.activity_since_wake == 0
    assert ctx.cache.stats("bot").size == 0  # type: ignore[union-attr]
    second = run(ctx, call("look", "c2", text="x"))
    assert not second.from_cache and second.result == {"success": True, "seen": [1, 2]}
    assert ctx.state.activity_since_wake == 1
