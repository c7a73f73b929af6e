"""``POST /messages`` answers once what its hearers heard is durable, or 503; never as an assistant.

The store here holds every write until the test lets it finish, so the tests
can see what is answered before and after the hearers' state is saved.
"""

from __future__ import annotations

import gc
from typing import Any, ClassVar

from twisted.internet import defer
from twisted.logger import LogLevel, formatEvent

from ai_tools.service.assistant import AssistantConfig
from ai_tools.store.memory import MemoryStore
from tests.unit.service_fakes import FlakyStore, LogCapture
from tests.unit.web_fakes import Answer, ApiHarness, result_of

HELLO = {"character": "char:bob", "text": "Evening, Pip!"}


class HeldStore(MemoryStore):
    """A MemoryStore whose writes wait until :meth:`release` (while ``holding``)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.holding = False
        self.held: list[tuple[defer.Deferred[None], Any]] = []

    def save_many(self, states: Any) -> defer.Deferred[None]:
        if not self.holding:
            return super().save_many(states)
        d: defer.Deferred[None] = defer.Deferred()
        self.held.append((d, dict(states)))
        return d

    def release(self) -> None:
        """Let the held writes happen."""
        held, self.held = self.held, []
        for d, states in held:
            super().save_many(states).chainDeferred(d)


def saved_texts(store: MemoryStore, name: str = "pip") -> list[str]:
    state = result_of(store.load_assistant(name)) or {}
    return [e.get("text") for e in state.get("pending_events", [])]


def test_the_answer_waits_until_the_hearers_state_is_saved() -> None:
    """No 200 while Pip's state write is in flight; 200 once it is on disk."""
    store = HeldStore()
    api = ApiHarness(store=store)
    api.call("POST", "/assistants/pip/disable")  # what Pip hears stays pending
    store.holding = True
    response = api.start("POST", "/messages", body=HELLO)
    answered: list[Any] = []

    def seen(result: Any) -> Any:
        answered.append(result)
        return result

    response.addBoth(seen)
    api.pump()
    assert store.held, "the hearing asked for a write"
    assert answered == [], "answered before the event was durable"
    assert saved_texts(store) == []
    store.release()
    answer = api.finish(response)
    assert answer.code == 200 and answer.json["assistants"] == ["pip"]
    assert saved_texts(store) == ["Evening, Pip!"]


def test_one_write_carries_the_event_and_the_acknowledgement() -> None:
    """Waiting for durability costs no extra transaction: it joins the hearing's write."""
    store = FlakyStore()
    api = ApiHarness(store=store)
    before = store.writes
    assert api.call("POST", "/messages", body=HELLO).code == 200
    assert store.writes == before + 1


def test_a_write_that_fails_is_a_503_with_the_reason() -> None:
    """Disk full (or any store failure): 503 saying so, logged; the service goes on."""
    store = FlakyStore()
    api = ApiHarness(store=store)
    api.call("POST", "/assistants/pip/disable")  # what Pip hears stays pending
    store.failing = True
    with LogCapture() as logs:
        answer = api.call("POST", "/messages", body=HELLO)
    assert answer.code == 503
    assert "could not be saved" in answer.json["error"]
    assert "disk I/O error" in answer.json["error"]
    assert answer.header("retry-after") == "10"
    assert any("Could not save the state of assistants" in formatEvent(e) for e in logs.events)
    assert not [e for e in logs.events if e.get("log_failure") is not None]  # no traceback
    store.failing = False
    assert api.call("POST", "/messages", body=HELLO).code == 200
    # both events are kept (the first was only in memory until this write)
    assert saved_texts(store) == ["Evening, Pip!", "Evening, Pip!"]


class FullDisk(FlakyStore):
    """Every write fails as on a full disk while ``failing``: states and the heard log."""

    def append_heard(self, messages: Any, keep: int) -> defer.Deferred[None]:
        if self.failing:
            return defer.fail(OSError(28, "No space left on device"))
        return super().append_heard(messages, keep)


