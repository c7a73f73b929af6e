"""The operator's endpoints: create, reconfigure, remove, stop all, emergency stop, the world."""

from __future__ import annotations

from typing import Any

import pytest

from ai_tools.service.roster import Roster
from tests.unit.service_fakes import FlakyStore
from tests.unit.web_fakes import ApiHarness, result_of


@pytest.fixture(name="api")
def api_fixture() -> ApiHarness:
    return ApiHarness()


def events_of(api: ApiHarness) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    api.service.add_observer(seen.append)
    return seen


def test_create_an_assistant(api: ApiHarness) -> None:
    """201 with its whole configuration and status; saved; it hears its character."""
    answer = api.call("POST", "/assistants", body={
        "name": "ada", "character_id": "char:alice", "persona": "You are Ada.",
        "tick_rate": 2.5, "execution_config": {"allowed_tools": ["say", "look"]}})
    assert answer.code == 201, answer
    body = answer.json
    assert body["assistant"] == "ada" and body["config"]["tick_rate"] == 2.5
    assert body["config"]["persona"] == "You are Ada." and body["config"]["model"] == "default"
    assert body["status"]["character_id"] == "char:alice"
    assert "ada" in api.service
    saved = result_of(api.service.store.load_assistant("ada"))
    assert saved["config"]["execution_config"] == {"allowed_tools": ["say", "look"]}
    api.call("POST", "/messages", body={"character": "char:bob", "kind": "page",
                                        "target": "ada", "text": "hello Ada"})
    assert api.service.get("ada").pending_events or api.loop.calls  # it heard the page
    listed = api.call("GET", "/assistants").json["assistants"]
    assert "ada" in [a["name"] for a in listed]


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"character_id": "char:alice"}, 422, "name"),
    ({"name": "ada", "tick_rate": -1}, 422, "tick_rate"),
    ({"name": "ada", "tikc_rate": 3}, 422, "tikc_rate"),
    ({"name": "ada", "model": "gpt-9"}, 422, "model"),
    ({"name": "ada", "character_id": "char:nobody"}, 422, "character_id"),
    ({"name": "ada", "character_id": "char:pip"}, 422, "character_id"),
    ({"name": "pip"}, 409, "name"),
    ({"name": "bad name!"}, 422, "name"),
    ({"name": "pip\n"}, 422, "name"),
])
def test_a_bad_creation_is_refused_and_changes_nothing(api: ApiHarness, body: Any, code: int,
                                                       field: str) -> None:
    before = api.service.names()
    answer = api.call("POST", "/assistants", body=body)
    assert answer.code == code, answer
    assert answer.json["field"] == field
    assert api.service.names() == before
    assert "ada" not in result_of(api.service.store.list_assistants())


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_s_non_standard_constants_are_refused_and_change_nothing(
        api: ApiHarness, constant: str) -> None:
    """Python's parser takes ``NaN`` and ``Infinity``; the API does not (400), so no
    half-made assistant is left to break the list and the removal."""
    before = api.service.names()
    data = b'{"name": "ada", "tick_rate": ' + constant.encode() + b"}"
    answer = api.call("POST", "/assistants", data=data,
                      headers={"Content-Type": "application/json"})
    assert answer.code == 400 and constant in answer.json["error"], answer
    change = b'{"tick_rate": ' + constant.encode() + b"}"
    patched = api.call("PATCH", "/assistants/pip", data=change,
                       headers={"Content-Type": "application/json"})
    assert patched.code == 400, patched
    overflowing = api.call("POST", "/assistants", data=b'{"name": "ada", "tick_rate": 1e999}',
                           headers={"Content-Type": "application/json"})
    assert overflowing.code == 422 and overflowing.json["field"] == "tick_rate", overflowing
    assert api.service.names() == before
    assert api.service.get("pip").config.tick_rate == 5.0
    assert api.call("GET", "/assistants").code == 200
    assert api.call("DELETE", "/assistants/pip").code == 200


def test_an_assistant_that_cannot_be_saved_is_not_added() -> None:
    """The store refuses the write: 503, and the service is as it was (no assistant
    left half-added, running unsaved); the same POST works once the store does."""
    store = FlakyStore()
    api = ApiHarness(store=store)
    before = api.service.names()
    store.failing = True
    answer = api.call("POST", "/assistants", body={"name": "ada", "character_id": "char:alice"})
    assert answer.code == 503 and "could not be saved" in answer.json["error"], answer
    assert api.service.names() == before
    assert api.call("GET", "/assistants").code == 200
    assert api.call("GET", "/assistants/ada").code == 404
    store.failing = False
    again = api.call("POST", "/assistants", body={"name": "ada", "character_id": "char:alice"})
    assert again.code == 201, again


