"""Passing API requests on to the worker that runs an assistant: the forwarder's bounds
(deadline, bytes, an unreachable worker) and what a worker's API answers about an
assistant it does not run (forwarded, from the database, 503 with Retry-After, 404);
the whole service in one event stream (the other workers' streams followed).

No network: the other worker is a resource behind StubTreq, a dead one a MemoryReactorClock
whose connection attempts fail; deadlines run on a task.Clock."""

from __future__ import annotations

import json
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.internet import defer, task
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.client import Agent
from twisted.web.resource import Resource

from ai_tools.llm.transport import http_client
from ai_tools.service.assistant import Assistant, AssistantConfig
from ai_tools.web.event_hub import assistants_by_character
from ai_tools.web.forwarding import FORWARDED_HEADER, EventFeed, Forwarder, ForwardingError
from ai_tools.web.limits import HttpLimits
from ai_tools.web.worker_auth import SIGNATURE_HEADER, SIGNATURE_VALIDITY, WorkerSigner
from tests.unit.test_web_sse import Stream
from tests.unit.web_fakes import ApiHarness, FakeRequest, result_of


class OtherWorker(Resource):
    """The other worker's API: answers as ``mode`` says, and keeps what it was sent."""

    isLeaf = True

    def __init__(self, mode: str = "json", size: int = 0) -> None:
        super().__init__()
        self.mode = mode
        self.size = size
        self.seen: list[tuple[bytes, bytes, dict[bytes, bytes | None], bytes]] = []
        self.streaming: Any = None
        self.stream_gone = False

    def render(self, request: Any) -> bytes | int:
        headers = {name: request.getHeader(name) for name in (
            b"authorization", FORWARDED_HEADER, b"content-type", SIGNATURE_HEADER)}
        self.seen.append((request.method, request.uri, headers, request.content.read()))
        if self.mode == "silent":
            return server.NOT_DONE_YET
        if self.mode == "stream":
            request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
            request.write(b'event: hello\ndata: {"assistant": "tess"}\n\n')
            self.streaming = request
            request.notifyFinish().addErrback(lambda _: setattr(self, "stream_gone", True))
            return server.NOT_DONE_YET
        if self.mode == "dribble":
            request.write(b'{"name": ')
            return server.NOT_DONE_YET
        if self.mode == "huge":
            return b'"' + b"x" * self.size + b'"'
        if self.mode == "text":
            return b"<html>proxy error</html>"
        if self.mode == "busy":
            request.setResponseCode(503)
            request.setHeader(b"retry-after", b"7")
            return json.dumps({"error": "busy", "status": 503}).encode()
        path = request.uri.decode().split("?")[0]
        if path == "/assistants":
            return json.dumps({"assistants": [{"name": "tess", "worker": "w2"}]}).encode()
        if path == "/stop":
            return json.dumps({"stopped": ["tess"]}).encode()
        if path == "/approvals":
            return json.dumps({"approvals": [{"id": "feed0001", "assistant": "tess",
                                              "tool": "dig"}]}).encode()
        return json.dumps({"name": "tess", "worker": "w2", "path": path}).encode()


def refusing() -> tuple[MemoryReactorClock, Any]:
    """A client over a MemoryReactorClock, and that reactor (fail its connections with
    :func:`refuse`): a worker that died."""
    reactor = MemoryReactorClock()
    return reactor, http_client(Agent(reactor))


def refuse(reactor: MemoryReactorClock) -> None:
    """Every connection attempt made so far is refused (the endpoint says so at its
    next attempt, 0.3 s later)."""
    reactor.advance(0)
    for _, _, factory, _, _ in reactor.tcpClients:
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
    reactor.tcpClients.clear()
    reactor.advance(0.3)


# -- the forwarder ------------------------------------------------------------------------


def forwarder(resource: Resource, clock: task.Clock, **options: Any) -> tuple[Forwarder,
                                                                               StubTreq]:
    stub = StubTreq(resource)
    return Forwarder(clock, client=stub, **options), stub


def outcome(d: defer.Deferred[Any]) -> Any:
    """What ``d`` fired with (a Failure too), or None; call it once."""
    box: list[Any] = []
    d.addBoth(box.append)
    return box[0] if box else None


TOKEN = "s3cret-token-0123"


