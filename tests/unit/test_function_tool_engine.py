"""Decorated tools through the one execution path: results, errors, sync/Deferred/async,
timeout, retry, cache, permissions, kill, and the offer to the model (native and fallback)."""

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal

import attrs
from twisted.internet import defer, error, task

from ai_tools import tool
from ai_tools.execution.outcome import CallStatus
from ai_tools.loop import LoopConfig, TerminationReason, execute_react_loop
from ai_tools.tools import Actor, ToolCategory, ToolRegistry
from tests.unit.execution_fakes import call, make_context, run, start
from tests.unit.react_fakes import ScriptedLLM, answer, make_ctx, text
from tests.unit.react_fakes import call as model_call


class Mood(enum.Enum):
    CALM = "calm"
    ANGRY = "angry"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


@attrs.frozen
class Reading:
    place: str
    degrees: float


def context_with(*tools: Any, **overrides: Any) -> Any:
    return make_context(registry=ToolRegistry(tools), **overrides)


# -- what the function returns --------------------------------------------------------


@tool
def roll(count: Annotated[int, "How many dice."], sides: Literal[4, 6, 20] = 6) -> int:
    """Roll dice (each shows its highest face, for the test)."""
    return count * sides


@tool
def weather(place: str) -> Reading:
    """The weather."""
    return Reading(place, 21.5)


@tool
def names(count: int) -> list[str]:
    """Names."""
    return [f"n{i}" for i in range(count)]


@tool
def shaped(mood: Mood, at: Point, corner: tuple[int, int], actor: Actor) -> dict[str, Any]:
    """Typed arguments arrive as their types."""
    return {"success": True, "mood": mood.name, "at": [at.x, at.y], "corner": list(corner),
            "tuple": isinstance(corner, tuple), "who": actor.character_id,
            "call_id": actor.call_id}


@tool
def nothing() -> None:
    """Return nothing."""


@tool
def refuse(reason: str) -> dict[str, Any]:
    """A dict result is the result, refusals included."""
    return {"success": False, "error": reason}


@tool
def explode() -> str:
    """Raise."""
    raise RuntimeError("the lamp broke")


@tool
def opaque() -> object:
    """Return something JSON cannot carry."""
    return object()


def test_results_become_tool_results() -> None:
    """int, attrs instance, list, None, a dict: the result the engine knows."""
    ctx = context_with(roll, weather, names, nothing, refuse)
    assert run(ctx, call("roll", count=3)).result == {"success": True, "result": 18}
    assert run(ctx, call("weather", "c2", place="Inn")).result == \
        {"success": True, "result": {"place": "Inn", "degrees": 21.5}}
    assert run(ctx, call("names", "c3", count=2)).result == {"success": True,
                                                            "result": ["n0", "n1"]}
    assert run(ctx, call("nothing", "c4")).result == {"success": True}
    outcome = run(ctx, call("refuse", "c5", reason="closed"))
    assert (outcome.status, outcome.result) == (CallStatus.TOOL_ERROR,
                                                {"success": False, "error": "closed"})


def test_typed_arguments_are_converted_and_the_actor_injected() -> None:
    """Enum, dataclass and tuple parameters arrive as such; the actor is the call's."""
    ctx = context_with(shaped)
    outcome = run(ctx, call("shaped", "call_9", mood="angry", at={"x": 2}, corner=[1, 2]))
    assert outcome.result == {"success": True, "mood": "ANGRY", "at": [2, 0],
                              "corner": [1, 2], "tuple": True, "who": "char-1",
                              "call_id": "call_9"}


def test_validation_and_coercion_happen_before_the_function() -> None:
    """The model's text is coerced ("3" -> 3); a bad value is refused with the usual message."""
    ctx = context_with(roll, shaped)
    assert run(ctx, call("roll", count="3", sides="4")).result == {"success": True,
                                                                   "result": 12}
    outcome = run(ctx, call("roll", "c2", count=1, sides=7))
    assert outcome.status == CallStatus.INVALID_PARAMETERS
    assert "sides" in outcome.result["error"] and "4, 6, 20" in outcome.result["error"]
    outcome = run(ctx, call("shaped", "c3", mood="sad", at={"x": 1}, corner=[1, 2]))
    assert outcome.status == CallStatus.INVALID_PARAMETERS
    assert "mood" in outcome.result["error"]


def test_an_exception_is_the_usual_error() -> None:
    """A raised exception is the engine's error text; a result with no JSON form says so."""
    ctx = context_with(explode, opaque)
    outcome = run(ctx, call("explode"))
    assert (outcome.status, outcome.result) == (
        CallStatus.TOOL_ERROR, {"success": False, "error": "RuntimeError: the lamp broke"})
    result = run(ctx, call("opaque", "c2")).result
    assert result["success"] is False
    assert result["error"].startswith("Tool 'opaque' returned object, which has no JSON form")


# -- sync, Deferred, async ------------------------------------------------------------