def test_the_operator_api_creates_within_bounds(api: ApiHarness) -> None:
    """No tick_rate below the service's min_tick_rate (each tick may ask the model),
    on create and on change; no assistant past max_assistants (409)."""
    fast = api.call("POST", "/assistants", body={"name": "ada", "tick_rate": 1e-9})
    assert fast.code == 422 and fast.json["field"] == "tick_rate", fast
    assert "min_tick_rate" in fast.json["error"]
    patched = api.call("PATCH", "/assistants/pip", body={"sleep_tick_rate": 0.001})
    assert patched.code == 422 and patched.json["field"] == "sleep_tick_rate", patched
    api.service.max_assistants = 3  # pip and mason are there
    assert api.call("POST", "/assistants", body={"name": "ada"}).code == 201
    full = api.call("POST", "/assistants", body={"name": "bea"})
    assert full.code == 409 and "max_assistants" in full.json["error"], full
    assert api.service.names() == ["ada", "mason", "pip"]


def test_creation_needs_a_json_object(api: ApiHarness) -> None:
    assert api.call("POST", "/assistants", body=["ada"]).code == 400
    assert api.call("POST", "/assistants").code == 400
    assert api.call("POST", "/assistants", data=b"name=ada",
                    headers={"Content-Type": "application/x-www-form-urlencoded"}).code == 415


def test_reconfigure_keeps_memories_and_hears_the_new_character(api: ApiHarness) -> None:
    """PATCH changes the keys given; history, pending events and counters stay; the new
    character's hearing starts, the old one's ends."""
    pip = api.service.get("pip")
    pip.history.add_user("remember the chowder")
    pip.persona_override = "a tool set this"
    seen = events_of(api)
    answer = api.call("PATCH", "/assistants/pip", body={
        "tick_rate": 9.0, "persona": "You are Pip, now terse.", "character_id": "char:alice"})
    assert answer.code == 200, answer
    assert sorted(answer.json["changed"]) == ["character_id", "persona", "tick_rate"]
    assert api.service.get("pip") is pip
    assert pip.config.tick_rate == 9.0 and pip.persona == "You are Pip, now terse."
    assert pip.history.messages[-1]["content"] == "remember the chowder"
    assert any(e["type"] == "reconfigured" for e in seen)
    saved = result_of(api.service.store.load_assistant("pip"))
    assert saved["config"]["character_id"] == "char:alice"
    pip.pending_events.clear()
    api.call("POST", "/messages", body={"character": "char:bob", "kind": "page",
                                        "target": "char:alice", "text": "for alice"})
    api.call("POST", "/messages", body={"character": "char:bob", "kind": "page",
                                        "target": "char:pip", "text": "for pip"})
    texts = [e.get("text") for e in pip.pending_events]
    assert "for pip" not in texts
    assert api.call("GET", "/assistants/pip/config").json["config"]["tick_rate"] == 9.0


def test_reconfigure_enabled_applies_it_now(api: ApiHarness) -> None:
    answer = api.call("PATCH", "/assistants/pip", body={"enabled": False})
    assert answer.code == 200 and answer.json["status"]["enabled"] is False
    assert api.service.get("pip").enabled is False
    api.call("PATCH", "/assistants/pip", body={"enabled": True})
    assert api.service.get("pip").enabled is True


def test_reconfigure_with_nothing_changed_or_a_bad_key(api: ApiHarness) -> None:
    same = api.call("PATCH", "/assistants/pip", body={"tick_rate": 5.0})
    assert same.code == 200 and same.json["changed"] == []
    for body, field in [({"tick_rate": "fast"}, "tick_rate"), ({"name": "pap"}, "name"),
                        ({"model": "nope"}, "model"), ({"character_id": "char:mason"},
                                                       "character_id")]:
        answer = api.call("PATCH", "/assistants/pip", body=body)
        assert answer.code == 422 and answer.json["field"] == field, answer
    assert api.call("PATCH", "/assistants/pip", body={}).code == 422
    assert api.call("PATCH", "/assistants/nobody", body={"tick_rate": 1}).code == 404
    assert api.service.get("pip").config.tick_rate == 5.0


def test_reconfigure_stops_a_tick_in_flight_first(api: ApiHarness) -> None:
    assert api.loop is not None
    api.loop.hang()
    api.service.get("pip").pending_events.append({"type": "say", "text": "hello"})
    tick = api.service.run_tick("pip")
    api.pump()
    assert not tick.called
    answer = api.call("PATCH", "/assistants/pip", body={"tick_rate": 7.0})
    assert answer.code == 200
    assert tick.called