def test_a_forwarded_request_carries_a_signature_never_the_token() -> None:
    """Method, path with query and body reach the other worker, with the header saying
    it was passed on and a signature of them; an Authorization given is never sent (a
    worker's address comes from the database); its JSON answer comes back."""
    owner, clock = OtherWorker(), task.Clock()
    signer = WorkerSigner.for_token(TOKEN.encode(), clock.seconds)
    forward, stub = forwarder(owner, clock, signer=signer)
    d = forward.forward("POST", "http://w2.test:8080/assistants/tess/tick?x=1",
                        {b"authorization": b"Bearer t0k", b"content-type": b"application/json"},
                        b"{}")
    stub.flush()
    status, answer, passed = result_of(d)
    assert status == 200 and passed == {} and answer["path"] == "/assistants/tess/tick"
    method, uri, seen, body = owner.seen[0]
    assert (method, uri, body) == (b"POST", b"/assistants/tess/tick?x=1", b"{}")
    assert seen[b"authorization"] is None and seen[FORWARDED_HEADER] == b"1"
    assert seen[SIGNATURE_HEADER] == signer.sign(b"POST", b"/assistants/tess/tick?x=1", b"{}")
    assert TOKEN.encode() not in seen[SIGNATURE_HEADER]
    assert clock.getDelayedCalls() == []  # the deadline is cancelled once answered


@pytest.mark.parametrize("url", ["http://[::1]:1/assistants", "http://a b:1/x"])
def test_a_url_the_http_client_cannot_encode_is_an_unreachable_worker(url: str) -> None:
    """treq raises at once for such a URL: the forwarder fails its Deferred with a 503
    instead (a worker that cannot be reached), for answers and for streams."""
    clock = task.Clock()
    forward, _ = forwarder(OtherWorker(), clock)
    failure = outcome(forward.forward("GET", url, {}))
    assert isinstance(failure, Failure) and failure.check(ForwardingError)
    assert failure.value.status == 503 and "cannot be reached" in failure.value.message
    relayed = outcome(forward.relay(FakeRequest(), url, {}))
    assert isinstance(relayed, Failure) and relayed.value.status == 503
    assert clock.getDelayedCalls() == []


def signed(api: ApiHarness, method: str, path: str, body: bytes = b"", *,
           token: str = TOKEN, skew: float = 0.0, sent_path: str | None = None,
           sent_body: bytes | None = None) -> Any:
    """``api`` asked as another worker would: signed for ``method path body``
    (``sent_path``, ``sent_body``: what is sent instead, after signing)."""
    clock = task.Clock()
    clock.advance(api.clock.seconds() + skew)
    header = WorkerSigner.for_token(token.encode(), clock.seconds).sign(
        method.encode(), path.encode(), body)
    sent_path = path if sent_path is None else sent_path
    data = body if sent_body is None else sent_body
    headers = {"X-AI-Tools-Worker-Signature": header.decode(), "X-AI-Tools-Forwarded": "1"}
    if data:
        headers["Content-Type"] = "application/json"
    return api.call(method, sent_path, data=data or None, headers=headers)


def test_a_worker_signature_is_accepted_in_place_of_the_token_and_checked() -> None:
    """The receiving worker checks the signature: method, target, body and time; a
    signature made with another token, tampered with, or too old is a 401."""
    api = ApiHarness(token=TOKEN)
    api.clock.advance(1_000_000)
    assert signed(api, "GET", "/assistants?x=1").code == 200
    assert signed(api, "POST", "/assistants/pip/disable", b"{}").code == 200
    refused = [
        signed(api, "GET", "/assistants", token="another-token-4567"),
        signed(api, "GET", "/assistants", sent_path="/assistants/pip"),
        signed(api, "POST", "/assistants/pip/enable", b"{}", sent_body=b'{ }'),
        signed(api, "GET", "/assistants", skew=-SIGNATURE_VALIDITY - 1),
        signed(api, "GET", "/assistants", skew=SIGNATURE_VALIDITY + 1),
    ]
    assert [answer.code for answer in refused] == [401] * 5, refused
    assert "worker signature" in refused[0].json["error"]
    assert "older or newer" in refused[3].json["error"]
    assert api.service.get("pip").enabled is False  # the tampered enable did nothing
    for bad in ("t=\u00b2\u00b3;sig=00", "t=1;sig", "garbage", "t=" + "9" * 40):
        answer = api.call("GET", "/assistants", headers={"X-AI-Tools-Worker-Signature": bad})
        assert answer.code == 401, (bad, answer)


