"""Pending events count as taken only once a model answer saw them (every host's rule).

A loop that ends before that gives them back: out of the history, back in front
of the pending list, in order, and saved so.  A tick refused by an open circuit
breaker is no attempt; after ``unavailable_after`` real failed attempts the
assistant says ``unavailable_line`` once, in the world, and the events wait for
the model to be back.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import task
from twisted.logger import LogLevel

from ai_tools.errors import LLMError, LLMUnavailable
from ai_tools.loop import LoopConfig, TerminationReason, execute_react_loop
from ai_tools.loop.prompts import EVENTS_PREFIX
from ai_tools.store.memory import MemoryStore
from tests.unit.react_fakes import (
    Pending,
    SayTool,
    ScriptedLLM,
    answer,
    call,
    fake_meter,
    make_ctx,
    make_registry,
    text,
)
from tests.unit.service_fakes import LogCapture, add, make_service, settle

E1 = {"type": "say", "from": "bob", "text": "hello"}
E2 = {"type": "say", "from": "bob", "text": "anyone?"}
E3 = {"type": "say", "from": "eve", "text": "me too"}


def events_messages(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages
            if m["role"] == "user" and m["content"].startswith(EVENTS_PREFIX)]


# -- the loop ----------------------------------------------------------------------------


def test_a_failed_first_call_gives_the_events_back() -> None:
    llm = ScriptedLLM([LLMError("server exploded")])
    ctx = make_ctx(llm, pending_events=[dict(E1), dict(E2)])
    result = execute_react_loop(ctx).result
    assert result.termination_reason == TerminationReason.LLM_ERROR
    assert result.events_returned == 2
    assert ctx.pending_events == [E1, E2]
    assert events_messages(ctx.history.messages) == []
    assert len(events_messages(llm.requests[0]["messages"])) == 1  # the model was asked


def test_events_heard_meanwhile_go_after_the_batch() -> None:
    """A shutdown during the model call: the batch goes back in front, in order."""
    hanging = Pending()
    ctx = make_ctx(ScriptedLLM([hanging]), pending_events=[dict(E1), dict(E2)])
    d = execute_react_loop(ctx)
    assert not d.called and ctx.pending_events == []
    ctx.pending_events.append(dict(E3))  # heard while the model thinks
    ctx.control.stop("service stopping", TerminationReason.SHUTDOWN)
    result = d.result
    assert hanging.cancelled
    assert result.termination_reason == TerminationReason.SHUTDOWN
    assert not result.failed and result.termination_reason.stopped
    assert ctx.pending_events == [E1, E2, E3]
    assert events_messages(ctx.history.messages) == []


def test_an_operator_stop_gives_them_back_too() -> None:
    ctx = make_ctx(ScriptedLLM([Pending()]), pending_events=[dict(E1)])
    d = execute_react_loop(ctx)
    d.cancel()
    result = d.result
    assert result.termination_reason == TerminationReason.STOPPED_BY_USER
    assert ctx.pending_events == [E1] and result.events_returned == 1


def test_an_open_breaker_and_a_full_context_give_them_back() -> None:
    for llm, options, reason in (
        (ScriptedLLM([LLMUnavailable("circuit open")]), {}, TerminationReason.LLM_UNAVAILABLE),
        (ScriptedLLM([]), {"meter": fake_meter(prompt=90_000)},
         TerminationReason.CRITICAL_TOKENS),
    ):
        ctx = make_ctx(llm, pending_events=[dict(E1)], **options)
        result = execute_react_loop(ctx).result
        assert result.termination_reason == reason
        assert ctx.pending_events == [E1] and events_messages(ctx.history.messages) == []


def test_an_answer_that_saw_them_takes_them() -> None:
    """Once an answer arrived, a later failure does not give the events back."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), LLMError("gone")])
    ctx = make_ctx(llm, pending_events=[dict(E1)])
    result = execute_react_loop(ctx).result
    assert result.termination_reason == TerminationReason.LLM_ERROR
    assert result.events_returned == 0 and ctx.pending_events == []
    assert len(events_messages(ctx.history.messages)) == 1


