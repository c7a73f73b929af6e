"""Tests for the parts AssistantService is composed of (ai_tools/service/resources.py,
observers.py, hearing.py, live_roster.py, emergency.py, stopping.py): each through its
own small surface, on the service that composes it."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet import defer, task

from ai_tools.service.assistant import SLEEP
from ai_tools.service.observers import Observers
from ai_tools.service.resources import SharedResources
from ai_tools.service.service import AssistantService
from ai_tools.store.memory import MemoryStore
from tests.unit.service_fakes import add, make_service, settle


class _World:
    """A world with listeners only: what ``Hearing`` subscribes to."""

    def __init__(self) -> None:
        self.listeners: dict[str, list[Callable[[object], None]]] = {}

    def subscribe(self, char_id: str, listener: Callable[[object], None]) -> Callable[[], None]:
        self.listeners.setdefault(char_id, []).append(listener)
        return lambda: self.listeners[char_id].remove(listener)

    def say(self, char_id: str, message: object) -> None:
        for listener in list(self.listeners.get(char_id, ())):
            listener(message)


class _OpeningStore(MemoryStore):
    """A MemoryStore whose ``open`` waits for the test, and fails on demand."""

    def __init__(self, clock: task.Clock) -> None:
        super().__init__(clock=clock)
        self.openings: list[defer.Deferred[None]] = []

    def open(self) -> defer.Deferred[None]:
        d: defer.Deferred[None] = defer.Deferred()
        self.openings.append(d)
        return d


def test_a_heard_message_wakes_its_assistant_without_the_service() -> None:
    """The listener is bound to the assistant: the message is queued and the tick brought
    forward by the assistant itself (the scheduler's notify), its own words are not."""
    world = _World()
    clock, service, loop = make_service(world=world)
    ada = add(service, clock, name="ada", tick_rate=60.0)
    clock.advance(1)  # its first (idle) tick: the next one is a minute away
    settle(clock)
    due = service.scheduler.due_at("ada")
    assert due is not None and due > clock.seconds() + 30
    assert loop is not None and not loop.calls
    world.say("char:ada", {"kind": "say", "sender_id": "char:ada", "text": "me"})
    settle(clock)
    assert ada.pending_events == [] and not loop.calls
    world.say("char:ada", {"kind": "say", "sender_id": "char:bob", "text": "hi Ada"})
    assert [e["text"] for e in ada.pending_events] == ["hi Ada"]
    settle(clock)
    assert len(loop.calls) == 1  # ticked at once, a minute before its turn
    assert ada.pending_events == []


def test_a_sleeper_hears_chatter_but_wakes_only_when_addressed() -> None:
    world = _World()
    clock, service, loop = make_service(world=world)
    ada = add(service, clock, name="ada", tick_rate=60.0, sleep_tick_rate=600.0)
    ada.set_mode(SLEEP, "night", force=True)
    settle(clock)
    assert loop is not None
    calls = len(loop.calls)
    world.say("char:ada", {"kind": "say", "sender_id": "char:bob", "text": "nice weather"})
    settle(clock)
    assert len(ada.pending_events) == 1 and len(loop.calls) == calls
    world.say("char:ada", {"kind": "whisper", "sender_id": "char:bob", "text": "psst"})
    settle(clock)
    assert service.get("ada").mode != SLEEP  # woken at once by what was addressed to it


def test_a_removed_assistant_hears_nothing_more() -> None:
    world = _World()
    clock, service, _ = make_service(world=world)
    ada = add(service, clock, name="ada")
    service.remove_assistant("ada")
    settle(clock)
    assert world.listeners["char:ada"] == []
    assert service.when_heard_saved(["char:ada"]).called
    assert ada.host is None


def test_the_store_is_opened_once_for_every_caller_and_again_after_a_failure() -> None:
    clock = task.Clock()
    store = _OpeningStore(clock)
    resources = SharedResources(store=store, clock=clock)
    first, second = resources.open(), resources.open()
    assert len(store.openings) == 1 and not first.called
    store.openings[0].errback(OSError("no such file"))
    failures: list[BaseException] = []
    first.addErrback(lambda f: failures.append(f.value))
    second.addErrback(lambda f: failures.append(f.value))
    assert [str(e) for e in failures] == ["no such file"] * 2
    third = resources.open()  # tried again
    assert len(store.openings) == 2
    store.openings[1].callback(None)
    assert third.called and resources.open().called


def test_observers_of_one_assistant_and_of_all() -> None:
    clock = task.Clock()
    clock.advance(7)
    observers = Observers(lambda: clock)
    seen: list[dict[str, object]] = []
    assert not observers.observed("ada")
    remove = observers.add(seen.append, "ada")
    assert observers.observed("ada") and not observers.observed("bob")
    observers.publish("bob", {"type": "tick"})
    observers.publish("ada", {"type": "tick"})
    assert seen == [{"type": "tick", "assistant": "ada", "time": 7.0}]
    remove()
    remove()  # twice: nothing happens
    assert observers.entries == ()


def test_the_service_answers_with_its_parts() -> None:
    """The names users know are the parts' own (no call between)."""
    clock, service, _ = make_service()
    add(service, clock, name="ada")
    assert service.get("ada") is service.roster.get("ada")
    assert service.names() == service.roster.names() == ["ada"]
    assert service.llm_for("default") is service.resources.models["default"]
    assert "ada" in service and len(service.roster) == 1
    service.emergency_stop(reason="drill")
    assert service.everything_stopped and service.emergency.everything_stopped
    assert service.clear_emergency_stop() == ["ada"]
    assert not service.everything_stopped


def test_stopping_a_service_never_started_makes_none_of_its_parts() -> None:
    """Nothing ran: no timer, writer or approval board is made just to be stopped."""
    clock = task.Clock()
    service = AssistantService(store=MemoryStore(clock=clock), clock=clock)
    done: list[object] = []
    service.stopService().addBoth(done.append)
    assert done == [None]
    assert (service._scheduler, service._writer, service._approvals) == (None, None, None)


def test_restore_assistant_brings_back_a_saved_one() -> None:
    """The control API's ``restore_assistant`` (the roster's ``restore``) is still there."""
    clock, service, _ = make_service(loop=False)
    add(service, clock, name="ada")
    service.remove_assistant("ada")
    settle(clock)
    assert "ada" not in service.names()
    restored = service.restore_assistant("ada")
    settle(clock)
    assert restored.result is True and "ada" in service.names()
    missing = service.restore_assistant("nobody")
    settle(clock)
    assert missing.result is False
