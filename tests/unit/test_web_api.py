"""The HTTP API's resources (StubTreq, a service on a Clock, the example world)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from twisted.internet import defer

from tests.unit.web_fakes import ApiHarness


@pytest.fixture(name="api")
def api_fixture() -> ApiHarness:
    """The harness, no token."""
    return ApiHarness()


def test_index_lists_every_endpoint(api: ApiHarness) -> None:
    """GET / names the service, its assistants and every route."""
    answer = api.call("GET", "/")
    assert answer.code == 200
    assert answer.header("content-type") == "application/json"
    assert answer.json["assistants"] == ["mason", "pip"]
    paths = {(e["method"], e["path"]) for e in answer.json["endpoints"]}
    assert ("POST", "/messages") in paths
    assert ("GET", "/events") in paths
    assert ("POST", "/assistants/{name}/tick") in paths


def test_list_and_one_status(api: ApiHarness) -> None:
    """GET /assistants gives every status; /assistants/{name} one, with counters and cache."""
    answer = api.call("GET", "/assistants")
    assert answer.code == 200
    assert [a["name"] for a in answer.json["assistants"]] == ["mason", "pip"]
    assert answer.json["service"]["assistants"] == 2
    one = api.call("GET", "/assistants/pip")
    assert one.code == 200
    assert one.json["name"] == "pip"
    assert one.json["character_id"] == "char:pip"
    assert "counters" in one.json and "cache" in one.json
    assert api.call("GET", "/assistants/pip/").code == 200  # trailing slash


def test_unknown_assistant_is_404_everywhere(api: ApiHarness) -> None:
    """Each per-assistant endpoint answers 404 naming the field for an unknown name."""
    for method, path in [("GET", "/assistants/nobody"), ("GET", "/assistants/nobody/history"),
                         ("GET", "/assistants/nobody/results"),
                         ("POST", "/assistants/nobody/tick"),
                         ("POST", "/assistants/nobody/stop"),
                         ("POST", "/assistants/nobody/enable"),
                         ("POST", "/assistants/nobody/disable"),
                         ("GET", "/events?assistant=nobody")]:
        answer = api.call(method, path)
        assert answer.code == 404, (method, path, answer)
        assert answer.json["field"] == "assistant"
        assert "nobody" in answer.json["error"]


def test_percent_encoded_names(api: ApiHarness) -> None:
    """Path segments are percent-decoded (character ids hold a colon)."""
    api.call("POST", "/messages", body={"character": "char:bob", "text": "hi"})
    answer = api.call("GET", "/characters/char%3Apip/heard")
    assert answer.code == 200
    assert [m["text"] for m in answer.json["messages"]] == ["hi"]


def test_history_with_limit(api: ApiHarness) -> None:
    """History is the last ``limit`` messages (default 50) with the total."""
    for i in range(3):
        api.service.get("pip").history.add_user(f"message {i}")
    answer = api.call("GET", "/assistants/pip/history?limit=2")
    assert answer.code == 200
    assert answer.json["total"] == 3
    assert [m["content"] for m in answer.json["messages"]] == ["message 1", "message 2"]
    assert len(api.call("GET", "/assistants/pip/history").json["messages"]) == 3
    assert api.call("GET", "/assistants/pip/history?limit=0").json["messages"] == []


def test_history_pages_back_and_forward(api: ApiHarness) -> None:
    """before= pages back from a message the client has, after= forward; each message has
    its index; has_more says whether there is more that way."""
    for i in range(25):
        api.service.get("pip").history.add_user(f"m{i}")

    def page(query: str) -> Any:
        answer = api.call("GET", f"/assistants/pip/history?{query}")
        assert answer.code == 200, answer
        return answer.json

    newest = page("limit=10")
    assert [m["index"] for m in newest["messages"]] == list(range(15, 25))
    assert newest["first_index"] == 15 and newest["has_more"] and newest["total"] == 25
    older = page("limit=10&before=15")
    assert [m["content"] for m in older["messages"]] == [f"m{i}" for i in range(5, 15)]
    oldest = page("limit=10&before=5")
    assert [m["index"] for m in oldest["messages"]] == [0, 1, 2, 3, 4]
    assert not oldest["has_more"]
    forward = page("limit=10&after=19")
    assert [m["index"] for m in forward["messages"]] == [20, 21, 22, 23, 24]
    assert not forward["has_more"]
    assert page("after=24")["messages"] == [] and page("before=0")["messages"] == []
    assert page("limit=3&after=2")["has_more"]
    assert "index" not in api.service.history("pip")[0]  # the history itself is untouched
    both = api.call("GET", "/assistants/pip/history?before=3&after=1")
    assert both.code == 400 and both.json["field"] == "before"


@pytest.mark.parametrize("query", ["limit=x", "limit=-1", "limit=1001", "limit=1.5",
                                   "before=-1", "after=y"])
def test_bad_limit_is_400(api: ApiHarness, query: str) -> None:
    """A limit that is not an integer in range names the field."""
    answer = api.call("GET", f"/assistants/pip/history?{query}")
    assert answer.code == 400
    assert answer.json["field"] == query.split("=")[0]


def test_tick_answers_with_the_tick_result(api: ApiHarness) -> None:
    """POST tick runs the tick and answers with its result."""
    api.service.get("pip").history.add_user("hello")
    api.service.send("pip", {"type": "say", "text": "hello"})
    answer = api.call("POST", "/assistants/pip/tick")
    assert answer.code == 200
    assert answer.json["assistant"] == "pip"
    assert answer.json["status"] in ("ran", "idle")
    assert answer.json["tick"] >= 1


def test_a_long_tick_does_not_block_and_stop_ends_it(api: ApiHarness) -> None:
    """While a tick hangs other requests are served; POST stop ends it (stopped_by_user)."""
    assert api.loop is not None
    api.loop.hang()
    api.service.get("pip").pending_events.append({"type": "say", "text": "hello"})
    pending = api.start("POST", "/assistants/pip/tick")
    got: list[Any] = []

    def arrived(response: Any) -> Any:
        got.append(response)
        return response

    pending.addCallback(arrived)
    api.pump()
    assert got == []
    status = api.call("GET", "/assistants/pip")
    assert status.code == 200 and status.json["ticking"] is True
    stopped = api.call("POST", "/assistants/pip/stop")
    assert stopped.json == {"assistant": "pip", "stopped": True}
    answer = api.finish(pending)
    assert answer.code == 200
    assert api.call("GET", "/assistants/pip").json["ticking"] is False
    again = api.call("POST", "/assistants/pip/stop")
    assert again.json["stopped"] is False


def test_enable_and_disable(api: ApiHarness) -> None:
    """disable/enable flip the flag (and answer once saved)."""
    answer = api.call("POST", "/assistants/mason/disable")
    assert answer.json == {"assistant": "mason", "enabled": False}
    assert api.service.get("mason").enabled is False
    answer = api.call("POST", "/assistants/mason/enable")
    assert answer.json == {"assistant": "mason", "enabled": True}
    assert api.service.get("mason").enabled is True


def test_results_fold_loop_events(api: ApiHarness) -> None:
    """GET results holds the loops seen in the service's events, with tool calls."""
    publish = api.service.publish
    publish("pip", {"type": "iteration", "iteration": 1})
    publish("pip", {"type": "tool_result", "tool": "look", "status": "success",
                    "success": True, "duration_ms": 3.5, "from_cache": True, "iteration": 1})
    publish("pip", {"type": "termination", "reason": "terminal_tool", "success": True,
                    "iterations": 1, "duration_ms": 9.0, "error": None})
    publish("pip", {"type": "tick", "tick": 7})
    answer = api.call("GET", "/assistants/pip/results")
    assert answer.code == 200
    [loop] = answer.json["loops"]
    assert loop["termination_reason"] == "terminal_tool"
    assert loop["tick"] == 7
    assert loop["tool_calls"][0]["tool"] == "look"
    assert loop["tool_calls"][0]["from_cache"] is True
    assert api.call("GET", "/assistants/mason/results").json["loops"] == []


