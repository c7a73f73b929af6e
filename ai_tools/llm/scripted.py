"""A scripted OpenAI-compatible model server for tests and demos (like ``treq.testing``).

It speaks ``POST /v1/chat/completions`` (streamed or not) and ``GET /v1/models``
on 127.0.0.1, answers from a script instead of a model, injects faults on
demand, and records every request it received::

    from ai_tools.testing import Fault, Turn, start_test_server

    server = yield start_test_server(
        [
            Fault.rate_limited(retry_after=1),                 # first request: 429
            Turn(tool_calls=[{"name": "look", "arguments": {}}]),
            Turn(text="The plaza is quiet."),
        ],
        reactor=reactor,
    )
    client = OpenAIChatClient(server.profile(), reactor=reactor)
    ...
    assert server.requests[1].body["tools"][0]["function"]["name"] == "look"
    yield client.close()
    yield server.stop()

A script is a list of turns played in order (one per request), plus optional
rules that pick turns by matching the last user message (so a demo can answer
whatever a player says), and a ``default`` turn played when the script runs
out.  Scripts can come from a JSON or TOML scenario file
(:meth:`Script.from_file`); ``python -m ai_tools.testing scenario.toml --port
8000`` serves one as a stand-in model.  Wherever it plays, the model name it
reports and its log lines say the model is scripted.

Conversations: a request belongs to the conversation named by its
``X-Conversation`` header or its body's ``user`` field (else ``"default"``);
pass a mapping ``{conversation: script}`` to script several at once.
"""

from __future__ import annotations

import json
import re
import sys
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast

import attrs
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import (
    IDelayedCall,
    IListeningPort,
    IProtocolFactory,
    IReactorCore,
    IReactorTime,
    ITCPTransport,
)
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.web import http
from twisted.web import server as web_server
from twisted.web.resource import Resource
from twisted.web.server import Request

from ai_tools.default_reactor import global_reactor, or_global_reactor
from ai_tools.history_format import is_fallback_result
from ai_tools.json_types import JSONArray, JSONMapping, JSONObject, JSONValue
from ai_tools.llm.profile import ModelProfile
from ai_tools.llm.server_kinds import SERVER_KINDS, ServerKind

__all__ = [
    "Fault",
    "RecordedRequest",
    "Rule",
    "Script",
    "ScriptedModel",
    "ScriptedModelResource",
    "TestServer",
    "ToolCallSpec",
    "Turn",
    "start_test_server",
]

log = Logger(namespace="ai_tools.llm.scripted")

DEFAULT_MODEL_NAME = "scripted-model"
USER_PLACEHOLDER = "{user_message}"


def _scripted_name(name: str) -> str:
    return name if "scripted" in name.lower() else f"scripted:{name}"


# -- the script ---------------------------------------------------------------------


@attrs.frozen
class ToolCallSpec:
    """A tool call a turn makes: name, arguments (object or raw JSON text), optional id."""

    name: str
    arguments: JSONMapping | str = attrs.field(factory=dict)
    id: str | None = None

    @classmethod
    def coerce(cls, value: object) -> ToolCallSpec:
        """From a ToolCallSpec, a ``{"name", "arguments"}`` dict or a ``(name, args)`` pair."""
        if isinstance(value, ToolCallSpec):
            return value
        if isinstance(value, Mapping):
            name = value.get("name", value.get("tool"))
            arguments = value.get("arguments", value.get("parameters", {}))
            return cls(str(name), arguments, value.get("id"))
        if isinstance(value, tuple | list) and len(value) == 2:
            return cls(str(value[0]), value[1])
        raise ValueError(f"not a tool call: {value!r}")


def _tool_calls(value: Iterable[object]) -> tuple[ToolCallSpec, ...]:
    return tuple(ToolCallSpec.coerce(v) for v in value)


FAULT_KINDS = (
    "status",
    "reset",
    "malformed_json",
    "truncate",
    "interrupt",
    "stall",
    "keep_alive",
    "stream_error",
)