def test_a_state_written_during_the_call_holds_the_batch_as_pending() -> None:
    """Until an answer saw it, the delivery tells a writer: the batch is pending, in
    front of what was heard meanwhile, and its message is not in the history."""
    hanging = Pending()
    ctx = make_ctx(ScriptedLLM([hanging]), pending_events=[dict(E1), dict(E2)])
    d = execute_react_loop(ctx)
    delivery = ctx.control.delivery
    assert delivery is not None and ctx.pending_events == []
    ctx.pending_events.append(dict(E3))
    before = ctx.history.messages
    assert len(events_messages(before)) == 1
    messages, pending = delivery.saved(before, list(ctx.pending_events))
    assert pending == [E1, E2, E3] and events_messages(messages) == []
    assert messages == before[:-1]
    assert hanging.deferred is not None
    hanging.deferred.callback(text("Hi Bob."))  # the answer saw them: taken
    assert d.result.events_returned == 0
    messages, pending = delivery.saved(ctx.history.messages, list(ctx.pending_events))
    assert pending == [E3] and len(events_messages(messages)) == 1


def test_events_heard_during_a_loop_join_it_before_the_next_model_call() -> None:
    """A player who speaks while a loop runs waits one model call, not the whole loop:
    what was heard joins the history as another batch, and the next answer takes it."""
    ctx = make_ctx(ScriptedLLM([]), pending_events=[dict(E1)])

    def look_and_hear(messages: Any, tools: Any) -> Any:
        ctx.pending_events.append(dict(E3))  # heard while the model thinks
        return answer(call("look", {}, "c1"))

    llm = ScriptedLLM([look_and_hear, text("Hello, Eve.")])
    ctx.llm = llm
    result = execute_react_loop(ctx).result
    assert result.events_returned == 0 and ctx.pending_events == []
    first, second = (events_messages(r["messages"]) for r in llm.requests)
    assert len(first) == 1 and "eve" not in first[0]
    assert len(second) == 2 and "me too" in second[1]
    assert events_messages(ctx.history.messages) == second


def test_a_batch_heard_during_the_loop_goes_back_alone_when_no_answer_saw_it() -> None:
    """The first batch was answered (taken); the one heard meanwhile was not: only it
    goes back to pending, and only its message leaves the history."""
    ctx = make_ctx(ScriptedLLM([]), pending_events=[dict(E1)])

    def look_and_hear(messages: Any, tools: Any) -> Any:
        ctx.pending_events.append(dict(E3))
        return answer(call("look", {}, "c1"))

    ctx.llm = ScriptedLLM([look_and_hear, LLMError("gone")])
    result = execute_react_loop(ctx).result
    assert result.termination_reason == TerminationReason.LLM_ERROR
    assert result.events_returned == 1 and ctx.pending_events == [E3]
    kept = events_messages(ctx.history.messages)
    assert len(kept) == 1 and "hello" in kept[0]


def test_a_loop_started_without_events_takes_those_heard_later() -> None:
    """An autonomous loop (no events, the transient [TICK] nudge) hears a player: the
    batch is delivered, the nudge saying "no new events" goes, and a state written
    during the next call holds the batch as pending."""
    ctx = make_ctx(ScriptedLLM([]))
    hanging = Pending()

    def look_and_hear(messages: Any, tools: Any) -> Any:
        ctx.pending_events.append(dict(E2))
        return answer(call("look", {}, "c1"))

    ctx.llm = llm = ScriptedLLM([look_and_hear, hanging])
    d = execute_react_loop(ctx)
    delivery = ctx.control.delivery
    assert delivery is not None and ctx.pending_events == []
    nudges = [m for m in llm.requests[1]["messages"] if "No new events" in str(m["content"])]
    assert nudges == [] and len(events_messages(llm.requests[1]["messages"])) == 1
    messages, pending = delivery.saved(ctx.history.messages, [])
    assert pending == [E2] and events_messages(messages) == []
    assert hanging.deferred is not None
    hanging.deferred.callback(text("Anyone? Yes, me."))
    assert d.result.events_returned == 0 and ctx.pending_events == []


def test_the_result_carries_the_last_finish_reason() -> None:
    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("done")])
    result = execute_react_loop(make_ctx(llm)).result
    assert result.finish_reason == "stop"
    assert result.as_dict()["finish_reason"] == "stop"
    none = execute_react_loop(make_ctx(ScriptedLLM([LLMError("x")]))).result
    assert none.finish_reason is None


# -- the tick ----------------------------------------------------------------------------


class World:
    """The world's say, recorded (and a hearing subscription that hears nothing)."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str, str]] = []

    def message_location(self, char_id: str, text: str, kind: str = "say",
                         exclude: Any = ()) -> None:
        self.said.append((char_id, text, kind))

    def message_character(self, char_id: str, target_id: str, text: str,
                          kind: str = "whisper") -> None:
        self.said.append((char_id, f"{kind} to {target_id}: {text}", kind))

    def subscribe(self, char_id: str, listener: Any) -> Any:
        return lambda: None


def _next_tick(clock: Any) -> None:
    """Let the scheduler run the assistant's next tick (every 5 s)."""
    clock.advance(5)
    settle(clock)