def test_deferred_and_async_functions() -> None:
    """A Deferred or a coroutine is waited for; its value becomes the result."""
    waiting: list[defer.Deferred[Any]] = []

    @tool
    def later(text: str) -> defer.Deferred[str]:
        """Answer later."""
        d: defer.Deferred[str] = defer.Deferred()
        waiting.append(d)
        return d

    @tool
    async def soon(text: str) -> str:
        """Answer after awaiting."""
        d: defer.Deferred[str] = defer.Deferred()
        waiting.append(d)
        return (await d) + "!"

    ctx = context_with(later, soon)
    _d1, results1 = start(ctx, call("later", text="a"))
    _d2, results2 = start(ctx, call("soon", "c2", text="b"))
    assert results1 == results2 == []
    waiting[0].callback("one")
    waiting[1].callback("two")
    assert results1[0].result == {"success": True, "result": "one"}
    assert results2[0].result == {"success": True, "result": "two!"}


def test_timeout_cancels_the_functions_deferred() -> None:
    """``timeout=`` bounds each attempt; the model reads "timed out after 2s"."""
    cancelled: list[bool] = []

    @tool(timeout=2, retries=0)
    async def slow() -> str:
        """Never answer."""
        try:
            await defer.Deferred()
        except defer.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    clock = task.Clock()
    ctx = context_with(slow, clock=clock)
    _, results = start(ctx, call("slow"))
    clock.advance(2)
    assert results[0].status == CallStatus.TIMED_OUT
    assert results[0].result == {"success": False, "error": "timed out after 2s"}
    assert cancelled == [True] and ctx.state.timeouts == 1


def test_retries_come_from_the_decorator() -> None:
    """``retries=1``: one more attempt after a transient failure, then the answer."""
    attempts: list[int] = []

    @tool(retries=1)
    def flaky() -> str:
        """Fail transiently once."""
        attempts.append(1)
        if len(attempts) == 1:
            raise error.ConnectionLost("the line dropped")
        return "ok"

    @tool(retries=1)
    def broken() -> str:
        """Always fail transiently."""
        attempts.append(2)
        raise error.ConnectionLost("the line dropped")

    clock = task.Clock()
    ctx = context_with(flaky, broken, clock=clock)
    _, results = start(ctx, call("flaky"))
    clock.advance(10)
    assert results[0].result == {"success": True, "result": "ok"} and results[0].attempts == 2
    _, results = start(ctx, call("broken", "c2"))
    clock.advance(10)
    clock.advance(10)
    assert results[0].attempts == 2 and attempts.count(2) == 2  # not the policy's 4
    assert "gave up after 2 attempts" in results[0].result["error"]


def test_cache_answers_the_second_call() -> None:
    """``cache="tick"``: the second identical call is answered from the cache."""
    ran: list[str] = []

    @tool(cache="tick")
    def look(at: str) -> str:
        """Look."""
        ran.append(at)
        return f"a {at}"

    ctx = context_with(look)
    first = run(ctx, call("look", "c1", at="lamp"))
    second = run(ctx, call("look", "c2", at="lamp"))
    assert (first.from_cache, second.from_cache) == (False, True)
    assert second.result == {"success": True, "result": "a lamp"} and ran == ["lamp"]


class World:
    """The permission part of a world: who holds what."""

    def __init__(self, held: dict[str, set[str]]) -> None:
        self.held = held

    def has_permission(self, char_id: str, permission: str) -> defer.Deferred[bool]:
        return defer.succeed(permission in self.held.get(char_id, set()))


def test_permission_is_checked_before_the_call() -> None:
    """``permission=``: a character without it is refused; the function never runs."""
    built: list[str] = []

    @tool(permission="Builder", category=ToolCategory.DANGEROUS)
    def build(what: str) -> str:
        """Build something."""
        built.append(what)
        return what

    world = World({"char-1": {"Builder"}})
    ctx = context_with(build, actor=Actor("char-1", world=world))
    assert run(ctx, call("build", what="tower")).result == {"success": True,
                                                            "result": "tower"}
    ctx = context_with(build, actor=Actor("char-2", world=world))
    outcome = run(ctx, call("build", "c2", what="wall"))
    assert outcome.result == {"success": False, "status": "permission_denied",
                              "retryable": False,
                              "error": "permission denied: build needs the Builder permission"}
    assert outcome.attempts == 1  # never retried
    ctx = context_with(build, actor=Actor("char-1"))
    assert run(ctx, call("build", "c3", what="x")).result["status"] == "unavailable"
    assert built == ["tower"]


def test_requires_character_is_enforced_by_the_engine() -> None:
    """A tool taking the actor is refused without a character; a pure function runs."""

    @tool
    def me(actor: Actor) -> str:
        """Who am I."""
        return str(actor.character_id)

    ctx = context_with(me, roll, actor=Actor(None))
    assert run(ctx, call("me")).status == CallStatus.NO_CHARACTER
    assert run(ctx, call("roll", "c2", count=1)).status == CallStatus.SUCCESS


