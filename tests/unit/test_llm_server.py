"""One model server shared by many assistants: its slots, the fair queue, the breakers,
a request given up on, a stream the server interrupted (time on a ``task.Clock``)."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.logger import formatEvent

from ai_tools.errors import ConfigError, LLMTimeout, LLMUnavailable
from ai_tools.llm.breaker import BreakerState
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.profile import ModelProfile, Timeouts
from ai_tools.llm.server import FairSlots, ModelServer, server_key
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, ServerKind, Turn
from tests.unit.test_llm_client import Harness, logged  # noqa: F401  (a fixture)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def asked(h: Harness) -> list[str]:
    """The user message of each request the server received, in order."""
    return [r.messages[-1]["content"] for r in h.requests]


# -- the queue -----------------------------------------------------------------------------


def test_the_queue_serves_parties_in_turns() -> None:
    """One slot; alice queues three requests, then bob one: bob's goes second, not last."""
    clock = Clock()
    slots = FairSlots(clock, 1)
    got: list[str] = []
    assert slots.acquire("x").called  # the slot is free: at once
    for name in ("a1", "a2", "a3"):
        slots.acquire("alice").addCallback(lambda _, n=name: got.append(n))
    slots.acquire("bob").addCallback(lambda _: got.append("b1"))
    assert slots.waiting == 4 and slots.waiting_by_party() == {"alice": 3, "bob": 1}
    for _ in range(4):
        clock.advance(2)
        slots.release()
    assert got == ["a1", "b1", "a2", "a3"]
    assert slots.in_use == 1 and slots.waiting == 0


def test_the_queue_reports_the_wait_and_a_cancelled_waiter_leaves() -> None:
    clock = Clock()
    slots = FairSlots(clock, 1)
    slots.acquire(None)
    waits: list[float] = []
    leaving = slots.acquire("alice")
    leaving.addErrback(lambda f: f.trap(defer.CancelledError))
    slots.acquire("bob").addCallback(waits.append)
    clock.advance(7)
    leaving.cancel()
    assert slots.waiting_by_party() == {"bob": 1} and slots.oldest_wait() == 7
    slots.release()
    assert waits == [7.0] and slots.in_use == 1
    with pytest.raises(RuntimeError):
        slots.release()
        slots.release()


def test_the_queue_counts_the_slots_granted_and_their_mean_wait() -> None:
    """What the console's model-server panel shows: requests granted a slot (at once or
    after waiting) and their mean wait; a waiter that left is not counted."""
    clock = Clock()
    slots = FairSlots(clock, 1)
    assert slots.mean_wait() == 0.0
    slots.acquire("alice")
    slots.acquire("bob")
    leaving = slots.acquire("carol")
    leaving.addErrback(lambda f: f.trap(defer.CancelledError))
    clock.advance(6)
    leaving.cancel()
    slots.release()  # bob waited 6 s
    assert (slots.granted, slots.waited, slots.mean_wait()) == (2, 6.0, 3.0)
    server = ModelServer(ModelProfile.from_mapping({"base_url": "http://127.0.0.1:1/v1",
                                                    "model": "m"}), clock)
    status = server.status()
    assert status["granted"] == 0 and status["mean_wait_s"] == 0.0


def test_more_capacity_lets_waiters_in_at_once() -> None:
    clock = Clock()
    slots = FairSlots(clock, 1)
    slots.acquire(None)
    second = slots.acquire("a")
    slots.set_capacity(2)
    assert second.called and slots.in_use == 2


def test_profiles_of_one_server_share_it() -> None:
    one = ModelProfile(base_url="http://127.0.0.1:8080/v1", model="a")
    two = ModelProfile(base_url="http://127.0.0.1:8080/v1", model="b", tool_calling="fallback")
    assert server_key(one) == server_key(two) == "http://127.0.0.1:8080"
    with pytest.raises(ConfigError, match="server_slots"):
        ModelProfile(base_url="http://h/v1", model="m", server_slots=0)
    with pytest.raises(ConfigError, match="server_kind"):
        ModelProfile(base_url="http://h/v1", model="m", server_kind="kobold")


# -- slots learned, and never more sent ------------------------------------------------------