def test_a_forwarder_s_signature_passes_the_other_worker_s_check() -> None:
    """End to end: what one worker's forwarder signs, the other worker's API accepts
    (same token); with another token it refuses."""
    w2 = ApiHarness(token=TOKEN)
    for token, expected in ((TOKEN, 200), ("another-token-4567", 401)):
        signer = WorkerSigner.for_token(token.encode(), w2.clock.seconds)
        stub = StubTreq(w2.resource)
        forward = Forwarder(w2.clock, client=stub, signer=signer)
        d = forward.forward("POST", "http://127.0.0.1/assistants/pip/disable",
                            {b"content-type": b"application/json"}, b"{}")
        for _ in range(3):
            stub.flush()
            w2.pump()
        status, answer, _ = result_of(d)
        assert status == expected, answer


@pytest.mark.parametrize("mode", ["silent", "dribble"])
def test_a_worker_that_does_not_answer_in_time_is_503(mode: str) -> None:
    """No headers, or a body that stops coming: past ``timeout`` the request is given up
    (503, so the caller may try again)."""
    clock = task.Clock()
    forward, stub = forwarder(OtherWorker(mode), clock, timeout=3.0)
    d = forward.forward("GET", "http://w2.test/assistants/tess", {})
    stub.flush()
    assert not d.called
    clock.advance(3.0)
    stub.flush()
    failure = outcome(d)
    assert isinstance(failure, Failure) and failure.check(ForwardingError)
    assert failure.value.status == 503 and "did not answer within 3s" in failure.value.message


def test_an_answer_larger_than_the_bound_is_refused() -> None:
    """The body is counted as it arrives; past ``max_bytes`` it is aborted: 502."""
    clock = task.Clock()
    forward, stub = forwarder(OtherWorker("huge", size=5000), clock, max_bytes=4096)
    d = forward.forward("GET", "http://w2.test/assistants/tess/history", {})
    stub.flush()
    failure = outcome(d)
    assert isinstance(failure, Failure) and failure.value.status == 502
    assert "larger than 4096 bytes" in failure.value.message


def test_an_answer_within_the_bound_passes() -> None:
    clock = task.Clock()
    forward, stub = forwarder(OtherWorker("huge", size=4000), clock, max_bytes=4096)
    d = forward.forward("GET", "http://w2.test/x", {})
    stub.flush()
    assert result_of(d)[1] == "x" * 4000


def test_an_answer_that_is_not_json_is_502() -> None:
    clock = task.Clock()
    forward, stub = forwarder(OtherWorker("text"), clock)
    d = forward.forward("GET", "http://w2.test/assistants/tess", {})
    stub.flush()
    failure = outcome(d)
    assert isinstance(failure, Failure) and failure.value.status == 502


def test_a_dead_worker_is_503() -> None:
    """Its connection refused: 503 naming it, at once (no deadline left running)."""
    reactor, client = refusing()
    clock = task.Clock()
    forward = Forwarder(clock, client=client)
    d = forward.forward("GET", "http://127.0.0.1:9/assistants/tess", {})
    refuse(reactor)
    failure = outcome(d)
    assert isinstance(failure, Failure) and failure.value.status == 503
    assert "cannot be reached" in failure.value.message
    assert clock.getDelayedCalls() == []


def test_the_other_workers_error_status_and_retry_after_come_back() -> None:
    clock = task.Clock()
    forward, stub = forwarder(OtherWorker("busy"), clock)
    d = forward.forward("POST", "http://w2.test/assistants/tess/tick", {})
    stub.flush()
    status, answer, headers = result_of(d)
    assert (status, answer["error"], headers) == (503, "busy", {"retry-after": "7"})


def test_an_event_stream_is_relayed_as_it_comes_and_closed_when_silent() -> None:
    """The other worker's frames reach our client as they come; our client's flow
    control is registered; a stream silent for ``stream_idle`` is closed."""
    owner, clock = OtherWorker("stream"), task.Clock()
    forward, stub = forwarder(owner, clock, stream_idle=30.0)
    request = FakeRequest()
    d = forward.relay(request, "http://w2.test/events?assistant=tess", {})
    stub.flush()
    ended = result_of(d)
    assert request.code == 200
    assert request.headers[b"content-type"].startswith(b"text/event-stream")
    assert request.producer is not None
    owner.streaming.write(b"event: later\ndata: {}\n\n")
    stub.flush()
    assert [e["event"] for e in request.events()] == ["hello", "later"]
    clock.advance(29.0)
    assert not request.finished
    owner.streaming.write(b": keep-alive\n\n")  # progress extends the deadline
    stub.flush()
    clock.advance(29.0)
    assert not request.finished
    clock.advance(1.0)
    stub.flush()
    assert request.finished and ended.called and owner.stream_gone