# -- messages ---------------------------------------------------------------------------


def test_say_reaches_the_assistant_in_the_room_as_a_pending_event(api: ApiHarness) -> None:
    """Bob speaks in the inn: Pip hears it (pending event); Mason, elsewhere, does not."""
    api.call("POST", "/assistants/pip/disable")  # keep the event pending
    api.call("POST", "/assistants/mason/disable")
    answer = api.call("POST", "/messages",
                      body={"character": "char:bob", "text": "A bowl of soup, Pip?"})
    assert answer.code == 200
    assert answer.json["heard_by"] == ["char:pip"]
    assert answer.json["assistants"] == ["pip"]
    [event] = api.service.get("pip").pending_events
    assert event["text"] == "A bowl of soup, Pip?"
    assert event["sender_id"] == "char:bob"
    assert api.service.get("mason").pending_events == []
    heard = api.call("GET", "/characters/char:pip/heard").json["messages"]
    assert heard[-1]["line"] == 'Bob says, "A bowl of soup, Pip?"'


def test_whisper_to_an_assistant_by_name_and_page(api: ApiHarness) -> None:
    """A whisper target may be an assistant's name; a page reaches anywhere."""
    api.call("POST", "/assistants/pip/disable")
    api.call("POST", "/assistants/mason/disable")
    answer = api.call("POST", "/messages", body={
        "character": "char:bob", "text": "psst", "kind": "whisper", "target": "pip"})
    assert answer.code == 200
    assert answer.json["target"] == "char:pip"
    assert api.service.get("pip").pending_events[-1]["kind"] == "whisper"
    answer = api.call("POST", "/messages", body={
        "character": "char:bob", "text": "come to the inn", "kind": "page",
        "target": "char:mason"})
    assert answer.code == 200
    assert answer.json["assistants"] == ["mason"]