def test_failed_attempts_then_one_notice_then_the_answer() -> None:
    world = World()
    llm = ScriptedLLM([LLMError("down"), LLMUnavailable("circuit open"), LLMError("down"),
                       LLMError("down"), LLMError("down"),
                       answer(call("say", {"text": "Hello Bob!"}, "c1"))])
    clock, service, _ = make_service(llm=llm, loop=False, registry=make_registry(),
                                     world=world)
    ada = add(service, clock, name="ada", unavailable_after=3,
              unavailable_line="One moment, please.")
    service.send("ada", dict(E1))
    settle(clock)  # the first tick runs at once (an event came)
    reasons = [ada.last_tick["reason"]]
    for _ in range(3):
        _next_tick(clock)
        reasons.append(ada.last_tick["reason"])
        assert [e["text"] for e in ada.pending_events] == ["hello"]
    # the refusal by the open breaker was no attempt: three real ones so far
    assert reasons == ["llm_error", "llm_unavailable", "llm_error", "llm_error"]
    assert ada.failed_deliveries == 3 and ada.unavailable_said
    assert world.said == [("char:ada", "One moment, please.", "say")]
    service.send("ada", dict(E2))
    settle(clock)
    assert ada.last_tick["reason"] == "llm_error"
    assert world.said == [("char:ada", "One moment, please.", "say")]  # once
    saved = service.store.load_assistant("ada").result
    assert [e["text"] for e in saved["pending_events"]] == ["hello", "anyone?"]
    assert saved["failed_deliveries"] == 4
    _next_tick(clock)
    assert ada.last_tick["reason"] == "terminal_tool"
    assert ada.pending_events == [] and ada.failed_deliveries == 0
    assert not ada.unavailable_said and ada.status()["failed_deliveries"] == 0
    delivered = events_messages(ada.history.messages)
    assert len(delivered) == 1 and delivered[0].index("hello") < delivered[0].index("anyone?")


def test_given_back_events_keep_the_cap() -> None:
    """A batch given back while new events arrived is capped like any other (counted)."""
    hanging, again = Pending(), Pending()
    clock, service, _ = make_service(llm=ScriptedLLM([hanging, again]), loop=False,
                                     registry=make_registry())
    ada = add(service, clock, name="ada", max_pending_events=2)
    ada.pending_events.extend([dict(E1), dict(E2)])  # (queued before the service ticked)
    service.send("ada", dict(E3))  # the cap drops E1
    settle(clock)
    assert hanging.deferred is not None and ada.pending_events == []
    service.send("ada", {"type": "say", "from": "eve", "text": "still here"})
    service.stop_assistant("ada")  # E2, E3 back in front of "still here": E2 dropped
    settle(clock)
    assert again.deferred is not None  # (the next tick took them at once, for "still here")
    service.stop_assistant("ada")
    settle(clock)
    assert ada.last_tick["reason"] == "stopped_by_user"
    assert [e["text"] for e in ada.pending_events] == ["me too", "still here"]
    assert ada.status()["events_dropped"] == 2


def test_a_clean_stop_ends_loops_with_shutdown_and_keeps_the_events() -> None:
    """Stopping the service ends a loop in flight with ``shutdown`` (not an operator's
    stop), logs nothing critical, and saves the events as pending."""
    hanging = Pending()
    clock, service, _ = make_service(llm=ScriptedLLM([hanging]), loop=False,
                                     registry=make_registry(), stop_grace=1)
    ada = add(service, clock, name="ada")
    service.send("ada", dict(E1))
    settle(clock)
    assert hanging.deferred is not None and ada.ticking
    with LogCapture() as logs:
        stopped: list[Any] = []
        service.stopService().addBoth(stopped.append)
        clock.advance(1)
        settle(clock)
        clock.advance(1)
        settle(clock)
    assert stopped == [None]
    assert hanging.cancelled and not ada.ticking
    assert ada.last_tick["reason"] == "shutdown"
    assert not [e for e in logs.events if e["log_level"] is LogLevel.critical]
    saved = service.store.load_assistant("ada").result
    assert [e["text"] for e in saved["pending_events"]] == ["hello"]
    assert not events_messages(saved["history"])