@attrs.frozen
class Fault:
    """Something going wrong instead of (or in the middle of) an answer.

    Build them with the class methods: :meth:`rate_limited`, :meth:`server_error`,
    :meth:`http_error`, :meth:`html_error`, :meth:`reset`, :meth:`malformed_json`,
    :meth:`truncated_stream`, :meth:`interrupted`, :meth:`stall`, :meth:`keep_alive`,
    :meth:`stream_error`.
    ``after_chunks`` applies to stream faults: that many chunks are sent first.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(FAULT_KINDS))
    status: int = 500
    message: str = "scripted failure"
    retry_after: str | None = None
    body: str | None = None
    content_type: str = "application/json"
    after_chunks: int = 0
    latency: float = 0.0
    interval: float = 5.0

    @classmethod
    def rate_limited(cls, retry_after: float | str | None = 1, latency: float = 0.0) -> Fault:
        """429 Too Many Requests, with ``Retry-After`` (seconds or an HTTP date) if given."""
        return cls(
            "status",
            status=429,
            message="Rate limit reached, try again later",
            retry_after=None if retry_after is None else _retry_after_text(retry_after),
            latency=latency,
        )

    @classmethod
    def server_error(cls, status: int = 500, message: str = "internal error") -> Fault:
        """A 5xx with an OpenAI-style JSON error body."""
        return cls("status", status=status, message=message)

    @classmethod
    def http_error(cls, status: int, message: str = "request refused") -> Fault:
        """Any status with an OpenAI-style JSON error body (e.g. 400, 401, 404)."""
        return cls("status", status=status, message=message)

    @classmethod
    def html_error(cls, status: int = 502) -> Fault:
        """A non-JSON error page, like a reverse proxy sends."""
        page = (
            f"<html><head><title>{status} Bad Gateway</title></head>"
            f"<body><h1>{status} Bad Gateway</h1><hr>nginx</body></html>"
        )
        return cls("status", status=status, body=page, content_type="text/html")

    @classmethod
    def reset(cls, latency: float = 0.0) -> Fault:
        """Drop the connection without answering."""
        return cls("reset", latency=latency)

    @classmethod
    def malformed_json(cls) -> Fault:
        """200 with a body (or a stream chunk) that is not valid JSON."""
        return cls("malformed_json")

    @classmethod
    def truncated_stream(cls, after_chunks: int = 2) -> Fault:
        """Stream ``after_chunks`` chunks, then close the connection mid-body."""
        return cls("truncate", after_chunks=after_chunks)

    @classmethod
    def interrupted(cls, after_chunks: int = 2, latency: float = 0.0) -> Fault:
        """Stream ``after_chunks`` chunks, then ``data: [DONE]`` without the final chunk,
        then close the connection mid-body: llama-cpp-python's ``interrupt_requests``
        ending a stream because another request waits."""
        return cls("interrupt", after_chunks=after_chunks, latency=latency)

    @classmethod
    def stall(cls, after_chunks: int = 0) -> Fault:
        """Send headers and ``after_chunks`` chunks, then go silent (connection kept open)."""
        return cls("stall", after_chunks=after_chunks)

    @classmethod
    def keep_alive(cls, after_chunks: int = 0, interval: float = 5.0) -> Fault:
        """Send ``after_chunks`` chunks, then only ``: keep-alive`` comments, every
        ``interval`` seconds, for ever (a stream that never makes progress)."""
        return cls("keep_alive", after_chunks=after_chunks, interval=interval)

    @classmethod
    def stream_error(cls, message: str = "model overloaded", after_chunks: int = 0) -> Fault:
        """Stream ``after_chunks`` chunks, then an error object in the stream."""
        return cls("stream_error", message=message, after_chunks=after_chunks)

    @classmethod
    def from_mapping(cls, data: JSONMapping) -> Fault:
        """From a scenario-file table: ``{"kind": "rate_limited", "retry_after": 2}``..."""
        values: dict[str, Any] = dict(data)  # checked by the builders
        kind = str(values.pop("kind", ""))
        builders: dict[str, Callable[..., Fault]] = {
            "rate_limited": cls.rate_limited,
            "server_error": cls.server_error,
            "http_error": cls.http_error,
            "html_error": cls.html_error,
            "reset": cls.reset,
            "malformed_json": cls.malformed_json,
            "truncated_stream": cls.truncated_stream,
            "interrupted": cls.interrupted,
            "stall": cls.stall,
            "keep_alive": cls.keep_alive,
            "stream_error": cls.stream_error,
        }
        if kind in builders:
            return builders[kind](**values)
        return cls(kind, **values)


def _retry_after_text(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


def _fault(value: object) -> Fault | None:
    if value is None or isinstance(value, Fault):
        return value
    if isinstance(value, Mapping):
        return Fault.from_mapping(value)
    raise ValueError(f"not a fault: {value!r}")


@attrs.frozen
class Turn:
    """One scripted answer.

    ``text`` and ``tool_calls`` make the assistant message; ``stream`` None
    answers the way the request asked; ``latency`` delays the response
    headers, ``chunk_latency`` each streamed chunk after the first;
    ``chunk_chars`` sets how much text (or argument JSON) one chunk carries.
    ``fault`` replaces or interrupts the answer.  ``{user_message}`` in the
    text or in string arguments is replaced by the last user message.
    """

    text: str = ""
    tool_calls: tuple[ToolCallSpec, ...] = attrs.field(default=(), converter=_tool_calls)
    stream: bool | None = None
    latency: float = 0.0
    chunk_latency: float = 0.0
    chunk_chars: int = 16
    finish_reason: str | None = None
    usage: JSONMapping | None = None
    fault: Fault | None = attrs.field(default=None, converter=_fault)
    has_placeholder: bool = attrs.field(init=False, eq=False, repr=False)
    """Whether ``{user_message}`` appears anywhere (computed once, not per request)."""

    @has_placeholder.default
    def _has_placeholder(self) -> bool:
        return USER_PLACEHOLDER in self.text or any(
            USER_PLACEHOLDER in json.dumps(c.arguments, ensure_ascii=False)
            for c in self.tool_calls
        )

    @classmethod
    def coerce(cls, value: object) -> Turn:
        """From a Turn, a Fault (a turn that only fails), a string (text) or a mapping."""
        if isinstance(value, Turn):
            return value
        if isinstance(value, Fault):
            return cls(fault=value)
        if isinstance(value, str):
            return cls(text=value)
        if isinstance(value, Mapping):
            return cls(**dict(value))
        raise ValueError(f"not a turn: {value!r}")


def _turns(value: Iterable[object]) -> tuple[Turn, ...]:
    return tuple(Turn.coerce(v) for v in value)


@attrs.frozen
class Rule:
    """Answer with ``turns`` when the new user message matches ``match``.

    ``match`` is a regular expression searched case-insensitively.  The first
    turn answers at once; the following ones are queued for the next requests
    of the conversation (e.g. the answer after a tool result).  ``once``
    rules fire only the first time.
    """

    match: str
    turns: tuple[Turn, ...] = attrs.field(converter=_turns)
    once: bool = False

    def __attrs_post_init__(self) -> None:
        re.compile(self.match)
        if not self.turns:
            raise ValueError(f"rule {self.match!r} has no turns")

    @classmethod
    def coerce(cls, value: object) -> Rule:
        """From a Rule or a mapping ``{"match", "turns", "once"}``."""
        if isinstance(value, Rule):
            return value
        if isinstance(value, Mapping):
            return cls(**dict(value))
        raise ValueError(f"not a rule: {value!r}")


def _rules(value: Iterable[object]) -> tuple[Rule, ...]:
    return tuple(Rule.coerce(v) for v in value)


def _optional_turn(value: object) -> Turn | None:
    return None if value is None else Turn.coerce(value)


EXHAUSTED_TEXT = "[scripted model] The script has no more turns."


@attrs.frozen
class Script:
    """Turns in order, rules matched on user messages, and a default turn."""

    turns: tuple[Turn, ...] = attrs.field(default=(), converter=_turns)
    rules: tuple[Rule, ...] = attrs.field(default=(), converter=_rules)
    default: Turn | None = attrs.field(
        factory=lambda: Turn(text=EXHAUSTED_TEXT), converter=_optional_turn
    )
    model: str = DEFAULT_MODEL_NAME

    @classmethod
    def coerce(cls, value: object) -> Script:
        """From a Script, a list of turns, or a scenario mapping."""
        if isinstance(value, Script):
            return value
        if isinstance(value, Mapping):
            return cls.from_mapping(value)
        if isinstance(value, Sequence) and not isinstance(value, str | bytes):
            return cls(turns=tuple(value))
        raise ValueError(f"not a script: {value!r}")

    @classmethod
    def from_mapping(cls, data: JSONMapping) -> Script:
        """From a scenario table: ``turns``, ``rules``, ``default``, ``model``."""
        known = {"turns", "rules", "default", "model", "description"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"scenario: unknown key(s) {', '.join(unknown)}")
        values: dict[str, Any] = {k: v for k, v in data.items()
                                  if k in known and k != "description"}
        return cls(**values)

    @classmethod
    def from_file(cls, path: str | Path) -> Script:
        """Load a scenario file: ``.json`` or ``.toml``."""
        path = Path(path)
        raw = path.read_bytes()
        if path.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = json.loads(raw)
        if isinstance(data, list):
            return cls(turns=tuple(data))
        try:
            return cls.from_mapping(data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None


# -- the model ----------------------------------------------------------------------


@attrs.define(eq=False)
class _Conversation:
    queue: deque[Turn]
    used_rules: set[int] = attrs.field(factory=set)
    played: int = 0


def last_user_message(messages: object) -> str | None:
    """The newest user line, if it is the newest non-system message (not a tool result)."""
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role == "system":
            continue
        content = message.get("content")
        if role != "user" or not isinstance(content, str):
            return None
        if is_fallback_result(message):
            return None
        return content
    return None


def default_conversation_key(headers: Mapping[str, str], body: JSONMapping) -> str:
    """``X-Conversation`` header, else the body's ``user`` field, else ``"default"``."""
    key = headers.get("x-conversation") or body.get("user")
    return str(key) if key else "default"


