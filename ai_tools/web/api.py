"""The HTTP API of the standalone service: JSON over twisted.web, plus an SSE event stream.

Endpoints (see ``docs/http-api.md`` for each with a curl example)::

    GET  /                                   what this is, the endpoints
    GET  /assistants                         every assistant's status
    GET  /assistants/{name}                  one assistant's status
    GET  /assistants/{name}/history?limit=N  the last N history messages
    GET  /assistants/{name}/results?limit=N  the last N loop results
    POST /assistants/{name}/tick             run a tick now; answers with its result
    POST /assistants/{name}/stop             kill what it is doing
    POST /assistants/{name}/enable           let it tick
    POST /assistants/{name}/disable          make its ticks exit early
    POST /messages                           a player character speaks in the world
    GET  /characters/{id}/heard?limit=&after= what a character heard
    GET  /events?assistant=&types=           server-sent events: loop steps, world messages

Every error is a JSON object ``{"error", "status", "field"?}`` with its
status code; the service goes on serving.  When built with a ``token`` every
request needs ``Authorization: Bearer <token>``; a token is required when the
endpoint is reachable from other machines.

Build it with :func:`make_web_service` and add it to the application.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

import attrs
from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource

from ai_tools.errors import ConfigError, NotFound, PermissionDenied
from ai_tools.web.body import DEFAULT_MAX_BODY, LimitedRequest, parse_json_body
from ai_tools.web.errors import ApiError, error_body, json_type
from ai_tools.web.listen import ListeningService, binds_locally
from ai_tools.web.results import LoopRecorder
from ai_tools.web.sse import EventStream

__all__ = ["ApiResource", "ApiSite", "WebService", "make_web_service"]

log = Logger()

MESSAGE_KINDS = ("say", "pose", "whisper", "page", "channel")
"""What ``POST /messages`` may send (``kind``)."""

_ROOM_KINDS = ("say", "pose")
_DIRECT_KINDS = ("whisper", "page")
_MESSAGE_FIELDS = frozenset({"character", "text", "kind", "target"})
MAX_TEXT = 4000
"""Longest ``text`` a posted message may have (characters)."""
MAX_LIMIT = 1000
"""Largest ``limit`` a list endpoint answers."""

Handler = Callable[..., Any]


def _json_default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def _encode(data: Any) -> bytes:
    return json.dumps(data, default=_json_default, allow_nan=False).encode("utf-8") + b"\n"


@attrs.frozen
class Route:
    """One endpoint: method, path pattern (``{name}`` segments are parameters), handler."""

    method: str
    pattern: tuple[str, ...]
    handler: Handler
    summary: str

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The path parameters if ``segments`` fit the pattern."""
        if len(segments) != len(self.pattern):
            return None
        params: dict[str, str] = {}
        for want, got in zip(self.pattern, segments, strict=True):
            if want.startswith("{"):
                if not got:
                    return None
                params[want[1:-1]] = got
            elif want != got:
                return None
        return params

    @property
    def path(self) -> str:
        """The pattern as a path (``/assistants/{name}``)."""
        return "/" + "/".join(self.pattern)