def test_a_relayed_stream_stops_when_our_client_goes() -> None:
    owner, clock = OtherWorker("stream"), task.Clock()
    forward, stub = forwarder(owner, clock)
    request = FakeRequest()
    ended = result_of(forward.relay(request, "http://w2.test/events", {}))
    stub.flush()
    request.finish()  # our client went away
    stub.flush()
    assert ended.called and owner.stream_gone
    assert clock.getDelayedCalls() == []


def test_a_relayed_stream_refused_by_the_other_worker_is_its_error() -> None:
    clock = task.Clock()
    forward, stub = forwarder(OtherWorker("busy"), clock)
    d = forward.relay(FakeRequest(), "http://w2.test/events", {})
    stub.flush()
    failure = outcome(d)
    assert isinstance(failure, Failure)
    assert (failure.value.status, failure.value.message) == (503, "busy")


def follow(owner: OtherWorker, clock: task.Clock, max_frame: int = 1024
           ) -> tuple[EventFeed, list[tuple[int | None, str, Any]], StubTreq]:
    """Follow ``owner``'s stream: the feed, the events it handed on, the pump."""
    forward, stub = forwarder(owner, clock, stream_idle=30.0)
    got: list[tuple[int | None, str, Any]] = []
    d = forward.follow("http://w2.test/events", {}, lambda *event: got.append(event),
                       max_frame)
    stub.flush()
    return result_of(d), got, stub


def test_a_followed_stream_hands_on_each_event_as_its_frame_completes() -> None:
    """Frames split anywhere are put together; comments are skipped; the newest id is
    kept; a stream that goes silent for ``stream_idle`` is closed."""
    owner, clock = OtherWorker("stream"), task.Clock()
    feed, got, stub = follow(owner, clock)
    for part in (b"id: 41\nevent: iteration\nda", b'ta: {"assistant": "tess", "n": 1}\n',
                 b"\n: keep-alive\n\nid: 42\nevent: tick\ndata: {}\n\n"):
        owner.streaming.write(part)
        stub.flush()
    assert got == [(None, "hello", {"assistant": "tess"}),
                   (41, "iteration", {"assistant": "tess", "n": 1}), (42, "tick", {})]
    assert feed.last_id == 42 and not feed.ended.called
    clock.advance(30.0)
    stub.flush()
    assert result_of(feed.ended) == "silent for 30s" and owner.stream_gone


@pytest.mark.parametrize("sent", [b"data: " + b"x" * 2000, b"data: not json\n\n"])
def test_a_followed_stream_that_sends_too_much_or_garbage_is_closed(sent: bytes) -> None:
    """A frame over ``max_frame`` bytes (complete or not) or not JSON ends the stream."""
    owner, clock = OtherWorker("stream"), task.Clock()
    feed, got, stub = follow(owner, clock, max_frame=1024)
    owner.streaming.write(sent)
    stub.flush()
    assert owner.stream_gone and len(got) == 1
    assert result_of(feed.ended) in ("a frame larger than 1024 bytes",
                                     "a frame that is not an event of this service")
    assert clock.getDelayedCalls() == []


def test_a_followed_stream_ends_when_stopped_or_ended_by_the_other_worker() -> None:
    owner, clock = OtherWorker("stream"), task.Clock()
    feed, _, stub = follow(owner, clock)
    feed.stop("enough")
    stub.flush()
    assert result_of(feed.ended) == "enough" and owner.stream_gone
    feed, _, stub = follow(owner, clock)
    owner.streaming.finish()
    stub.flush()
    assert result_of(feed.ended) == "it ended" and clock.getDelayedCalls() == []


# -- a worker's API about an assistant another worker runs ------------------------------------


class FakeStore:
    """What the API reads of the database: owners, live workers, saved states."""

    def __init__(self, owners: dict[str, tuple[str, str | None]],
                 states: dict[str, Any]) -> None:
        self.owners = owners
        self.states = states
        self.also_live: dict[str, str | None] = {}

    def assistant_owners(self) -> defer.Deferred[Any]:
        return defer.succeed(dict(self.owners))

    def live_workers(self) -> defer.Deferred[Any]:
        workers = {"w1": "http://w1.test:8080"}
        workers.update({w: url for w, url in self.owners.values()})
        workers.update(self.also_live)
        return defer.succeed(workers)

    def load_assistant(self, name: str) -> defer.Deferred[Any]:
        return defer.succeed(self.states.get(name))