@attrs.define(eq=False)
class ScriptedModel:
    """Chooses the turn for each request, per conversation."""

    scripts: Mapping[str, Script]
    model_name: str = DEFAULT_MODEL_NAME
    _conversations: dict[str, _Conversation] = attrs.field(factory=dict, init=False)

    @classmethod
    def build(cls, script: object, model_name: str | None = None) -> ScriptedModel:
        """From a script, a list of turns, or ``{conversation: script}``."""
        if isinstance(script, Mapping) and script and all(
            isinstance(v, Script | list | tuple) for v in script.values()
        ):
            scripts = {str(k): Script.coerce(v) for k, v in script.items()}
        else:
            scripts = {"default": Script.coerce(script)}
        name = model_name or next(iter(scripts.values())).model
        return cls(scripts, _scripted_name(name))

    def next_turn(self, conversation: str, messages: object) -> tuple[Turn | None, str]:
        """The turn answering this request, and how it was chosen (for logs)."""
        script = self.scripts.get(conversation) or self.scripts.get("default")
        if script is None:
            return None, f"no script for conversation {conversation!r}"
        state = self._conversations.get(conversation)
        if state is None:
            state = self._conversations[conversation] = _Conversation(deque(script.turns))
        state.played += 1
        user = last_user_message(messages)
        if user is not None:
            for index, rule in enumerate(script.rules):
                if rule.once and index in state.used_rules:
                    continue
                if re.search(rule.match, user, re.IGNORECASE):
                    state.used_rules.add(index)
                    state.queue.extendleft(reversed(rule.turns[1:]))
                    return _fill(rule.turns[0], user), f"rule {rule.match!r}"
        if state.queue:
            return _fill(state.queue.popleft(), user), f"turn {state.played}"
        if script.default is not None:
            return _fill(script.default, user), "default turn"
        return None, "script exhausted"