def test_llama_cpp_slots_are_learned_from_props_and_never_exceeded() -> None:
    """``/props`` says two slots: of five concurrent calls two are out at once."""
    h = Harness([Turn(text="ok", latency=5.0)] * 5)
    h.resource.server_kind = ServerKind("llama.cpp", 8192, slots=2)
    calls = [h.client.complete(ask(f"q{i}"), stream=False) for i in range(5)]
    h.pump(1.0)
    assert len(h.requests) == 2
    assert h.client.server.slots.capacity == 2 and h.client.server.slots.waiting == 3
    assert "total_slots" in h.client.server.slots_source
    answers = h.run(defer.gatherResults(calls))
    assert [a.content for a in answers] == ["ok"] * 5
    assert answers[0].queued == 0 and answers[4].queued == pytest.approx(10.0, abs=0.2)


def test_configured_slots_win_over_the_servers() -> None:
    h = Harness([Turn(text="ok", latency=5.0)] * 3, server_slots=1)
    h.resource.server_kind = ServerKind("llama.cpp", 8192, slots=4)
    calls = [h.client.complete(ask(f"q{i}"), stream=False) for i in range(3)]
    h.pump(1.0)
    assert len(h.requests) == 1 and h.client.server.slots.capacity == 1
    h.run(defer.gatherResults(calls))


def test_deadlines_start_when_the_request_is_sent() -> None:
    """Total 10 s, one slot, two answers of 8 s each: the second waits 8 s in the queue
    and still gets its answer (before, its deadline ran while it waited)."""
    h = Harness([Turn(text="one", latency=8.0), Turn(text="two", latency=8.0)],
                server_slots=1, timeouts=Timeouts(total=10.0, headers=9.0))
    first, second = h.client.complete(ask("1"), stream=False), h.client.complete(ask("2"),
                                                                                 stream=False)
    answers = h.run(defer.gatherResults([first, second]))
    assert [a.content for a in answers] == ["one", "two"]
    assert answers[1].queued == pytest.approx(8.0, abs=0.1)


def test_assistants_take_turns_at_a_one_slot_server() -> None:
    h = Harness([Turn(text="ok", latency=1.0)] * 5, server_slots=1)
    alice, bob = h.client.for_assistant("alice"), h.client.for_assistant("bob")
    assert h.client.for_assistant("alice") is alice
    calls = [alice.complete(ask("a0"), stream=False)]
    h.pump(0.1)  # a0 is out; the rest queue
    calls += [alice.complete(ask(f"a{i}"), stream=False) for i in (1, 2, 3)]
    calls.append(bob.complete(ask("b1"), stream=False))
    status = h.client.status()
    assert status["waiting"] == 4 and status["waiting_by_assistant"] == {"alice": 3, "bob": 1}
    h.run(defer.gatherResults(calls))
    assert asked(h) == ["a0", "a1", "b1", "a2", "a3"]


# -- never pay twice ---------------------------------------------------------------------------


def keeps_computing(script: Any, **profile: Any) -> Harness:
    h = Harness(script, stream=False, **profile)
    h.resource.server_kind = ServerKind("llama-cpp-python")
    return h


def test_a_whole_answer_given_up_on_keeps_its_slot_until_the_server_is_done(
        logged: list) -> None:  # noqa: F811
    """llama-cpp-python computes a whole answer to its end after the client left: the call
    ends at its deadline, but nothing else is sent (no retry, no other call) until the
    server is done with it; the connection stays open meanwhile."""
    h = keeps_computing([Turn(text="late", latency=50.0), "next"],
                        timeouts=Timeouts(total=10.0, headers=5.0))
    failures: list[Any] = []
    h.client.complete(ask("slow")).addErrback(failures.append)
    following = h.client.complete(ask("next"))
    h.pump(10.5)
    assert failures and failures[0].check(LLMTimeout)
    assert len(h.requests) == 1 and not h.requests[0].disconnected  # not resent, not dropped
    h.pump(30.0)
    assert len(h.requests) == 1 and h.client.server.slots.in_use == 1
    assert h.run(following).content == "next"
    assert asked(h) == ["slow", "next"] and h.requests[0].finished.result is True
    assert any("keeps its slot" in formatEvent(e) for e in logged)