def test_pose_and_channel(api: ApiHarness) -> None:
    """Poses go to the room, channel posts to the subscribers."""
    answer = api.call("POST", "/messages", body={
        "character": "char:bob", "text": "waves", "kind": "pose"})
    assert answer.json["heard_by"] == ["char:pip"]
    answer = api.call("POST", "/messages", body={
        "character": "char:alice", "text": "need a shed", "kind": "channel",
        "target": "builders"})
    assert answer.code == 200
    assert answer.json["assistants"] == ["mason"]


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"text": "hi"}, 422, "character"),
    ({"character": "char:bob"}, 422, "text"),
    ({"character": "char:bob", "text": ""}, 422, "text"),
    ({"character": "char:bob", "text": "   "}, 422, "text"),
    ({"character": "char:bob", "text": 5}, 422, "text"),
    ({"character": ["char:bob"], "text": "hi"}, 422, "character"),
    ({"character": "char:bob", "text": "x" * 4001}, 422, "text"),
    ({"character": "char:bob", "text": "hi", "kind": "shout"}, 422, "kind"),
    ({"character": "char:bob", "text": "hi", "kind": 3}, 422, "kind"),
    ({"character": "char:bob", "text": "hi", "target": "char:pip"}, 422, "target"),
    ({"character": "char:bob", "text": "hi", "kind": "whisper"}, 422, "target"),
    ({"character": "char:bob", "text": "hi", "txt": "typo"}, 422, "txt"),
    ({"character": "char:nobody", "text": "hi"}, 404, "character"),
    ({"character": "room:inn", "text": "hi"}, 404, "character"),
    ({"character": "char:bob", "text": "hi", "kind": "whisper", "target": "ghost"},
     404, "target"),
    ({"character": "char:bob", "text": "hi", "kind": "whisper", "target": "char:mason"},
     422, "target"),
    ({"character": "char:bob", "text": "hi", "kind": "channel", "target": "nochannel"},
     404, "target"),
])
def test_bad_messages(api: ApiHarness, body: dict[str, Any], code: int, field: str) -> None:
    """Each wrong field gets its status and names the field; the service keeps serving."""
    answer = api.call("POST", "/messages", body=body)
    assert answer.code == code, answer
    assert answer.json["field"] == field
    assert answer.json["status"] == code
    assert api.call("GET", "/").code == 200


def test_whisper_to_oneself_is_422(api: ApiHarness) -> None:
    """The world's own refusals (ValueError) become 422."""
    answer = api.call("POST", "/messages", body={
        "character": "char:bob", "text": "hi", "kind": "whisper", "target": "char:bob"})
    assert answer.code == 422
    assert "itself" in answer.json["error"]


def test_permission_refusal_is_403(api: ApiHarness) -> None:
    """A channel the speaker may not post on is 403."""
    api.world._channels["builders"].send_permission = "Admin"  # type: ignore[union-attr]
    answer = api.call("POST", "/messages", body={
        "character": "char:alice", "text": "hi", "kind": "channel", "target": "builders"})
    assert answer.code == 403


@pytest.mark.parametrize(("data", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b"", "empty"),
    (b"[1, 2]", "JSON object"),
    (b'"text"', "JSON object"),
    (b"\xff\xfe", "UTF-8"),
])
def test_bad_bodies_are_400(api: ApiHarness, data: bytes, fragment: str) -> None:
    """Bodies that are not a JSON object are 400 with a JSON error."""
    answer = api.call("POST", "/messages", data=data,
                      headers={"Content-Type": "application/json"})
    assert answer.code == 400
    assert fragment in answer.json["error"]
    assert api.call("GET", "/assistants").code == 200


def test_oversized_body_is_413_without_the_site(api: ApiHarness) -> None:
    """Even under a plain Site (no LimitedRequest), the handler refuses a body over the limit."""
    small = ApiHarness(max_body=100)
    answer = small.call("POST", "/messages",
                        body={"character": "char:bob", "text": "x" * 200})
    assert answer.code == 413
    assert "100 bytes" in answer.json["error"]
    assert small.call("GET", "/").code == 200