def _fill(turn: Turn, user: str | None) -> Turn:
    if not turn.has_placeholder:
        return turn
    if user is None:
        user = ""
    calls = tuple(
        attrs.evolve(c, arguments=cast("JSONMapping | str", _replace_in(c.arguments, user)))
        for c in turn.tool_calls
    )
    return attrs.evolve(turn, text=turn.text.replace(USER_PLACEHOLDER, user), tool_calls=calls)


def _replace_in(value: object, user: str) -> object:
    if isinstance(value, str):
        return value.replace(USER_PLACEHOLDER, user)
    if isinstance(value, Mapping):
        return {k: _replace_in(v, user) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_in(v, user) for v in value]
    return value


# -- HTTP -----------------------------------------------------------------------------


@attrs.define(eq=False)
class RecordedRequest:
    """A request the server received.

    ``headers`` has lower-case names; ``body`` is the decoded JSON body (None
    if it was not JSON).  ``finished`` fires with True when the answer was
    delivered, False when the client dropped the connection first;
    ``disconnected`` is True in that second case.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: JSONValue
    conversation: str = "default"
    turn: Turn | None = None
    finished: defer.Deferred[bool] = attrs.field(factory=defer.Deferred)
    disconnected: bool = False

    @property
    def messages(self) -> JSONArray:
        """The chat messages sent."""
        if isinstance(self.body, Mapping):
            return list(cast("JSONArray", self.body.get("messages") or []))
        return []

    @property
    def tools(self) -> JSONArray:
        """The tool schemas sent."""
        if isinstance(self.body, Mapping):
            return list(cast("JSONArray", self.body.get("tools") or []))
        return []


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _estimate_tokens(value: object) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False, default=str)) // 4)


class ScriptedModelResource(Resource):
    """The twisted.web resource answering as the scripted model.

    Usable on its own with ``treq.testing.StubTreq`` and a ``task.Clock``.
    """

    isLeaf = True

    def __init__(
        self,
        model: ScriptedModel,
        reactor: IReactorTime,
        *,
        api_key: str | None = None,
        conversation_key: Callable[
            [Mapping[str, str], JSONMapping], str
        ] = default_conversation_key,
        log_requests: bool = True,
        server_kind: ServerKind | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.server_kind = server_kind or ServerKind()
        self.metadata_requests: list[tuple[str, str]] = []
        """(method, path) of every request but a chat completion, in order."""
        self.log_requests = log_requests
        self.reactor = reactor
        self.api_key = api_key
        self.conversation_key = conversation_key
        self.requests: list[RecordedRequest] = []
        self._pending: set[IDelayedCall] = set()
        self._gone: weakref.WeakSet[Request] = weakref.WeakSet()  # requests the client dropped
        self._waiters: list[tuple[int, defer.Deferred[RecordedRequest]]] = []
        self._counter = 0
        self.in_flight = 0
        self.max_in_flight = 0

    # -- bookkeeping

    def wait_for_requests(self, count: int) -> defer.Deferred[RecordedRequest]:
        """Fires with the ``count``-th request once it has arrived."""
        if len(self.requests) >= count:
            return defer.succeed(self.requests[count - 1])
        d: defer.Deferred[RecordedRequest] = defer.Deferred()
        self._waiters.append((count, d))
        return d

    def cancel_pending(self) -> None:
        """Cancel every scheduled write (server shutdown)."""
        for call in list(self._pending):
            if call.active():
                call.cancel()
        self._pending.clear()

    def _later(self, request: Request, delay: float, fn: Callable[[], None]) -> None:
        if request in self._gone:
            return
        if delay <= 0:
            fn()
            return

        def run() -> None:
            self._pending.discard(call)
            if request not in self._gone:
                fn()

        call = self.reactor.callLater(delay, run)
        self._pending.add(call)

    # -- dispatch

    def render_GET(self, request: Request) -> bytes:
        path = request.path.decode("latin-1")
        self.metadata_requests.append(("GET", path))
        return self._metadata(request, "GET", path)

    def _metadata(self, request: Request, method: str, path: str) -> bytes:
        """A metadata request, answered as the emulated server kind does (else 404)."""
        answer = self.server_kind.metadata(method, path, self.model.model_name)
        if answer is None:
            return self._error(request, 404, f"no such endpoint: {method} {path}")
        status, payload = answer
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(payload).encode()

    def render_POST(self, request: Request) -> bytes | int:
        path = request.path.decode("latin-1")
        if not path.rstrip("/").endswith("/chat/completions"):
            self.metadata_requests.append(("POST", path))
            return self._metadata(request, "POST", path)
        raw = cast("IO[bytes]", request.content).read()
        headers = {
            k.decode("latin-1").lower(): v[0].decode("latin-1")
            for k, v in request.requestHeaders.getAllRawHeaders()
        }
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = RecordedRequest("POST", path, headers, body)
        self.requests.append(record)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        request.notifyFinish().addCallbacks(
            lambda _: self._finished(record, True), lambda _: self._lost(record, request)
        )
        for count, d in list(self._waiters):
            if len(self.requests) >= count:
                self._waiters.remove((count, d))
                d.callback(self.requests[count - 1])
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._error(request, 400, "the body must be a JSON object with 'messages'")
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return self._error(request, 401, "Incorrect API key provided", "invalid_api_key")
        overflow = self.server_kind.overflow(body)
        if overflow is not None:
            request.setResponseCode(overflow[0])
            request.setHeader(b"content-type", b"application/json")
            return json.dumps(overflow[1]).encode()
        record.conversation = self.conversation_key(headers, body)
        turn, why = self.model.next_turn(record.conversation, body["messages"])
        record.turn = turn
        if self.log_requests:
            log.info(
                "Scripted model {model} answering request {n} of conversation {conversation} "
                "with {why}",
                model=self.model.model_name,
                n=len(self.requests),
                conversation=record.conversation,
                why=why,
            )
        if turn is None:
            return self._error(request, 400, f"scripted model: {why}")
        latency = turn.fault.latency if turn.fault and turn.fault.latency else turn.latency
        self._later(request, latency, lambda: self._respond(request, body, turn))
        return web_server.NOT_DONE_YET

    def _finished(self, record: RecordedRequest, delivered: bool) -> None:
        self.in_flight -= 1
        if not record.finished.called:
            record.finished.callback(delivered)

    def _lost(self, record: RecordedRequest, request: Request) -> None:
        self._gone.add(request)
        record.disconnected = True
        log.info("Scripted model: the client dropped request {path}", path=record.path)
        self._finished(record, False)

    def _error(
        self, request: Request, status: int, message: str, code: str | None = None
    ) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        return json.dumps(
            {"error": {"message": message, "type": "scripted_error", "code": code}}
        ).encode()

    # -- answers

    def _respond(self, request: Request, body: JSONMapping, turn: Turn) -> None:
        fault = turn.fault
        if fault is not None and fault.kind == "status":
            request.setResponseCode(fault.status)
            if fault.retry_after is not None:
                request.setHeader(b"retry-after", fault.retry_after.encode())
            request.setHeader(b"content-type", fault.content_type.encode())
            payload = fault.body
            if payload is None:
                payload = json.dumps(
                    {"error": {"message": fault.message, "type": "scripted_error"}}
                )
            request.write(payload.encode())
            request.finish()
            return
        if fault is not None and fault.kind == "reset":
            _connection(request).abortConnection()
            return
        stream = turn.stream if turn.stream is not None else bool(body.get("stream"))
        if fault is not None and fault.kind == "malformed_json" and not stream:
            request.setHeader(b"content-type", b"application/json")
            request.write(b'{"id": "scripted", "choices": [{"message": {"content": "cut')
            request.finish()
            return
        if stream and self.server_kind.breaks_stream(body):
            request.setHeader(b"content-type", b"text/event-stream")
            request.finish()
        elif stream:
            self._stream(request, body, turn)
        else:
            self._whole(request, body, turn)

    def _completion_id(self) -> str:
        self._counter += 1
        return f"chatcmpl-scripted-{self._counter}"

    def _usage(self, body: JSONMapping, turn: Turn) -> dict[str, object]:
        if turn.usage is not None:
            return dict(turn.usage)
        prompt = _estimate_tokens(body.get("messages"))
        completion = _estimate_tokens(
            [turn.text, [(c.name, c.arguments) for c in turn.tool_calls]]
        )
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _finish_reason(self, turn: Turn) -> str:
        return turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop")

    def _call_id(self, spec: ToolCallSpec, index: int, completion_id: str) -> str:
        return spec.id or f"call_{completion_id.rsplit('-', 1)[-1]}_{index}"

    def _whole(self, request: Request, body: JSONMapping, turn: Turn) -> None:
        completion_id = self._completion_id()
        message: JSONObject = {"role": "assistant", "content": turn.text or None}
        if turn.tool_calls:
            message["tool_calls"] = [
                {
                    "id": self._call_id(spec, i, completion_id),
                    "type": "function",
                    "function": {"name": spec.name, "arguments": _arguments_text(spec)},
                }
                for i, spec in enumerate(turn.tool_calls)
            ]
        answer = {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(self.reactor.seconds()),
            "model": self.model.model_name,
            "system_fingerprint": "scripted",
            "choices": [
                {"index": 0, "message": message, "finish_reason": self._finish_reason(turn)}
            ],
            "usage": self._usage(body, turn),
        }
        request.setHeader(b"content-type", b"application/json")
        request.write(json.dumps(answer, ensure_ascii=False).encode("utf-8"))
        request.finish()

    def _stream_chunks(self, body: JSONMapping, turn: Turn) -> list[bytes]:
        completion_id = self._completion_id()
        created = int(self.reactor.seconds())

        def chunk(delta: JSONObject, finish: str | None = None) -> bytes:
            data = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model.model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return b"data: " + json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n"

        out = [chunk({"role": "assistant", "content": ""})]
        out.extend(chunk({"content": piece}) for piece in _chunks(turn.text, turn.chunk_chars))
        for index, spec in enumerate(turn.tool_calls):
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": self._call_id(spec, index, completion_id),
                                "type": "function",
                                "function": {"name": spec.name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for piece in _chunks(_arguments_text(spec), turn.chunk_chars):
                out.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        out.append(chunk({}, self._finish_reason(turn)))
        options = body.get("stream_options")
        if isinstance(options, Mapping) and options.get("include_usage"):
            usage = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model.model_name,
                "choices": [],
                "usage": self._usage(body, turn),
            }
            out.append(b"data: " + json.dumps(usage).encode() + b"\n\n")
        out.append(b"data: [DONE]\n\n")
        return out

    def _stream(self, request: Request, body: JSONMapping, turn: Turn) -> None:
        chunks = self._stream_chunks(body, turn)
        fault = turn.fault
        if fault is not None and fault.kind in ("truncate", "interrupt", "stall", "keep_alive",
                                                "stream_error"):
            chunks = chunks[: fault.after_chunks]
        if fault is not None and fault.kind == "malformed_json":
            chunks = [*chunks[:1], b"data: {\"choices\": [{\"delta\": {\"content\": \"x\"\n\n"]
        request.setHeader(b"content-type", b"text/event-stream")
        request.setHeader(b"cache-control", b"no-cache")
        pending = deque(chunks)

        def end() -> None:
            self._stream_end(request, fault)

        if turn.chunk_latency <= 0 or not pending:
            request.write(b"".join(pending))
            end()
            return

        def send_next() -> None:
            request.write(pending.popleft())
            if pending:
                self._later(request, turn.chunk_latency, send_next)
            else:
                end()

        send_next()

    def _stream_end(self, request: Request, fault: Fault | None) -> None:
        """What follows the last chunk: the end, or the turn's fault."""
        kind = fault.kind if fault is not None else None
        if kind == "interrupt":
            request.write(b"data: [DONE]\n\n")
            _connection(request).loseConnection()
        elif kind == "truncate":
            _connection(request).loseConnection()
        elif kind == "stall":
            return  # silence; the connection stays open until someone closes it
        elif kind == "keep_alive":
            assert fault is not None
            self._keep_alive(request, fault.interval)
        else:
            if fault is not None and kind == "stream_error":
                error = {"error": {"message": fault.message, "type": "server_error"}}
                request.write(b"data: " + json.dumps(error).encode() + b"\n\n")
            request.finish()

    def _keep_alive(self, request: Request, interval: float) -> None:
        """An SSE comment every ``interval`` seconds until the client goes away."""

        def ping() -> None:
            request.write(b": keep-alive\n\n")
            self._later(request, interval, ping)

        self._later(request, interval, ping)