class ApiResource(Resource):
    """The whole API as one leaf resource that routes by path and method.

    ``service`` is the :class:`~ai_tools.service.service.AssistantService`, ``world``
    its world (None: the message and hearing endpoints answer 503).
    """

    isLeaf = True

    def __init__(
        self,
        service: Any,
        world: Any = None,
        *,
        token: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        clock: Any = None,
        keepalive: float = 15.0,
        recorder: LoopRecorder | None = None,
    ) -> None:
        super().__init__()
        self.service = service
        self.world = world
        self._token = token.encode("utf-8") if token is not None else None
        self.max_body = max_body
        self._clock = clock
        self.keepalive = keepalive
        self.recorder = recorder if recorder is not None else LoopRecorder()
        self.streams: set[EventStream] = set()
        self._remove_recorder: Callable[[], None] | None = None
        self.routes = [
            Route("GET", (), self.index, "what this is, the endpoints"),
            Route("GET", ("assistants",), self.list_assistants, "every assistant's status"),
            Route("GET", ("assistants", "{name}"), self.assistant_status,
                  "one assistant's status"),
            Route("GET", ("assistants", "{name}", "history"), self.history,
                  "the last ?limit= history messages (default 50)"),
            Route("GET", ("assistants", "{name}", "results"), self.results,
                  "the last ?limit= loop results (default 10)"),
            Route("POST", ("assistants", "{name}", "tick"), self.tick,
                  "run a tick now; answers with its result"),
            Route("POST", ("assistants", "{name}", "stop"), self.stop_assistant,
                  "kill the model call or tool in flight"),
            Route("POST", ("assistants", "{name}", "enable"), self.enable, "let it tick"),
            Route("POST", ("assistants", "{name}", "disable"), self.disable,
                  "make its ticks exit early"),
            Route("POST", ("messages",), self.post_message,
                  "a player character says, poses, whispers, pages or posts on a channel"),
            Route("GET", ("characters", "{character}", "heard"), self.heard,
                  "what a character heard (?limit=, ?after=)"),
            Route("GET", ("events",), self.events,
                  "server-sent events (?assistant=, ?types=)"),
        ]

    # -- lifecycle -----------------------------------------------------------------

    @property
    def clock(self) -> Any:
        """The reactor (or clock) for timers."""
        if self._clock is None:
            from twisted.internet import reactor

            self._clock = reactor
        return self._clock

    def start(self) -> None:
        """Start recording loop results from the service's events."""
        if self._remove_recorder is None:
            self._remove_recorder = self.service.add_observer(self.recorder)

    def shutdown(self) -> None:
        """Close every event stream and stop recording."""
        for stream in list(self.streams):
            stream.close()
        self.streams.clear()
        if self._remove_recorder is not None:
            self._remove_recorder()
            self._remove_recorder = None

    # -- dispatch --------------------------------------------------------------------

    def render(self, request: Any) -> bytes | int:
        """Check the token, route, run the handler; answer JSON (or stream events)."""
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))
        try:
            self._check_token(request)
            route, params = self._route(request)
            if route.handler == self.events:
                self.events(request)
                return server.NOT_DONE_YET
            d = defer.maybeDeferred(route.handler, request, **params)
        except Exception:
            d = defer.fail(Failure())
        d.addCallbacks(self._reply, self._failed, callbackArgs=(request, gone),
                       errbackArgs=(request, gone))
        d.addErrback(lambda f: log.failure("Answering {uri} failed", f, uri=request.uri))
        return server.NOT_DONE_YET

    def _check_token(self, request: Any) -> None:
        if self._token is None:
            return
        header = request.getHeader(b"authorization")
        challenge = {"WWW-Authenticate": 'Bearer realm="ai_tools"'}
        if not header:
            raise ApiError(401, "missing token: send 'Authorization: Bearer <token>'",
                           headers=challenge)
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._token):
            raise ApiError(401, "wrong token", headers=challenge)

    def _segments(self, request: Any) -> list[str]:
        path = request.path.split(b"?", 1)[0]
        try:
            text = path.decode("ascii")
        except UnicodeDecodeError:
            raise ApiError(400, "the path is not ASCII (percent-encode it)") from None
        segments = [unquote(s, errors="strict") for s in text.split("/")[1:]]
        while segments and segments[-1] == "":
            segments.pop()
        return segments

    def _route(self, request: Any) -> tuple[Route, dict[str, str]]:
        try:
            segments = self._segments(request)
        except UnicodeDecodeError:
            raise ApiError(400, "the path is not valid UTF-8 once decoded") from None
        method = request.method.decode("ascii", "replace").upper()
        allowed: list[str] = []
        for route in self.routes:
            params = route.match(segments)
            if params is None:
                continue
            # HEAD is GET without the body, except for the never-ending event stream.
            head = method == "HEAD" and route.method == "GET" and route.handler != self.events
            if route.method == method or head:
                return route, params
            allowed.append(route.method)
        if allowed:
            allow = ", ".join(sorted(set(allowed)))
            raise ApiError(405, f"{method} is not allowed here; use {allow}",
                           headers={"Allow": allow})
        raise ApiError(404, f"no endpoint at {'/' + '/'.join(segments)}; GET / lists them")

    def _reply(self, body: Any, request: Any, gone: list[bool]) -> None:
        if gone:
            return
        status = 200
        if isinstance(body, tuple):
            status, body = body
        self._write(request, status, body)

    def _failed(self, failure: Failure, request: Any, gone: list[bool]) -> None:
        error = failure.value
        if isinstance(error, ApiError):
            api_error = error
        elif isinstance(error, NotFound):
            api_error = ApiError(404, str(error))
        elif isinstance(error, PermissionDenied):
            api_error = ApiError(403, str(error))
        else:
            log.failure("The HTTP API failed on {method} {uri}", failure,
                        method=request.method, uri=request.uri)
            api_error = ApiError(500, f"internal error: {type(error).__name__}")
        if gone:
            return
        for key, value in api_error.headers.items():
            request.setHeader(key.encode("ascii"), value.encode("latin-1"))
        if api_error.status == 413 or api_error.status >= 500:
            request.setHeader(b"connection", b"close")
        self._write(request, api_error.status,
                    error_body(api_error.status, api_error.message, api_error.field))

    def _write(self, request: Any, status: int, body: Any) -> None:
        try:
            data = _encode(body)
        except (TypeError, ValueError):
            log.failure("An API answer could not be encoded as JSON")
            status, data = 500, _encode(error_body(500, "internal error: bad answer"))
        request.setResponseCode(status)
        request.setHeader(b"content-length", str(len(data)).encode("ascii"))
        request.write(data)
        request.finish()

    # -- helpers -----------------------------------------------------------------------

    def _assistant(self, name: str) -> str:
        if name not in self.service:
            raise ApiError(404, f"no assistant named {name!r}", field="assistant")
        return name

    def _world(self) -> Any:
        if self.world is None:
            raise ApiError(503, "this service has no world")
        return self.world

    @staticmethod
    def _query(request: Any, key: str) -> str | None:
        values = request.args.get(key.encode("ascii"))
        if not values:
            return None
        try:
            text: str = values[-1].decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, f"query parameter {key!r} is not UTF-8", field=key) from None
        return text

    def _int_query(self, request: Any, key: str, default: int | None, low: int = 0,
                   high: int = MAX_LIMIT) -> int | None:
        text = self._query(request, key)
        if text is None or text == "":
            return default
        try:
            value = int(text)
        except ValueError:
            raise ApiError(400, f"{key} must be an integer, not {text!r}", field=key) from None
        if not low <= value <= high:
            raise ApiError(400, f"{key} must be between {low} and {high}, not {value}",
                           field=key)
        return value

    def _character_ids(self) -> dict[str, str]:
        """``{character_id: assistant name}`` of the hosted assistants."""
        ids: dict[str, str] = {}
        for name, assistant in self.service.assistants.items():
            char_id = assistant.config.character_id
            if char_id:
                ids[char_id] = name
        return ids

    # -- handlers ------------------------------------------------------------------------

    def index(self, request: Any) -> dict[str, Any]:
        """``GET /``."""
        return {
            "service": "ai_tools",
            "assistants": self.service.names(),
            "endpoints": [{"method": r.method, "path": r.path, "summary": r.summary}
                          for r in self.routes],
        }

    def list_assistants(self, request: Any) -> dict[str, Any]:
        """``GET /assistants``."""
        status = self.service.status()
        return {"service": status["service"],
                "assistants": list(status["assistants"].values())}

    def assistant_status(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}``."""
        status: dict[str, Any] = self.service.status(self._assistant(name))
        return status

    def history(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}/history?limit=N``."""
        self._assistant(name)
        limit = self._int_query(request, "limit", 50)
        messages = self.service.history(name)
        kept = messages[-limit:] if limit else []
        return {"assistant": name, "total": len(messages), "messages": kept}

    def results(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}/results?limit=N``."""
        self._assistant(name)
        limit = self._int_query(request, "limit", 10)
        return {
            "assistant": name,
            "last_tick": self.service.status(name).get("last_tick"),
            "loops": self.recorder.loops(name, limit),
        }

    def tick(self, request: Any, name: str) -> defer.Deferred[dict[str, Any]]:
        """``POST /assistants/{name}/tick``: fires when the tick ends."""
        self._assistant(name)
        d: defer.Deferred[Any] = self.service.run_tick(name)
        d.addCallback(lambda result: result.as_dict())
        return d

    def stop_assistant(self, request: Any, name: str) -> dict[str, Any]:
        """``POST /assistants/{name}/stop``: kill the model call or tool in flight."""
        self._assistant(name)
        stopped = self.service.stop_assistant(name, "stopped through the HTTP API")
        return {"assistant": name, "stopped": stopped}

    def enable(self, request: Any, name: str) -> defer.Deferred[dict[str, Any]]:
        """``POST /assistants/{name}/enable``."""
        self._assistant(name)
        d: defer.Deferred[Any] = self.service.enable(name)
        d.addCallback(lambda _: {"assistant": name, "enabled": True})
        return d

    def disable(self, request: Any, name: str) -> defer.Deferred[dict[str, Any]]:
        """``POST /assistants/{name}/disable``."""
        self._assistant(name)
        d: defer.Deferred[Any] = self.service.disable(name)
        d.addCallback(lambda _: {"assistant": name, "enabled": False})
        return d

    @defer.inlineCallbacks
    def post_message(self, request: Any) -> Any:
        """``POST /messages``: deliver a player's message through the world's hearing."""
        world = self._world()
        body = parse_json_body(request, self.max_body)
        unknown = sorted(set(body) - _MESSAGE_FIELDS)
        if unknown:
            raise ApiError(422, f"unknown field {unknown[0]!r}; the fields are "
                           f"{', '.join(sorted(_MESSAGE_FIELDS))}", field=unknown[0])
        character = _required_text(body, "character", 200)
        text = _required_text(body, "text", MAX_TEXT)
        kind = body.get("kind", "say")
        if kind not in MESSAGE_KINDS:
            raise ApiError(422, f"kind must be one of {', '.join(MESSAGE_KINDS)}, not "
                           f"{kind!r}", field="kind")
        target = body.get("target")
        if kind in _ROOM_KINDS:
            if target is not None:
                raise ApiError(422, f"a {kind} has no target (whisper, page and channel do)",
                               field="target")
        else:
            target = _required_text(body, "target", 200)
        sender = yield defer.maybeDeferred(world.get_object, character)
        if not isinstance(sender, Mapping) or sender.get("kind") != "character":
            raise ApiError(404, f"no character with id {character!r}", field="character")
        if kind in _DIRECT_KINDS:
            target = yield self._target_character(world, str(target))

        def send() -> Any:
            if kind in _ROOM_KINDS:
                return world.message_location(character, text, kind=kind)
            if kind in _DIRECT_KINDS:
                return world.message_character(character, target, text, kind=kind)
            return world.channel_send(character, target, text)

        try:
            heard_by = yield defer.maybeDeferred(send)
        except PermissionDenied as exc:
            raise ApiError(403, str(exc)) from None
        except NotFound as exc:
            # whisper: the target is elsewhere; say/pose: the speaker is in no room
            if kind in ("channel", "page"):
                raise ApiError(404, str(exc), field="target") from None
            raise ApiError(422, str(exc), field="target" if kind == "whisper" else None
                           ) from None
        except ValueError as exc:
            raise ApiError(422, str(exc)) from None
        assistants = self._character_ids()
        heard = list(heard_by or ())
        return {
            "character": character,
            "kind": kind,
            "target": target,
            "text": text,
            "heard_by": heard,
            "assistants": sorted({assistants[c] for c in heard if c in assistants}),
        }

    @defer.inlineCallbacks
    def _target_character(self, world: Any, target: str) -> Any:
        """A whisper/page target: a character id, or the name of a hosted assistant."""
        found = yield defer.maybeDeferred(world.get_object, target)
        if isinstance(found, Mapping) and found.get("kind") == "character":
            return target
        if target in self.service:
            char_id = self.service.get(target).config.character_id
            if char_id:
                return char_id
        raise ApiError(404, f"no character (or assistant) called {target!r}", field="target")

    def heard(self, request: Any, character: str) -> dict[str, Any]:
        """``GET /characters/{id}/heard?limit=&after=``."""
        world = self._world()
        reader = getattr(world, "heard", None)
        if reader is None:
            raise ApiError(501, "this world keeps no hearing log")
        limit = self._int_query(request, "limit", 50)
        after = self._int_query(request, "after", None, 0, 2**62)
        try:
            messages = reader(character, limit=limit, after=after)
        except NotFound:
            raise ApiError(404, f"no character with id {character!r}",
                           field="character") from None
        return {"character": character, "messages": messages}

    def events(self, request: Any) -> None:
        """``GET /events?assistant=&types=``: open a server-sent event stream."""
        only = self._query(request, "assistant")
        if only is not None:
            self._assistant(only)
        types_text = self._query(request, "types")
        types = ({t.strip() for t in types_text.split(",") if t.strip()}
                 if types_text else None)
        stream = EventStream(request, self.clock, keepalive=self.keepalive)
        self._subscribe(stream, only, types)
        self.streams.add(stream)
        stream.on_close(lambda: self.streams.discard(stream))
        stream.start()

    def _subscribe(self, stream: EventStream, only: str | None,
                   types: set[str] | None) -> None:
        def loop_event(event: dict[str, Any]) -> None:
            kind = str(event.get("type", "event"))
            if types is None or kind in types:
                stream.send(kind, event)

        stream.on_close(self.service.add_observer(loop_event, only))
        add_world_observer = getattr(self.world, "add_observer", None)
        if add_world_observer is None or (types is not None and "world_message" not in types):
            return

        def world_message(message: Any, receivers: tuple[str, ...]) -> None:
            characters = self._character_ids()
            hearers = sorted({characters[c] for c in receivers if c in characters})
            data = message.to_dict() if hasattr(message, "to_dict") else dict(message)
            sender = characters.get(data.get("sender_id") or "")
            if only is not None and only not in hearers and sender != only:
                return
            data.update({"type": "world_message", "receivers": list(receivers),
                         "assistants": hearers, "from_assistant": sender,
                         "time": self.clock.seconds()})
            stream.send("world_message", data)

        stream.on_close(add_world_observer(world_message))


def _required_text(body: Mapping[str, Any], key: str, longest: int) -> str:
    if key not in body or body[key] is None:
        raise ApiError(422, f"{key} is required", field=key)
    value = body[key]
    if not isinstance(value, str):
        raise ApiError(422, f"{key} must be a string, not {json_type(value)}", field=key)
    if not value.strip():
        raise ApiError(422, f"{key} must not be empty", field=key)
    if len(value) > longest:
        raise ApiError(422, f"{key} is too long ({len(value)} > {longest} characters)",
                       field=key)
    return value


class ApiSite(server.Site):
    """A ``Site`` whose requests enforce ``max_body`` while reading, and no tracebacks sent."""

    requestFactory = LimitedRequest

    def __init__(self, resource: ApiResource, *, max_body: int, clock: Any) -> None:
        super().__init__(resource)
        self.max_body = max_body
        self.clock = clock
        self.displayTracebacks = False


class WebService(MultiService):
    """The HTTP API as a service: the listener plus the resource's observers and streams."""

    def __init__(self, resource: ApiResource, site: ApiSite, endpoint: str,
                 reactor: Any = None) -> None:
        super().__init__()
        self.resource = resource
        self.site = site
        self.endpoint = endpoint
        self.listener = ListeningService(endpoint, site, reactor=reactor)
        self.listener.setServiceParent(self)

    def startService(self) -> None:
        """Start recording loop results, then listen."""
        self.resource.start()
        try:
            super().startService()
        except BaseException:
            self.resource.shutdown()
            raise

    def stopService(self) -> defer.Deferred[None]:
        """Close the event streams and stop listening; fires once the port is closed."""
        self.resource.shutdown()
        d: defer.Deferred[None] = defer.maybeDeferred(super().stopService)
        return d

    def when_listening(self) -> defer.Deferred[Any]:
        """Fires with the ``IListeningPort`` (``.getHost().port``) once listening."""
        return self.listener.when_listening()