def test_wrong_method_is_405_with_allow(api: ApiHarness) -> None:
    """A known path with the wrong method is 405 and says which methods work."""
    answer = api.call("PUT", "/assistants/pip")
    assert answer.code == 405
    assert answer.header("allow") == "DELETE, GET, PATCH"
    answer = api.call("GET", "/assistants/pip/tick")
    assert answer.code == 405
    assert answer.header("allow") == "POST"
    assert api.call("GET", "/messages").code == 405
    assert api.call("GET", "/").code == 200


def test_unknown_path_is_404(api: ApiHarness) -> None:
    """No route: 404, pointing at GET /."""
    answer = api.call("GET", "/nothing/here")
    assert answer.code == 404
    assert "GET /" in answer.json["error"]


def test_heard_limit_after_and_unknown(api: ApiHarness) -> None:
    """The hearing log honours limit and after; an unknown character is 404."""
    for text in ("one", "two", "three"):
        api.call("POST", "/messages", body={"character": "char:bob", "text": text})
    messages = api.call("GET", "/characters/char:pip/heard").json["messages"]
    assert [m["text"] for m in messages] == ["one", "two", "three"]
    assert [m["text"] for m in api.call(
        "GET", "/characters/char:pip/heard?limit=1").json["messages"]] == ["three"]
    after = messages[0]["seq"]
    assert [m["text"] for m in api.call(
        "GET", f"/characters/char:pip/heard?after={after}").json["messages"]] == ["two",
                                                                                  "three"]
    answer = api.call("GET", "/characters/char:ghost/heard")
    assert answer.code == 404 and answer.json["field"] == "character"
    assert api.call("GET", "/characters/char:pip/heard?after=x").json["field"] == "after"


def test_without_a_world_messages_are_503() -> None:
    """A service without a world says so instead of failing."""
    api = ApiHarness(world=False)
    answer = api.call("POST", "/messages", body={"character": "char:bob", "text": "hi"})
    assert answer.code == 503
    assert api.call("GET", "/characters/char:bob/heard").code == 503
    assert api.call("GET", "/assistants").code == 200


def test_internal_errors_are_500_json_and_logged(api: ApiHarness,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in a handler is a 500 JSON answer (no traceback sent); serving goes on."""
    from twisted.logger import globalLogPublisher

    logged: list[Any] = []

    def observer(event: Any) -> None:
        logged.append(event)

    globalLogPublisher.addObserver(cast(Any, observer))

    def broken(name: str | None = None) -> Any:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(api.service, "status", broken)
    try:
        answer = api.call("GET", "/assistants")
    finally:
        globalLogPublisher.removeObserver(cast(Any, observer))
    assert answer.code == 500
    assert answer.json["error"] == "internal error: RuntimeError"
    assert b"secret detail" not in answer.body
    assert any(e.get("log_failure") is not None for e in logged)
    monkeypatch.undo()
    assert api.call("GET", "/assistants").code == 200


def test_a_failing_tick_deferred_is_500(api: ApiHarness,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Deferred that fails (not raises) is answered too."""
    monkeypatch.setattr(api.service, "run_tick",
                        lambda name: defer.fail(RuntimeError("tick broke")))
    answer = api.call("POST", "/assistants/pip/tick")
    assert answer.code == 500


def test_a_client_gone_before_the_answer_is_not_written_to(
        api: ApiHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tick whose client disconnected finishes without writing to a dead request."""
    writes: list[int] = []
    real_write = api.resource._write

    def counting_write(request: Any, status: int, body: Any) -> None:
        writes.append(status)
        real_write(request, status, body)

    monkeypatch.setattr(api.resource, "_write", counting_write)
    tick: defer.Deferred[Any] = defer.Deferred()
    api.service.run_tick = lambda name: tick  # type: ignore[method-assign]
    pending = api.start("POST", "/assistants/pip/tick")
    api.pump()
    pending.addErrback(lambda f: None)
    pending.cancel()  # the client gives up: the connection closes
    api.pump()
    tick.callback(type("R", (), {"as_dict": lambda self: {"ok": True}})())
    api.pump()
    assert writes == []
    assert api.call("GET", "/").code == 200
    assert writes == [200]



def test_head_is_get_without_a_body_but_not_for_events(api: ApiHarness) -> None:
    """HEAD works where GET does; HEAD /events would never end, so it is 405."""
    answer = api.call("HEAD", "/assistants/pip")
    assert answer.code == 200 and answer.body == b""
    assert api.call("HEAD", "/events").code == 405
    assert api.resource.streams == set()