class FakeOwnership:
    """The lease manager of worker w1, which runs Pip and Mason (Tess runs elsewhere)."""

    def __init__(self, store: FakeStore) -> None:
        self.worker = "w1"
        self.store = store
        self.roster = {n: AssistantConfig(name=n, model="default", character_id=f"char:{n}")
                       for n in ("pip", "mason", "tess")}
        self.removed: list[tuple[str, bool]] = []
        self.epochs: dict[str, int] = {"pip": 1, "mason": 1}
        self.interval = 5.0

    def fresh_roster(self) -> defer.Deferred[Any]:
        return defer.succeed(dict(self.roster))

    def assistant_of_character(self, character: str) -> str | None:
        return next((n for n, c in self.roster.items() if c.character_id == character), None)

    def remove(self, name: str, forget: bool) -> defer.Deferred[None]:
        self.removed.append((name, forget))
        del self.roster[name]
        return defer.succeed(None)


def saved_tess() -> dict[str, Any]:
    assistant = Assistant(config=AssistantConfig(name="tess", model="default"))
    state = assistant.to_state()
    state["history"] = [{"role": "user", "content": "remember the soup"}]
    return state


def worker_api(owner: Resource | None = None, *, url: str | None = "http://w2.test:8080",
               owned: bool = True, token: str | None = None,
               limits: HttpLimits | None = None) -> tuple[ApiHarness, FakeOwnership, Any]:
    """Worker w1's API; Tess is run by w2 at ``url`` (``owned``) or by nobody; the other
    worker is ``owner`` behind StubTreq, or dead (the MemoryReactorClock is returned)."""
    api = ApiHarness(token=token, limits=limits)
    store = FakeStore({"tess": ("w2", url)} if owned else {}, {"tess": saved_tess()})
    ownership = FakeOwnership(store)
    api.service.ownership = ownership
    reactor = None
    if owner is not None:
        client: Any = StubTreq(owner)
        api.pump_others = client.flush  # type: ignore[attr-defined]
    else:
        reactor, client = refusing()
    api.resource._forwarder = Forwarder(api.clock, client=client, timeout=2.0,
                                        max_bytes=4096, signer=api.resource.worker_signer)
    return api, ownership, reactor


def call(api: ApiHarness, method: str, path: str, **kw: Any) -> Any:
    d = api.start(method, path, **kw)
    for _ in range(3):
        api.pump()
        flush = getattr(api, "pump_others", None)
        if flush is not None:
            flush()
    return api.finish(d)