def test_cancelling_a_whole_answer_the_server_computes_anyway_keeps_the_slot() -> None:
    h = keeps_computing([Turn(text="late", latency=20.0), "next"])
    first = h.client.complete(ask("slow"))
    first.addErrback(lambda f: f.trap(defer.CancelledError))
    following = h.client.complete(ask("next"))
    h.pump(1.0)
    first.cancel()
    h.pump(5.0)
    assert len(h.requests) == 1 and h.client.server.slots.in_use == 1
    assert h.run(following).content == "next"


def test_elsewhere_a_request_given_up_on_is_closed_and_frees_its_slot() -> None:
    """A server that stops when its client leaves (llama.cpp): the connection is closed
    at once and the next request goes out."""
    h = Harness([Turn(text="late", latency=50.0), "next"], stream=False, server_slots=1)
    first = h.client.complete(ask("slow"))
    first.addErrback(lambda f: f.trap(defer.CancelledError))
    following = h.client.complete(ask("next"))
    h.pump(1.0)
    first.cancel()
    assert h.run(following, limit=5.0).content == "next"
    assert h.requests[0].disconnected


def test_a_stream_the_server_interrupted_is_recognised_and_not_sent_into_a_storm(
        logged: list) -> None:  # noqa: F811
    """``[DONE]`` without the final chunk, then an unclean close: the server serves fewer
    at once than were sent; one less from then on, and the interrupted request waits in
    the queue for its turn (it is sent again once, not at once)."""
    h = Harness([Fault.interrupted(after_chunks=0, latency=0.5),
                 Turn(text="second", latency=3.0),
                 "first again"], discover_window=False, max_concurrency=2)
    first = h.client.complete(ask("first"))
    second = h.client.complete(ask("second"))  # both out at once: the server stops one
    answers = h.run(defer.gatherResults([first, second]))
    assert [a.content for a in answers] == ["first again", "second"]
    assert answers[0].attempts == 2
    assert h.client.server.slots.capacity == 1
    assert asked(h) == ["first", "second", "first"]
    assert any("interrupted a stream" in formatEvent(e) for e in logged)
    assert h.client.breaker is not None and h.client.breaker.consecutive_failures == 0


# -- breakers per assistant and per server --------------------------------------------------------


def test_one_assistants_failures_do_not_close_the_server_to_the_others() -> None:
    """alice's requests keep timing out (her breaker opens); bob's still go through."""
    h = Harness([Turn(text="too late", latency=100.0), "for bob"], breaker_threshold=1,
                stream=False,
                timeouts=Timeouts(headers=5.0))
    h.client = OpenAIChatClient(h.client.profile, reactor=h.clock, agent=h.stub,
                                retry_policy=RetryPolicy(max_attempts=1))
    alice, bob = h.client.for_assistant("alice"), h.client.for_assistant("bob")
    with pytest.raises(LLMTimeout):
        h.run(alice.complete(ask("a")))
    assert alice.breaker.state is BreakerState.OPEN and alice.refusal() is not None
    with pytest.raises(LLMUnavailable):
        h.run(alice.complete(ask("a again")))
    assert len(h.requests) == 1  # the refusal sent nothing
    assert h.run(bob.complete(ask("b"))).content == "for bob"
    assert h.client.server.breaker.state is BreakerState.CLOSED and bob.refusal() is None
    assert h.client.status()["assistant_breakers"] == {"alice": "open"}


def test_a_server_that_cannot_be_reached_opens_the_servers_breaker_for_all() -> None:
    class Refusing:
        def request(self, *args: Any, **kwargs: Any) -> Any:
            return defer.fail(ConnectionRefusedError("nobody home"))

    clock = Clock()
    client = OpenAIChatClient(
        ModelProfile(base_url="http://h/v1", model="m", discover_window=False,
                     breaker_threshold=2), reactor=clock, agent=Refusing(),
        retry_policy=RetryPolicy(max_attempts=1))
    alice, bob = client.for_assistant("alice"), client.for_assistant("bob")
    for view in (alice, bob):
        view.complete(ask("x")).addErrback(lambda f: None)
        clock.advance(0)
    assert client.server.breaker.state is BreakerState.OPEN
    assert isinstance(alice.refusal(), LLMUnavailable) and "model server" in str(bob.refusal())