def test_a_kill_cancels_the_function() -> None:
    """Cancelling the call cancels what the function waits on: stopped_by_user."""
    cancelled: list[bool] = []

    @tool
    def hang() -> defer.Deferred[str]:
        """Hang."""
        return defer.Deferred(lambda d: cancelled.append(True))

    ctx = context_with(hang)
    d, results = start(ctx, call("hang"))
    d.cancel()
    assert results[0].status == TerminationReason.STOPPED_BY_USER and cancelled == [True]
    assert ctx.history.messages == []


# -- the offer to the model, and a loop calling it -----------------------------------


def test_native_mode_offers_the_schema_and_runs_the_call() -> None:
    """The model gets the tool in ``tools=`` and its call runs through the loop."""
    llm = ScriptedLLM([answer(model_call("roll", {"count": 2, "sides": 4}, "c1")),
                       text("Eight.")])
    ctx = make_ctx(llm, registry=ToolRegistry([roll]))
    d = execute_react_loop(ctx, LoopConfig())
    result = d.result
    offered = [t for t in llm.requests[0]["tools"] if t["function"]["name"] == "roll"]
    assert offered == [roll().schema()]
    assert offered[0]["function"]["parameters"]["properties"]["sides"] == {
        "type": "integer", "enum": [4, 6, 20]}
    assert result.results[0]["result"] == {"success": True, "result": 8}
    tool_message = next(m for m in ctx.history.messages if m["role"] == "tool")
    assert json.loads(tool_message["content"]) == {"success": True, "result": 8}


def test_fallback_mode_lists_the_schema_in_the_prompt() -> None:
    """Fallback mode writes the same parameters into the system prompt; the call runs."""
    llm = ScriptedLLM([text('{"tool": "roll", "arguments": {"count": 1}}'), text("Six.")])
    ctx = make_ctx(llm, registry=ToolRegistry([roll]))
    result = execute_react_loop(ctx, LoopConfig(native_tools=False)).result
    prompt = llm.system_prompts()[0]
    parameters = json.dumps(roll().schema()["function"]["parameters"], sort_keys=True,
                            separators=(",", ":"))
    assert f"- roll: {roll.description}\n  parameters: {parameters}" in prompt
    assert llm.requests[0]["tools"] is None
    assert result.results[0]["result"] == {"success": True, "result": 6}


def test_refusals_raised_are_the_default_tools_refusals() -> None:
    """PermissionDenied, NotFound, ValueError: the refusal results, never retried."""
    from ai_tools.errors import NotFound, PermissionDenied

    @tool
    def fetch(what: str) -> str:
        """Fetch."""
        if what == "crown":
            raise PermissionDenied("the crown is the king's")
        if what == "unicorn":
            raise NotFound("no unicorn here")
        raise ValueError("a bucket cannot hold a well")

    @tool
    async def fetch_later(what: str) -> str:
        """Fetch, asynchronously."""
        raise NotFound(f"no {what} here")

    ctx = context_with(fetch, fetch_later)
    assert run(ctx, call("fetch", "c1", what="crown")).result == {
        "success": False, "status": "permission_denied", "retryable": False,
        "error": "permission denied: the crown is the king's"}
    assert run(ctx, call("fetch", "c2", what="unicorn")).result["status"] == "not_found"
    outcome = run(ctx, call("fetch", "c3", what="well"))
    assert outcome.result == {"success": False, "status": "invalid", "retryable": False,
                              "error": "a bucket cannot hold a well"}
    outcome = run(ctx, call("fetch_later", "c4", what="dragon"))
    assert (outcome.result["status"], outcome.attempts) == ("not_found", 1)


def test_a_value_the_type_refuses_after_validation_is_invalid() -> None:
    """A date the schema's ``format`` let through but msgspec cannot read: ``invalid``."""
    import datetime

    @tool
    def book(day: datetime.date) -> str:
        """Book a room."""
        return day.isoformat()

    ctx = context_with(book)
    assert run(ctx, call("book", "c1", day="2026-11-28")).result == {
        "success": True, "result": "2026-11-28"}
    outcome = run(ctx, call("book", "c2", day="someday"))
    assert outcome.result["status"] == "invalid"
    assert outcome.result["error"].startswith("day: ")


def test_a_class_tools_max_attempts_bounds_its_retries() -> None:
    """``Tool.max_attempts`` is the tool's own bound; registration refuses a bad one."""
    import pytest

    from ai_tools.errors import ToolRegistrationError
    from ai_tools.tools import Tool

    class Once(Tool):
        name = "once"
        description = "Fail transiently."
        max_attempts = 1

        def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
            raise error.ConnectionLost("gone")

    class Bad(Once):
        name = "bad"
        max_attempts = 0

    outcome = run(context_with(Once), call("once"))
    assert outcome.attempts == 1 and outcome.status == CallStatus.TOOL_ERROR
    with pytest.raises(ToolRegistrationError, match="'max_attempts' must be None or an integer"):
        ToolRegistry([Bad])