def test_a_full_disk_is_one_line_per_failure_class_and_no_unhandled_error() -> None:
    """Many posts while nothing can be written: each answers 503, and the log says each
    class of failure once (no traceback, no "Unhandled error in Deferred" when the
    heard-log write failed before the state write did); once writes work, one line
    says so."""
    store = FullDisk()
    api = ApiHarness(store=store, world_store=store)
    api.call("POST", "/assistants/pip/disable")  # what Pip hears stays pending
    store.failing = True
    with LogCapture() as logs:
        for n in range(40):
            answer = api.call("POST", "/messages", body={**HELLO, "text": f"hello {n}"})
            assert answer.code == 503, answer
        gc.collect()
        api.pump()
    assert not [e for e in logs.events if e.get("log_failure") is not None], \
        [e.get("log_format") for e in logs.events if e.get("log_failure") is not None]
    lines = [formatEvent(e) for e in logs.events]
    assert len(lines) <= 4, lines  # the state, the heard log, the answer: once each
    assert any("No space left on device" in line for line in lines), lines
    store.failing = False
    with LogCapture(level=LogLevel.info) as after:
        assert api.call("POST", "/messages", body=HELLO).code == 200
    assert any("works again" in formatEvent(e) for e in after.events)


def test_a_message_no_assistant_hears_answers_at_once() -> None:
    """Nobody to save for (Alice alone in the plaza): the answer waits for no write."""
    store = HeldStore()
    api = ApiHarness(store=store)
    store.holding = True
    answer = api.call("POST", "/messages", body={"character": "char:alice", "text": "hm"})
    assert answer.code == 200 and answer.json["assistants"] == []
    assert store.held == []


def test_the_api_does_not_speak_as_an_assistant() -> None:
    """An assistant's own character is refused (403); nothing is said."""
    api = ApiHarness()
    for kind, target in (("say", None), ("page", "char:bob")):
        body: dict[str, Any] = {"character": "char:pip", "text": "I quit.", "kind": kind}
        if target:
            body["target"] = target
        answer: Answer = api.call("POST", "/messages", body=body)
        assert answer.code == 403, answer
        assert answer.json["field"] == "character"
        assert "assistant 'pip'" in answer.json["error"]
    heard = api.call("GET", "/characters/char:bob/heard").json["messages"]
    assert heard == []


class OtherWorkers:
    """The service's ownership hook when workers share the assistants (service/leases.py)."""

    roster: ClassVar[dict[str, AssistantConfig]] = {
        "sage": AssistantConfig(name="sage", character_id="char:alice")}

    def assistant_of_character(self, character: str) -> str | None:
        return "sage" if character == "char:alice" else None


def test_the_api_does_not_speak_as_an_assistant_another_worker_runs() -> None:
    """With workers, an assistant this worker does not run is still refused as a speaker."""
    api = ApiHarness()
    api.service.ownership = OtherWorkers()
    answer: Answer = api.call("POST", "/messages",
                              body={"character": "char:alice", "text": "I quit."})
    assert answer.code == 403, answer
    assert "assistant 'sage'" in answer.json["error"]
    bob = api.call("POST", "/messages", body={"character": "char:bob", "text": "hello"})
    assert bob.code == 200, bob


# -- the service side: one durable path for every host ------------------------------------


def test_when_heard_saved_waits_for_the_hearers_only() -> None:
    """Only hearing assistants among the receivers are waited for; a store error comes
    through as itself (not wrapped)."""
    store = FlakyStore()
    api = ApiHarness(store=store)
    service = api.service
    assert result_of(service.when_heard_saved(["char:bob", "char:nobody"])) is None
    writes = store.writes
    saved = service.when_heard_saved(["char:pip", "char:bob"])
    api.pump()
    assert result_of(saved) is None
    assert store.writes == writes + 1  # Pip's state, once
    store.failing = True
    failed = service.when_heard_saved(["char:pip", "char:mason"])
    failure: list[Any] = []
    failed.addErrback(failure.append)
    api.pump()
    assert isinstance(failure[0].value, OSError)


def test_send_fails_when_its_event_could_not_be_saved() -> None:
    """The library's acknowledgement: send() fires only once the event is durable."""
    store = FlakyStore()
    api = ApiHarness(store=store)
    api.call("POST", "/assistants/pip/disable")
    store.failing = True
    sent = api.service.send("pip", "are you there?")
    outcome: list[Any] = []
    sent.addBoth(outcome.append)
    api.pump()
    assert isinstance(outcome[0].value, OSError)
    assert api.service.get("pip").counters["store_errors"] >= 1
    store.failing = False
    sent = api.service.send("pip", "again")
    api.pump()
    assert result_of(sent) is None
    assert saved_texts(store) == ["are you there?", "again"]
