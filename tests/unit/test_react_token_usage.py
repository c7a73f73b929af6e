"""The loop's context usage: counted incrementally, equal to a full count at every step."""

from __future__ import annotations

from typing import Any

from twisted.internet import task

from ai_tools.execution.history import ConversationHistory, ToolCall
from ai_tools.llm.tokens import default_counter
from ai_tools.loop import run as react
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry


class _Model:
    context_window = 1000

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")


def _run(history: ConversationHistory) -> Any:
    model: Any = _Model()
    ctx = react.LoopContext(assistant_name="a", actor=Actor("c"), registry=ToolRegistry(),
                            llm=model, history=history, clock=task.Clock(),
                            system_prompt="You are a test.")
    run = react._LoopRun(ctx, react.LoopConfig())
    run.prepare()
    run.build_messages("You are a test.", react.check_loop_continuation(0, 0, 5).advisory)
    return run


def _full_count(run: Any) -> int:
    counter = default_counter()
    return int(run._fixed_tokens + run._system_tokens
               + sum(counter.count_message(m) for m in run.history.messages))


def test_usage_follows_growth_replacement_and_shrinking() -> None:
    """Appends are counted incrementally; a replaced or shorter history is counted again."""
    history = ConversationHistory()
    run = _run(history)
    assert run.usage_pct() == 100.0 * _full_count(run) / 1000
    for i in range(3):
        history.add_user("hello there " * i)
        history.add_tool_exchange(ToolCall(id=f"c{i}", name="look", arguments={"at": "x"}),
                                  '{"success": true}', native=True)
        before = run.usage["context_tokens"]
        run.usage_pct()
        assert run.usage["context_tokens"] == _full_count(run) > before
    history.replace([{"role": "user", "content": "a much longer summary " * 20}])
    run.usage_pct()
    assert run.usage["context_tokens"] == _full_count(run)
    history.replace([])
    run.usage_pct()
    assert run.usage["context_tokens"] == _full_count(run)
    history.add_user("again")
    run.usage_pct()
    assert run.usage["context_tokens"] == _full_count(run)


def test_same_length_replacement_is_noticed() -> None:
    """A history replaced by another of the same length is counted again, not trusted."""
    history = ConversationHistory()
    history.add_user("short")
    run = _run(history)
    run.usage_pct()
    history.replace([{"role": "user", "content": "a different and much longer text " * 10}])
    run.usage_pct()
    assert run.usage["context_tokens"] == _full_count(run)


def test_history_version_changes_with_every_change() -> None:
    """Every way of changing the messages changes the version the usage cache keys on."""
    history = ConversationHistory()
    seen = {history.version}
    changes = [
        lambda: history.add_user("u"),
        lambda: history.add_assistant("a"),
        lambda: history.append({"role": "system", "content": "s"}),
        lambda: history.add_tool_exchange(ToolCall(id="c1", name="t", arguments={}), "{}",
                                          native=True),
        lambda: history.replace([{"role": "user", "content": "u"}]),
        history.clear,
    ]
    for change in changes:
        change()
        assert history.version not in seen
        seen.add(history.version)
    assert len(history.messages) == 0 and history.version == len(changes) + 1


def test_an_unchanged_history_is_not_counted_again() -> None:
    """Asking twice with nothing changed counts no message the second time."""
    history = ConversationHistory()
    history.add_user("hello")
    run = _run(history)
    first = run.usage_pct()
    counted: list[Any] = []
    run._counter = _CountingCounter(counted)
    assert run.usage_pct() == first and counted == []
    history.add_user("more")
    run.usage_pct()
    assert counted == [{"role": "user", "content": "more"}]


class _CountingCounter:
    def __init__(self, seen: list[Any]) -> None:
        self.seen = seen

    def count_message(self, message: Any) -> int:
        self.seen.append(message)
        return default_counter().count_message(message)