def _arguments_text(spec: ToolCallSpec) -> str:
    if isinstance(spec.arguments, str):
        return spec.arguments
    return json.dumps(dict(spec.arguments), ensure_ascii=False)


def _connection(request: Request) -> ITCPTransport:
    """The TCP connection ``request`` came on (a Site's requests always have one)."""
    return cast("ITCPTransport", request.channel.transport)


class _ScriptedSite(web_server.Site):
    """A Site without the access-log line: the resource logs each request itself
    (with the conversation and the turn), and a load test's server logs nothing."""

    def log(self, request: http.Request) -> None:
        pass


class _TrackingFactory(WrappingFactory):
    """Counts open connections and tells waiters when they are all gone."""

    def __init__(self, wrapped: IProtocolFactory) -> None:
        super().__init__(wrapped)
        self._idle_waiters: list[defer.Deferred[None]] = []

    def unregisterProtocol(self, p: ProtocolWrapper) -> None:
        super().unregisterProtocol(p)
        if not self.protocols:
            waiters, self._idle_waiters = self._idle_waiters, []
            for d in waiters:
                d.callback(None)

    def wait_idle(self) -> defer.Deferred[None]:
        if not self.protocols:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._idle_waiters.append(d)
        return d


@attrs.define(eq=False)
class TestServer:
    """A running scripted server: ``url``, ``requests``, ``stop()``."""

    __test__ = False  # not a pytest test class

    resource: ScriptedModelResource
    port: IListeningPort
    factory: _TrackingFactory
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """Base URL for clients, ending in ``/v1``."""
        return f"http://{self.host}:{cast('IPv4Address', self.port.getHost()).port}/v1"

    @property
    def model_name(self) -> str:
        """The model name the server reports (always says it is scripted)."""
        return self.resource.model.model_name

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in order."""
        return self.resource.requests

    @property
    def open_connections(self) -> int:
        """Connections currently open."""
        return len(self.factory.protocols)

    def profile(self, **overrides: object) -> ModelProfile:
        """A :class:`ModelProfile` pointing at this server."""
        values: dict[str, Any] = {"base_url": self.url, "model": self.model_name}
        values.update(overrides)
        return ModelProfile(**values)

    def wait_for_requests(self, count: int) -> defer.Deferred[RecordedRequest]:
        """Fires with the ``count``-th request once it has arrived."""
        return self.resource.wait_for_requests(count)

    def wait_for_no_connections(self) -> defer.Deferred[None]:
        """Fires once every client connection is closed."""
        return self.factory.wait_idle()

    def stop(self) -> defer.Deferred[None]:
        """Stop listening, drop open connections (stalled streams too), cancel timers."""
        self.resource.cancel_pending()
        for wrapper in list(self.factory.protocols):
            wrapper.transport.abortConnection()
        # stopListening is typed ``Deferred[None] | None``, which no overload of
        # maybeDeferred takes (it handles both).
        stopped: defer.Deferred[None] = defer.maybeDeferred(
            self.port.stopListening)  # type: ignore[call-overload]
        return defer.gatherResults([stopped, self.factory.wait_idle()]).addCallback(
            lambda _: None
        )


def start_test_server(
    script: object,
    reactor: Any = None,
    *,
    interface: str = "127.0.0.1",
    port: int = 0,
    model_name: str | None = None,
    api_key: str | None = None,
    conversation_key: Callable[
        [Mapping[str, str], JSONMapping], str
    ] = default_conversation_key,
    backlog: int = 511,
    log_requests: bool = True,
    server_kind: ServerKind | None = None,
) -> defer.Deferred[TestServer]:
    """Start a scripted server; fires with a :class:`TestServer`.

    ``script`` is a :class:`Script`, a list of turns (:class:`Turn`,
    :class:`Fault`, text), a scenario mapping, or ``{conversation: script}``.
    With ``api_key``, requests without ``Authorization: Bearer <api_key>`` get 401.
    ``log_requests=False`` drops the log event per request (a load test's server).
    ``server_kind`` (:class:`~ai_tools.llm.server_kinds.ServerKind`) makes it answer
    metadata requests and overlong prompts as llama.cpp, Ollama, vLLM... do.
    """
    reactor = or_global_reactor(reactor)
    try:
        model = ScriptedModel.build(script, model_name)
    except (TypeError, ValueError) as e:
        return defer.fail(e)
    resource = ScriptedModelResource(
        model, reactor, api_key=api_key, conversation_key=conversation_key,
        log_requests=log_requests, server_kind=server_kind,
    )
    site = _ScriptedSite(resource)
    site.displayTracebacks = False
    site.noisy = False
    factory = _TrackingFactory(site)
    factory.noisy = False
    listening = reactor.listenTCP(port, factory, backlog=backlog, interface=interface)
    server = TestServer(resource, listening, factory, interface)
    log.info(
        "Scripted model {model} listening on {url} (answers come from a script, not a model)",
        model=model.model_name,
        url=server.url,
    )
    return defer.succeed(server)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ai_tools.testing SCENARIO [--port N] [--interface H] [--quiet]
    [--server-kind KIND --context-window N [--slots N]]``."""
    import argparse

    from twisted.logger import globalLogBeginner, textFileLogObserver

    reactor: IReactorCore = global_reactor()
    parser = argparse.ArgumentParser(
        prog="python -m ai_tools.testing",
        description="Serve a scripted OpenAI-compatible model from a scenario file.",
    )
    parser.add_argument("scenario", help="scenario file (.json or .toml)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--interface", default="127.0.0.1")
    parser.add_argument("--quiet", action="store_true", help="do not log each request")
    parser.add_argument("--server-kind", choices=SERVER_KINDS, default="openai",
                        help="answer metadata requests as this kind of server does")
    parser.add_argument("--context-window", type=int, default=None,
                        help="the window the server reports (and enforces), in tokens")
    parser.add_argument("--slots", type=int, default=1, help="llama.cpp's --parallel")
    args = parser.parse_args(argv)
    try:
        script = Script.from_file(args.scenario)
    except (OSError, ValueError) as e:
        print(f"cannot load scenario: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        observer = textFileLogObserver(sys.stderr)
        globalLogBeginner.beginLoggingTo([observer])
    try:
        kind = ServerKind(args.server_kind, args.context_window, args.slots)
        server_d = start_test_server(script, reactor, interface=args.interface, port=args.port,
                                     log_requests=not args.quiet, server_kind=kind)
    except Exception as e:  # e.g. the port is taken
        print(f"cannot listen: {e}", file=sys.stderr)
        return 2

    def started(server: TestServer) -> None:
        print(f"scripted model {server.model_name} listening on {server.url}", flush=True)

    server_d.addCallback(started)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