def test_remove_and_create_again_brings_the_memories_back(api: ApiHarness) -> None:
    api.service.get("mason").history.add_user("the shed plans")
    answer = api.call("DELETE", "/assistants/mason")
    assert answer.code == 200 and answer.json == {"assistant": "mason", "removed": True,
                                                  "forgotten": False}
    assert "mason" not in api.service
    assert result_of(Roster(api.service.store).removed()) == {"mason"}
    again = api.call("POST", "/assistants", body={"name": "mason",
                                                  "character_id": "char:mason"})
    assert again.code == 201
    assert api.service.get("mason").history.messages[-1]["content"] == "the shed plans"
    assert result_of(Roster(api.service.store).removed()) == set()


def test_remove_with_forget_deletes_the_state(api: ApiHarness) -> None:
    api.service.get("mason").history.add_user("the shed plans")
    answer = api.call("DELETE", "/assistants/mason?forget=true")
    assert answer.code == 200 and answer.json["forgotten"] is True
    assert result_of(api.service.store.load_assistant("mason")) is None
    assert api.call("DELETE", "/assistants/mason").code == 404
    assert api.call("DELETE", "/assistants/pip?forget=maybe").code == 400
    assert "pip" in api.service


def test_stop_all(api: ApiHarness) -> None:
    assert api.call("POST", "/stop").json == {"stopped": []}
    assert api.loop is not None
    api.loop.hang()
    api.service.get("pip").pending_events.append({"type": "say", "text": "hello"})
    tick = api.service.run_tick("pip")
    api.pump()
    assert api.call("POST", "/stop").json == {"stopped": ["pip"]}
    api.pump()
    assert tick.called


def test_emergency_stop_and_clear(api: ApiHarness) -> None:
    answer = api.call("POST", "/emergency-stop", body={"reason": "runaway"})
    assert answer.code == 200 and answer.json == {"emergency_stopped": ["mason", "pip"]}
    assert api.call("GET", "/assistants/pip").json["emergency_stopped"] is True
    assert api.call("POST", "/assistants/pip/tick").json["status"] != "ran"
    one = api.call("POST", "/emergency-stop/clear?assistant=pip")
    assert one.json == {"cleared": ["pip"]}
    assert api.call("GET", "/assistants/mason").json["emergency_stopped"] is True
    assert api.call("POST", "/emergency-stop/clear").json == {"cleared": ["mason"]}
    assert api.call("POST", "/emergency-stop?assistant=pip").json == {
        "emergency_stopped": ["pip"]}
    assert api.call("POST", "/emergency-stop?assistant=nobody").code == 404
    assert api.call("POST", "/emergency-stop", body={"why": "x"}).code == 422
    assert api.call("POST", "/emergency-stop", body={"reason": 3}).code == 422


def test_characters_and_rooms(api: ApiHarness) -> None:
    characters = api.call("GET", "/world/characters").json["characters"]
    by_id = {c["id"]: c for c in characters}
    assert by_id["char:pip"]["assistant"] == "pip" and by_id["char:bob"]["assistant"] is None
    assert by_id["char:pip"]["location"] == "room:inn"
    assert by_id["char:pip"]["location_key"] == "The Drowned Lantern"
    rooms = {r["id"]: r for r in api.call("GET", "/world/rooms").json["rooms"]}
    assert set(rooms) == {"room:plaza", "room:library", "room:workshop", "room:harbour",
                          "room:inn"}
    assert "char:pip" in rooms["room:inn"]["characters"]
    assert all(e["destination"] for r in rooms.values() for e in r["exits"])
    assert ApiHarness(world=False).call("GET", "/world/rooms").code == 503


def test_the_new_endpoints_follow_the_token_rule() -> None:
    api = ApiHarness(token="s3cret")
    for method, path in [("POST", "/assistants"), ("PATCH", "/assistants/pip"),
                         ("DELETE", "/assistants/pip"), ("POST", "/stop"),
                         ("POST", "/emergency-stop"), ("GET", "/world/rooms")]:
        assert api.call(method, path).code == 401
    assert "pip" in api.service


def test_an_unknown_key_names_the_near_one(api: ApiHarness) -> None:
    """A typo'd key is answered with the key it probably meant, as the config file's is."""
    created = api.call("POST", "/assistants", body={"name": "ada", "tikc_rate": 3})
    assert created.code == 422 and created.json["field"] == "tikc_rate"
    assert "did you mean 'tick_rate'?" in created.json["error"], created.json
    patched = api.call("PATCH", "/assistants/pip", body={"persnoa": "x"})
    assert patched.code == 422 and "did you mean 'persona'?" in patched.json["error"], patched