def test_status_and_actions_of_an_assistant_run_elsewhere_are_forwarded() -> None:
    """GET status and POST tick go to Tess's worker, signed, without the caller's token
    (nor the API's, for a caller signed in on the console)."""
    owner = OtherWorker()
    api, _, _ = worker_api(owner, token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    answer = call(api, "GET", "/assistants/tess", headers=auth)
    assert answer.code == 200 and answer.json["worker"] == "w2"
    answer = call(api, "POST", "/assistants/tess/tick", headers=auth, body={})
    assert answer.code == 200 and answer.json["path"] == "/assistants/tess/tick"
    signed_in = call(api, "POST", "/session", body={"token": TOKEN})
    cookie = {"Cookie": str(signed_in.header("set-cookie")).split(";", 1)[0]}
    assert call(api, "GET", "/assistants/tess/history", headers=cookie).code == 200
    assert [seen[2][b"authorization"] for seen in owner.seen] == [None] * 3
    assert all(seen[2][SIGNATURE_HEADER] for seen in owner.seen)
    local = call(api, "GET", "/assistants/pip", headers=auth)  # Pip runs here
    assert local.json["worker"] == "w1" and len(owner.seen) == 3


def test_a_dead_owner_status_and_history_come_from_the_database_actions_are_503() -> None:
    api, _, reactor = worker_api(None)
    d = api.start("GET", "/assistants/tess")
    api.pump()
    refuse(reactor)
    status = api.finish(d)
    assert status.code == 200, status
    assert status.json["worker"] is None and status.json["saved"] is True
    assert "does not answer" in status.json["why"]
    d = api.start("GET", "/assistants/tess/history")
    api.pump()
    refuse(reactor)
    history = api.finish(d)
    assert history.json["messages"][0]["content"] == "remember the soup"
    d = api.start("POST", "/assistants/tess/tick", body={})
    api.pump()
    refuse(reactor)
    tick = api.finish(d)
    assert tick.code == 503 and tick.header("retry-after") == "2"
    assert "cannot be reached" in tick.json["error"]


def test_with_no_live_owner_the_database_answers_and_delete_removes_here() -> None:
    api, ownership, _ = worker_api(OtherWorker(), owned=False)
    status = call(api, "GET", "/assistants/tess")
    assert status.code == 200 and status.json["worker"] is None
    config = call(api, "GET", "/assistants/tess/config")
    assert config.json["config"]["name"] == "tess"
    stop = call(api, "POST", "/assistants/tess/stop", body={})
    assert stop.code == 503 and "no live worker runs it" in stop.json["error"]
    events = call(api, "GET", "/events?assistant=tess")
    assert events.code == 503 and events.header("retry-after") == "2"
    removed = call(api, "DELETE", "/assistants/tess?forget=true")
    assert removed.code == 200 and ownership.removed == [("tess", True)]
    assert call(api, "GET", "/assistants/tess").code == 404


def test_an_assistant_whose_lease_this_worker_just_took_is_starting_here() -> None:
    """The database names this worker, which has not loaded Tess yet: the saved status,
    and 503 for what needs it running, saying so."""
    api, ownership, _ = worker_api(OtherWorker(), owned=False)
    ownership.store.owners["tess"] = ("w1", "http://w1.test:8080")
    ownership.epochs["tess"] = 2
    status = call(api, "GET", "/assistants/tess")
    assert status.json["worker"] is None and status.json["why"] == "it is starting on this worker"
    tick = call(api, "POST", "/assistants/tess/tick", body={})
    assert tick.code == 503 and "starting on this worker" in tick.json["error"]
    assert tick.header("retry-after") == "2"


def test_an_owner_answer_too_large_is_502_and_a_slow_one_503() -> None:
    api, _, _ = worker_api(OtherWorker("huge", size=10_000))
    answer = call(api, "GET", "/assistants/tess/results")
    assert answer.code == 502 and "larger than 4096 bytes" in answer.json["error"]
    api, _, _ = worker_api(OtherWorker("silent"))
    d = api.start("POST", "/assistants/tess/disable", body={})
    api.pump()
    api.clock.advance(2.0)
    answer = api.finish(d)
    assert answer.code == 503 and "did not answer within 2s" in answer.json["error"]
    # A tick may take a while: its deadline is forward_tick_timeout (300 s by default).
    d = api.start("POST", "/assistants/tess/tick", body={})
    answered: list[Any] = []
    d.addBoth(lambda result: answered.append(result) or result)
    api.pump()
    api.clock.advance(2.0)
    api.pump()
    assert answered == []
    api.clock.advance(298.0)
    answer = api.finish(d)
    assert answer.code == 503 and "did not answer within 300s" in answer.json["error"]


def test_unknown_names_are_404_and_a_forwarded_request_is_never_passed_on_again() -> None:
    owner = OtherWorker()
    api, _, _ = worker_api(owner)
    assert call(api, "GET", "/assistants/nobody").code == 404
    again = call(api, "GET", "/assistants/tess", headers={"X-AI-Tools-Forwarded": "1"})
    assert again.code == 503 and "moving" in again.json["error"] and owner.seen == []


@pytest.mark.parametrize("url", [
    "http://evil.test:8080/steal?",  # a path would pick the request's path
    "http://evil.test:8080/#",
    "http://user@w2.test:8080",
    "ftp://w2.test:21",
    "http://w2.test",  # no port
    "http://[::1]:1",  # one the HTTP client cannot encode (it raised: a 500)
    "http://w 2.test:8080",
    "http://w9.test:8080",  # not one of the allowed hosts
])
def test_an_api_address_that_is_not_a_worker_s_is_never_asked(url: str) -> None:
    """Anyone who can write the database can write ``lease_workers.api_url``: only
    ``http(s)://host:port`` (of the allowed hosts, when named) is asked; another is a
    worker that cannot be reached: status and history from the database, actions
    503, the list names it unreachable; nothing is sent to it."""
    owner = OtherWorker()
    api, _, _ = worker_api(owner, url=url, token=TOKEN)
    api.resource.worker_hosts = ("w2.test", "evil.test")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status = call(api, "GET", "/assistants/tess", headers=auth)
    assert status.code == 200 and status.json["worker"] is None, status
    assert "cannot be reached" in status.json["why"]
    history = call(api, "GET", "/assistants/tess/history", headers=auth)
    assert history.code == 200 and history.json["worker"] is None
    tick = call(api, "POST", "/assistants/tess/tick", headers=auth, body={})
    assert tick.code == 503 and tick.header("retry-after") == "2", tick
    listed = call(api, "GET", "/assistants", headers=auth)
    assert listed.code == 200 and listed.json["workers_unreachable"] == ["w2"]
    events = call(api, "GET", "/events?assistant=tess", headers=auth)
    assert events.code == 503
    assert owner.seen == []


def test_the_list_and_stop_reach_every_worker() -> None:
    owner = OtherWorker()
    api, _, _ = worker_api(owner)
    listed = call(api, "GET", "/assistants")
    assert [(a["name"], a["worker"]) for a in listed.json["assistants"]] == [
        ("mason", "w1"), ("pip", "w1"), ("tess", "w2")]
    assert listed.json["workers_unreachable"] == []
    stopped = call(api, "POST", "/stop", body={})
    assert stopped.json == {"stopped": ["tess"], "workers_unreachable": []}
    assert [seen[1] for seen in owner.seen] == [b"/assistants", b"/stop"]


def test_an_unreachable_worker_is_named_and_its_assistants_listed_without_one() -> None:
    api, _, reactor = worker_api(None)
    d = api.start("GET", "/assistants")
    api.pump()
    refuse(reactor)
    listed = api.finish(d)
    assert listed.json["workers_unreachable"] == ["w2"]
    assert {"name": "tess", "worker": None, "running": False} in listed.json["assistants"]


# -- the whole service in one event stream ----------------------------------------------------


class PeerStreams(Resource):
    """Other workers' ``GET /events``, by host: each request kept, its stream writable."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Any] = []

    def render(self, request: Any) -> int:
        request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
        request.write(b"retry: 3000\n: connected\n\n")
        request.gone = False
        request.notifyFinish().addBoth(lambda _: setattr(request, "gone", True))
        self.requests.append(request)
        return server.NOT_DONE_YET

    def open(self, host: bytes) -> list[Any]:
        """The streams of ``host`` still open."""
        return [r for r in self.requests if r.getHeader(b"host") == host and not r.gone]


def whole_service(token: str | None = None) -> tuple[ApiHarness, PeerStreams, Any]:
    """Worker w1's API (w2 runs Tess) with the other workers' streams behind StubTreq."""
    peers = PeerStreams()
    api, ownership, _ = worker_api(peers, token=token)
    return api, peers, ownership


def pump(api: ApiHarness) -> None:
    for _ in range(3):
        api.pump()
        api.pump_others()  # type: ignore[attr-defined]


def test_the_unfiltered_stream_carries_the_other_workers_loop_events() -> None:
    """One stream of w2 followed (marked forwarded, with the token) while a client
    watches the whole service on w1: Tess's loop events come with w1's ids, after Pip's;
    w2's world messages are not repeated (w1's world has them)."""
    api, peers, _ = whole_service(token="s3cret-token-0123")
    auth = {"Authorization": "Bearer s3cret-token-0123"}
    watching = Stream(api, headers=auth)
    pump(api)
    (followed,) = peers.open(b"w2.test:8080")
    assert followed.uri == b"/events" and followed.getHeader(FORWARDED_HEADER) == b"1"
    assert followed.getHeader(b"authorization") is None  # signed instead
    assert followed.getHeader(SIGNATURE_HEADER) is not None
    api.service.publish("pip", {"type": "iteration", "iteration": 1})
    followed.write(b'id: 7\nevent: iteration\ndata: {"type": "iteration", '
                   b'"assistant": "tess", "iteration": 3}\n\n'
                   b'id: 8\nevent: world_message\ndata: {"text": "hi"}\n\n')
    pump(api)
    events = [(e["event"], e["data"].get("assistant")) for e in watching.events()]
    assert events == [("iteration", "pip"), ("iteration", "tess")]
    ids = [int(e["id"]) for e in watching.events()]
    assert ids[1] == ids[0] + 1  # numbered here: Last-Event-ID works as for w1's own
    again = Stream(api, headers=auth)  # a second client: still one stream of w2
    pump(api)
    assert len(peers.open(b"w2.test:8080")) == 1 and len(peers.requests) == 1
    watching.close()
    again.close()
    pump(api)
    assert peers.open(b"w2.test:8080") == []  # nobody watches: w2 is let go


def test_a_stream_another_worker_opened_gets_no_relayed_events_and_follows_nobody() -> None:
    """No second hop: a forwarded stream carries w1's own events only (replays too)."""
    api, peers, _ = whole_service()
    watching = Stream(api)
    pump(api)
    (followed,) = peers.open(b"w2.test:8080")
    followed.write(b'id: 7\nevent: tick\ndata: {"type": "tick", "assistant": "tess"}\n\n')
    pump(api)
    forwarded = Stream(api, headers={"X-AI-Tools-Forwarded": "1"})
    replayed = Stream(api, "?last_event_id=0", headers={"X-AI-Tools-Forwarded": "1"})
    api.service.publish("pip", {"type": "tick"})
    followed.write(b'id: 9\nevent: tick\ndata: {"type": "tick", "assistant": "tess"}\n\n')
    pump(api)
    assert [e["data"].get("assistant") for e in forwarded.events()] == ["pip"]
    assert "tess" not in {e["data"].get("assistant") for e in replayed.events()}
    assert [e["data"]["assistant"] for e in watching.events()] == ["tess", "pip", "tess"]
    assert len(peers.requests) == 1