def test_clients_of_one_server_share_it() -> None:
    clock = Clock()
    profile = ModelProfile(base_url="http://h:1/v1", model="m", server_slots=1,
                           discover_window=False)
    server = ModelServer(profile, clock)
    one = OpenAIChatClient(profile, reactor=clock, server=server)
    two = OpenAIChatClient(ModelProfile(base_url="http://h:1/v1", model="n"), reactor=clock,
                           server=server)
    assert one.server is two.server is server and server.slots.capacity == 1


# -- a tick a breaker refuses -------------------------------------------------------------------


def test_a_tick_a_breaker_refuses_makes_no_events_but_one_state_change() -> None:
    """The server failed once (threshold 1): the breaker is open for 30 s.  The ticks of
    that time run no loop and send nothing; one ``model_state`` event says the model is
    unavailable, one that it is back; the player's message waits and is answered."""
    from treq.testing import RequestTraversalAgent

    from ai_tools.llm.scripted import ScriptedModel, ScriptedModelResource
    from tests.unit.react_fakes import make_registry
    from tests.unit.service_fakes import add, make_service

    clock = Clock()
    resource = ScriptedModelResource(ScriptedModel.build(
        [Fault.server_error(500), Turn(text="Hello Bob!")]), clock)
    stub = RequestTraversalAgent(resource)
    client = OpenAIChatClient(
        ModelProfile(base_url="http://model.test/v1", model="m", discover_window=False,
                     breaker_threshold=1, breaker_cooldown=30.0, stream=False),
        reactor=clock, agent=stub, retry_policy=RetryPolicy(max_attempts=1))
    _, service, _ = make_service(clock, llm=client, loop=False, registry=make_registry())
    ada = add(service, clock, name="ada")
    events: list[dict[str, Any]] = []
    service.add_observer(events.append)

    def run_for(seconds: float) -> None:
        for _ in range(int(seconds / 0.5)):
            clock.advance(0.5)
            stub.flush()

    service.send("ada", {"type": "say", "from": "bob", "text": "hello"})
    run_for(2)
    assert client.server.breaker.state is BreakerState.OPEN and len(resource.requests) == 1
    events.clear()
    run_for(25)  # five ticks or so, all refused
    assert [e["type"] for e in events] == ["model_state"]
    assert events[0]["state"] == "unavailable" and "unavailable" in events[0]["error"]
    assert ada.model_refused and ada.pending_events and len(resource.requests) == 1
    shown = service.stats()["model_servers"]["default"]
    assert shown["breaker"] == "open" and shown["slots"] == 8 and shown["waiting"] == 0
    run_for(10)  # the cooldown is over: the next tick runs
    states = [e["state"] for e in events if e["type"] == "model_state"]
    assert states == ["unavailable", "available"] and len(resource.requests) == 2
    assert not ada.pending_events and not ada.model_refused


def test_status_at_end_is_the_default_where_the_template_takes_it() -> None:
    clock = Clock()
    profile = ModelProfile(base_url="http://h:1/v1", model="m")
    for kind, template, expected in (
            ("llama-cpp-python", None, True),
            ("llama.cpp", "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", True),
            ("llama.cpp", "{{ raise_exception('roles must alternate') }}", False),
            ("llama.cpp", None, False), ("vllm", None, False), (None, None, False)):
        server = ModelServer(profile, clock)
        server.learn(kind, None, template)
        assert server.takes_status_at_end() is expected, (kind, template)


def test_a_stream_with_tools_cut_before_its_first_chunk_is_a_refusal() -> None:
    """The server may end the refused stream uncleanly (the connection closed mid-body,
    as llama-cpp-python sometimes does): still a refusal, not "lost mid-stream"."""
    h = Harness([Fault.truncated_stream(after_chunks=0), Turn(tool_calls=[("look", {})])],
                discover_window=False)
    answer = h.run(h.client.complete(ask("x"), tools=[{"type": "function", "function": {
        "name": "look", "parameters": {"type": "object", "properties": {}}}}]))
    assert answer.tool_calls and answer.attempts == 2
    assert [r.body["stream"] for r in h.requests] == [True, False]
    assert h.client.status()["stream_tool_answers"] is False