def test_a_batch_in_flight_at_a_write_survives_a_kill() -> None:
    """Disabled, a message heard and an emergency flag saved while the model call is in
    flight; the process dies before the answer.  Restored from the store, the batch is
    pending in front of the later message, no ``[EVENTS]`` message dangles in the
    history, and one answer takes both, in order."""
    store_clock = task.Clock()
    store = MemoryStore(clock=store_clock)
    hanging = Pending()
    clock, service, _ = make_service(store_clock, llm=ScriptedLLM([hanging]), loop=False,
                                     registry=make_registry(), store=store)
    ada = add(service, clock, name="ada")
    service.send("ada", dict(E1))
    settle(clock)
    assert hanging.deferred is not None and ada.pending_events == []  # delivered
    service.disable("ada")
    service.send("ada", dict(E2))  # heard while the model thinks
    settle(clock)
    for saved in (store.load_assistant("ada").result, ada.to_state()):
        assert [e["text"] for e in saved["pending_events"]] == ["hello", "anyone?"]
        assert not events_messages(saved["history"]) and not saved["enabled"]
    # SIGKILL: the first service is abandoned as it is; a new one reads the store
    llm = ScriptedLLM([answer(call("say", {"text": "Hello Bob!"}, "c1"))])
    clock, again, _ = make_service(clock, llm=llm, loop=False, registry=make_registry(),
                                   store=store)
    ada = add(again, clock, name="ada")
    assert [e["text"] for e in ada.pending_events] == ["hello", "anyone?"]
    assert not events_messages(ada.history.messages) and not ada.enabled
    again.enable("ada")
    settle(clock)
    assert ada.last_tick["reason"] == "terminal_tool" and ada.pending_events == []
    delivered = events_messages(llm.requests[0]["messages"])
    assert len(delivered) == 1 and delivered[0].index("hello") < delivered[0].index("anyone?")
    saved = store.load_assistant("ada").result
    assert saved["pending_events"] == [] and len(events_messages(saved["history"])) == 1


def test_the_tool_that_speaks_is_told_when_it_has_nobody() -> None:
    """(requires_character through the real loop: refused, the model may go on)"""
    llm = ScriptedLLM([answer(call("say", {"text": "hi"}, "c1")), text("never mind")])
    ctx = make_ctx(llm)
    ctx.actor.character_id = None
    result = execute_react_loop(ctx, LoopConfig()).result
    assert result.results[0]["status"] == "no_character"
    assert result.termination_reason == TerminationReason.COMPLETED
    say = ctx.registry.get_tool("say")
    assert isinstance(say, SayTool) and say.calls == []


def test_nothing_pending_means_nothing_to_give_back() -> None:
    result = execute_react_loop(make_ctx(ScriptedLLM([LLMError("x")]))).result
    assert result.events_returned == 0


def test_a_stop_during_a_slow_save_logs_nothing_critical() -> None:
    """The service stops while a loop waits for its checkpoint on a slow disk: the tick
    ends, the loop with ``shutdown``, and no CancelledError is logged as a failure."""
    from twisted.internet import task

    from ai_tools.store.memory import MemoryStore

    class SlowStore(MemoryStore):
        slow = False

        def save_many(self, states: Any) -> Any:
            if not self.slow:
                return super().save_many(states)
            return task.deferLater(clock, 3, super().save_many, states)

    clock = task.Clock()
    store = SlowStore(clock=clock)
    llm = ScriptedLLM([answer(call("look", {}, "c1")), Pending()])
    clock, service, _ = make_service(clock, llm=llm, loop=False, registry=make_registry(),
                                     store=store, stop_grace=1)
    ada = add(service, clock, name="ada")
    service.send("ada", dict(E1))
    store.slow = True
    settle(clock)
    assert ada.ticking  # its first iteration's checkpoint waits for the disk
    with LogCapture() as logs:
        stopped: list[Any] = []
        service.stopService().addBoth(stopped.append)
        for _ in range(8):
            clock.advance(1)
            settle(clock)
    assert stopped == [None] and not ada.ticking
    assert ada.last_tick["reason"] == "shutdown"
    assert not [e for e in logs.events if e["log_level"] is LogLevel.critical], \
        [e.get("log_format") for e in logs.events]
    assert "store_errors" not in ada.counters