def test_workers_that_join_or_leave_are_followed_or_let_go_and_a_lost_stream_resumes() -> None:
    """Every lease interval the live workers are read again; a stream that ended is
    opened again with Last-Event-ID (the other worker replays what was missed)."""
    api, peers, ownership = whole_service()
    watching = Stream(api)
    pump(api)
    ownership.store.also_live.update({"w3": "http://w3.test:8080", "w4": None})  # w4: no API yet
    api.clock.advance(5.0)
    pump(api)
    assert len(peers.open(b"w3.test:8080")) == 1 and len(peers.requests) == 2
    (w2,) = peers.open(b"w2.test:8080")
    w2.write(b'id: 12\nevent: tick\ndata: {"type": "tick", "assistant": "tess"}\n\n')
    w2.finish()  # w2's stream ends (it restarts, say)
    pump(api)
    del ownership.store.also_live["w3"]  # w3 stopped
    api.clock.advance(5.0)
    pump(api)
    assert peers.open(b"w3.test:8080") == []
    (resumed,) = peers.open(b"w2.test:8080")
    assert resumed.getHeader(b"last-event-id") == b"12"
    assert [e["data"]["assistant"] for e in watching.events()] == ["tess"]
    api.resource.shutdown()  # the API stops: what it follows too
    pump(api)
    assert peers.open(b"w2.test:8080") == []
    assert [c for c in api.clock.getDelayedCalls() if "TickScheduler" not in repr(c)] == []