def make_web_service(
    service: Any,
    world: Any,
    *,
    endpoint: str = "tcp:8080:interface=127.0.0.1",
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    clock: Any = None,
) -> WebService:
    """The HTTP API of ``service`` (and ``world``) listening on ``endpoint`` (strports).

    Returns an ``IService`` (a :class:`WebService`, i.e. a ``MultiService``):
    ``make_web_service(...).setServiceParent(application)``.

    A ``token`` is required when the endpoint is reachable from other machines
    (an interface that is not a loopback address, or no interface at all);
    with a token, every request needs ``Authorization: Bearer <token>``.
    ``max_body`` bounds request bodies in bytes.  ``clock`` is the reactor
    (default: the global one).  Raises ConfigError for a bad combination.
    """
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ConfigError("the HTTP API token must be a non-empty string")
    if token is None and not binds_locally(endpoint):
        raise ConfigError(
            f"the HTTP API endpoint {endpoint!r} is reachable from other machines: "
            "set a token (or bind interface=127.0.0.1)"
        )
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise ConfigError(f"the HTTP API max_body must be a positive integer, not {max_body!r}")
    resource = ApiResource(service, world, token=token, max_body=max_body, clock=clock)
    site = ApiSite(resource, max_body=max_body, clock=resource.clock)
    reactor = clock if clock is not None and hasattr(clock, "listenTCP") else None
    return WebService(resource, site, endpoint, reactor=reactor)
