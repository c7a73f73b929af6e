"""A harness for the HTTP API unit tests: the example world, a service on a Clock, StubTreq."""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.internet import defer, task
from twisted.internet.address import IPv4Address
from twisted.python.failure import Failure

from ai_tools.web.api import ApiResource
from ai_tools.web.limits import HttpLimits
from ai_tools.web.origin import OriginPolicy
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.sandbox_world_fixtures import EXAMPLE
from tests.unit.service_fakes import add, make_service, settle


def parse(raw: bytes) -> list[dict[str, Any]]:
    """SSE frames as dicts (``comment`` for ``:`` lines)."""
    frames = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        frame: dict[str, Any] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "":
                frame["comment"] = value
            elif key == "data":
                frame["data"] = json.loads(value)
            else:
                frame[key] = value
        frames.append(frame)
    return frames


class FakeTransport:
    """Records how a connection was ended."""

    def __init__(self) -> None:
        self.aborted = False
        self.lost = False

    def abortConnection(self) -> None:
        self.aborted = True

    def loseConnection(self) -> None:
        self.lost = True


class FakeRequest:
    """Just what EventStream and EventHub use of a request (from ``host``)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.client = IPv4Address("TCP", host, 40000)
        self.transport = FakeTransport()
        self.written: list[bytes] = []
        self.code: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.producer: Any = None
        self.finished = False
        self._finish: defer.Deferred[None] = defer.Deferred()

    def getClientAddress(self) -> IPv4Address:
        return self.client

    def setResponseCode(self, code: int) -> None:
        self.code = code

    def setHeader(self, name: bytes, value: bytes) -> None:
        self.headers[name] = value

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def notifyFinish(self) -> defer.Deferred[None]:
        return self._finish

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def finish(self) -> None:
        self.finished = True
        self._finish.callback(None)

    def events(self) -> list[dict[str, Any]]:
        return [f for f in parse(b"".join(self.written)) if "event" in f]


def result_of(d: defer.Deferred[Any]) -> Any:
    """The result of a fired Deferred (raises its failure)."""
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]


class Answer:
    """A finished response: status code, headers, body (bytes) and its JSON."""

    def __init__(self, code: int, headers: Any, body: bytes) -> None:
        self.code = code
        self.headers = headers
        self.body = body

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        values = self.headers.getRawHeaders(name.encode())
        return values[0].decode() if values else None

    def __repr__(self) -> str:
        return f"<Answer {self.code} {self.body[:200]!r}>"


class ApiHarness:
    """Pip (in the inn, with Bob) and Mason (in the workshop) hosted behind an ApiResource."""

    def __init__(self, *, token: str | None = None, max_body: int = 65536,
                 world: bool = True, store: Any = None, policy: OriginPolicy | None = None,
                 limits: HttpLimits | None = None, base: str = "http://127.0.0.1",
                 world_store: Any = None) -> None:
        self.clock = task.Clock()
        self.world = SandboxWorld.from_file(EXAMPLE, clock=self.clock) if world else None
        if world_store is not None:  # the world kept in a store (with its heard log)
            self.world = result_of(SandboxWorld.load(world_store, EXAMPLE, clock=self.clock))
        options = {"store": store} if store is not None else {}
        _, self.service, self.loop = make_service(self.clock, world=self.world, **options)
        add(self.service, self.clock, name="pip", character_id="char:pip")
        add(self.service, self.clock, name="mason", character_id="char:mason")
        self.resource = ApiResource(self.service, self.world, token=token, max_body=max_body,
                                    clock=self.clock, policy=policy, limits=limits)
        self.resource.start()
        self.stub = StubTreq(self.resource)
        self.base = base

    def pump(self) -> None:
        """Move bytes and the clock's zero-delay calls until things settle."""
        for _ in range(3):
            self.stub.flush()
            settle(self.clock)
        self.stub.flush()

    def start(self, method: str, path: str, *, body: Any = None, data: bytes | None = None,
              headers: dict[str, str] | None = None, unbuffered: bool = False
              ) -> defer.Deferred[Any]:
        """Send a request; fires with the treq response (pump to make it come).

        ``body`` is sent as JSON (with its content type); ``data`` as it is.
        """
        headers = dict(headers or {})
        if body is not None:
            data = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        return self.stub.request(  # type: ignore[attr-defined]
            method, self.base + path, data=data, headers=headers,
            unbuffered=unbuffered)

    def finish(self, d: defer.Deferred[Any]) -> Answer:
        """Pump until the response of ``d`` is complete; the Answer."""
        self.pump()
        response = result_of(d)
        content = response.content()
        self.pump()
        return Answer(response.code, response.headers, result_of(content))

    def call(self, method: str, path: str, **kw: Any) -> Answer:
        """Send a request and return its finished Answer."""
        return self.finish(self.start(method, path, **kw))