def test_a_worker_whose_stream_cannot_be_opened_is_tried_again_at_the_next_reading() -> None:
    api, _, reactor = worker_api(None, url="http://127.0.0.1:9")  # w2 died
    watching = Stream(api)
    reactor.advance(0)
    assert len(reactor.tcpClients) == 1
    refuse(reactor)
    api.pump()
    assert api.resource.service_events.followed == {}
    api.clock.advance(5.0)
    api.pump()
    reactor.advance(0)
    assert len(reactor.tcpClients) == 1  # tried again
    watching.close()
    assert api.resource.service_events.watchers == 0
    assert api.resource.service_events.followed == {}


def test_a_message_heard_by_an_assistant_another_worker_runs_names_it() -> None:
    """POST /messages on a worker that does not run the hearer still names the assistant
    that heard it (the shared roster knows it), as the event stream's world messages do."""
    api, ownership, _ = worker_api(OtherWorker())
    ownership.roster["tess"] = AssistantConfig(name="tess", model="default",
                                               character_id="char:alice")
    answer = call(api, "POST", "/messages", body={"character": "char:bob", "kind": "page",
                                                  "target": "char:alice", "text": "hi Tess"})
    assert answer.code == 200, answer
    assert answer.json["heard_by"] == ["char:alice"]
    assert answer.json["assistants"] == ["tess"]
    characters = call(api, "GET", "/world/characters").json["characters"]
    assert {c["id"]: c["assistant"] for c in characters}["char:alice"] == "tess"
    assert assistants_by_character(api.service)["char:alice"] == "tess"  # world_message events


def test_the_approvals_of_every_worker_are_listed_and_answered_where_they_wait() -> None:
    """GET /approvals lists every worker's waiting calls; an answer about an assistant
    another worker runs is passed on to that worker."""
    from ai_tools.llm.events import ToolCall

    owner = OtherWorker()
    api, _, _ = worker_api(owner)
    api.service.approvals.request("pip", "dig", ToolCall(id="c1", name="dig", arguments={}), 60)
    listed = call(api, "GET", "/approvals")
    assert sorted((a["assistant"], a["tool"]) for a in listed.json["approvals"]) == [
        ("pip", "dig"), ("tess", "dig")]
    assert listed.json["workers_unreachable"] == []
    answered = call(api, "POST", "/assistants/tess/approvals/feed0001",
                    body={"approve": True})
    assert answered.code == 200, answered
    assert [(seen[0], seen[1], seen[3]) for seen in owner.seen][-1] == (
        b"POST", b"/assistants/tess/approvals/feed0001", b'{"approve": true}')