def test_a_tick_the_open_breaker_refused_is_no_warning_a_failed_call_is_an_error() -> None:
    """The breaker says once that the model is down; each tick it then refuses is not an
    error line of its own (a soak of an outage wrote ~1,700 of them; it is logged at
    info); a real failed attempt still is an error.  (LogCapture keeps warn and above.)"""
    llm = ScriptedLLM([LLMUnavailable("circuit open"), LLMError("down")])
    clock, service, _ = make_service(llm=llm, loop=False, registry=make_registry())
    ada = add(service, clock, name="ada")

    def tick_lines(logs: Any) -> list[Any]:
        return [e["log_level"] for e in logs.events if "Tick" in str(e.get("log_format"))
                and "with errors" in str(e.get("log_format"))]

    with LogCapture() as refused:
        service.send("ada", dict(E1))
        settle(clock)
    assert ada.last_tick["reason"] == "llm_unavailable"
    assert tick_lines(refused) == []
    with LogCapture() as failed:
        _next_tick(clock)
    assert ada.last_tick["reason"] == "llm_error"
    assert tick_lines(failed) == [LogLevel.error]


def _gave_up_service(llm: ScriptedLLM, **config: Any) -> tuple[Any, Any, World, list[Any]]:
    world = World()
    clock, service, _ = make_service(llm=llm, loop=False, registry=make_registry(),
                                     world=world)
    events: list[Any] = []
    service.add_observer(events.append)
    add(service, clock, name="ada", **config)
    return clock, service, world, events


def test_a_loop_that_took_the_message_but_never_answered_says_so_once() -> None:
    """The answer saw the player's message, then the model failed: the player hears the
    ``gave_up_line`` (and an event says why), not nothing."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), LLMError("gone")])
    clock, service, world, events = _gave_up_service(llm, gave_up_line="Say again?")
    service.send("ada", dict(E1))
    settle(clock)
    ada = service.get("ada")
    assert ada.last_tick["reason"] == "llm_error" and ada.pending_events == []
    assert world.said == [("char:ada", "Say again?", "say")]
    gave_up = [e for e in events if e["type"] == "gave_up"]
    assert [(e["text"], e["reason"]) for e in gave_up] == [("Say again?", "llm_error")]


def test_a_loop_at_its_iteration_limit_says_it_too() -> None:
    llm = ScriptedLLM([answer(call("look", {}, f"c{i}")) for i in range(3)])
    clock, service, world, _ = _gave_up_service(
        llm, gave_up_line="Say again?", execution_config={"max_iterations": 2})
    service.send("ada", dict(E1))
    settle(clock)
    assert service.get("ada").last_tick["reason"] == "max_iterations"
    assert world.said == [("char:ada", "Say again?", "say")]


def test_no_line_after_an_answer_in_the_world_nor_when_it_is_empty() -> None:
    answered = ScriptedLLM([answer(call("say", {"text": "Hello Bob!"}, "c1"))])
    clock, service, world, events = _gave_up_service(answered, gave_up_line="Say again?")
    service.send("ada", dict(E1))
    settle(clock)
    assert service.get("ada").last_tick["reason"] == "terminal_tool"
    assert not [e for e in events if e["type"] == "gave_up"]
    silent = ScriptedLLM([answer(call("look", {}, "c1")), LLMError("gone")])
    clock, service, world, events = _gave_up_service(silent, gave_up_line="")
    service.send("ada", dict(E1))
    settle(clock)
    assert service.get("ada").last_tick["reason"] == "llm_error"
    assert world.said == [] and not [e for e in events if e["type"] == "gave_up"]


def test_events_given_back_are_no_gave_up() -> None:
    """No answer saw the message (the first call failed): it waits, pending, for the next
    loop; that is the ``unavailable_line``'s case, never the ``gave_up_line``'s."""
    clock, service, world, events = _gave_up_service(
        ScriptedLLM([LLMError("down")]), gave_up_line="Say again?", unavailable_after=0)
    service.send("ada", dict(E1))
    settle(clock)
    ada = service.get("ada")
    assert ada.last_tick["reason"] == "llm_error"
    assert [e["text"] for e in ada.pending_events] == ["hello"]
    assert world.said == [] and not [e for e in events if e["type"] == "gave_up"]


@pytest.mark.parametrize("sender_key", ["sender_id", "from_id"])
def test_a_player_who_paged_is_paged_back(sender_key: str) -> None:
    """A page can come from anywhere: the line goes back as a page, once per player, and
    is said in the room only when something was said there.  The sender is found under
    the sandbox world's key (``sender_id``) as under Evennia's (``from_id``)."""
    page = {"type": "page", "from": "alice", sender_key: "char:alice", "text": "build?"}
    llm = ScriptedLLM([answer(call("look", {}, "c1")), LLMError("gone")])
    clock, service, world, _ = _gave_up_service(llm, gave_up_line="Say again?")
    service.send("ada", dict(page))
    service.send("ada", dict(page))
    settle(clock)
    assert service.get("ada").last_tick["reason"] == "llm_error"
    assert world.said == [("char:ada", "page to char:alice: Say again?", "page")]
