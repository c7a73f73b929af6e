"""The interim ``make demo`` script, driven by a fake clock."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, task

from ai_tools import demo
from ai_tools.tools import Actor


def run(clock: task.Clock) -> tuple[list[Any], list[str]]:
    """Start the demo; return its (not yet fired) results and its output lines."""
    lines: list[str] = []
    results: list[Any] = []
    demo.run_demo(clock, lines.append).addBoth(results.append)
    return results, lines


def test_demo_runs_every_call_and_exits_zero() -> None:
    """The demo waits for its Deferred and coroutine tools, then fires 0."""
    clock = task.Clock()
    results, lines = run(clock)
    assert results == []  # waiting for the Deferred tool
    clock.pump([0.05] * 10)
    assert results == [0]
    text = "\n".join(lines)
    assert "Tools offered to the model:" in text
    assert '"lamp": {"on": true, "brightness": 75, "color": "warm"}' in text
    assert "Parameter validation failed for 'set_lamp':" in text
    assert "- on: Missing required parameter (expected: type: boolean)" in text
    assert "- colour: Unknown parameter, ignored (did you mean 'color'?)" in text
    assert '"rang": true' in text
    assert '"announced": "Dinner is served."' in text
    assert lines[-1] == "Done."


def test_call_tool_reports_unknown_tools_and_bad_results() -> None:
    """Unknown names and malformed results reach the model as failures, not exceptions."""
    clock = task.Clock()
    registry = demo.build_registry(clock)
    unknown: list[Any] = []
    demo.call_tool(registry, clock, Actor("c"), "fly", {}).addCallback(unknown.append)
    assert unknown == [{"success": False, "error": "Unknown tool 'fly'"}]

    class Broken(demo.DescribeRoom):
        name = "broken"

        def execute(self, actor: Actor, **params: Any) -> Any:
            return defer.succeed(["not", "a", "dict"])

    registry.register(Broken)
    fixed: list[Any] = []
    demo.call_tool(registry, clock, Actor("c"), "broken", {"room": "hall"}).addCallback(
        fixed.append)
    assert fixed[0]["success"] is False
    assert "returned list" in fixed[0]["error"]


def test_slow_tools_time_out() -> None:
    """A call longer than the tool's timeout fails with TimeoutError on the clock."""
    clock = task.Clock()
    registry = demo.build_registry(clock)
    tool = registry.get_tool("wait_for_bell")
    assert tool is not None
    failures: list[Any] = []
    d = demo.call_tool(registry, clock, Actor("c"), "wait_for_bell", {"seconds": 2})
    d.addErrback(failures.append)
    clock.advance(tool.timeout - 3)  # 2s sleep finishes first: no failure
    assert failures == []
    slow = type("Slow", (demo.WaitForBell,), {"name": "slow", "timeout": 1})
    registry.register(slow).clock = clock
    d = demo.call_tool(registry, clock, Actor("c"), "slow", {"seconds": 2})
    d.addErrback(failures.append)
    clock.advance(1.5)
    assert len(failures) == 1
    assert failures[0].check(defer.TimeoutError)
