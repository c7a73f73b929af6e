"""An OpenAI-compatible chat-completions client over treq.

One :class:`OpenAIChatClient` per model profile.  Its transport is treq over
public ``Agent`` composition (see :mod:`ai_tools.llm.transport`): by default
an ``Agent`` on a persistent ``HTTPConnectionPool`` the client owns (closed
by :meth:`OpenAIChatClient.close`); the tests give another innermost
``agent`` (``treq.testing``'s ``RequestTraversalAgent``) and drive the same
transport.

Each :meth:`OpenAIChatClient.complete` is a :class:`~ai_tools.llm.call.ModelCall`
running :class:`~ai_tools.llm.exchange.Exchange` attempts over the client's
:class:`~ai_tools.llm.channel.ModelChannel`.  The client never sends its
server more requests than it serves at once (:mod:`ai_tools.llm.server`: the
slots learned from the server, the rest waiting in a queue fair between
assistants, see :meth:`OpenAIChatClient.for_assistant`), streams answers through a byte-level
SSE parser into semantic events (text deltas, the final message, done), retries 429, 5xx and
connection failures with the shared :class:`~ai_tools.retry.RetryPolicy`
(honouring ``Retry-After``), fails at once with a clear message on 400, 401,
403 and 404, stops calling a failing server through a circuit breaker, bounds
every answer (bytes, characters, lines) and every wait, and keeps the API key
out of everything it hands back.

Cancelling the Deferred returned by :meth:`OpenAIChatClient.complete` aborts
the HTTP connection, wherever the request is (waiting for a slot, for
headers, mid-stream, or in a back-off wait).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from twisted.internet import defer
from twisted.logger import LogLevel
from twisted.python.failure import Failure
from twisted.web.client import HTTPConnectionPool
from twisted.web.iweb import IAgent
from zope.interface import implementer

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import LLMError, LLMRequestError
from ai_tools.interfaces import (
    IAttemptObservingLLMClient,
    IModelServerClient,
    IProfiledLLMClient,
)
from ai_tools.json_types import JSONMapping
from ai_tools.llm.assistant_model import AssistantModel
from ai_tools.llm.breaker import BreakerState, CircuitBreaker
from ai_tools.llm.call import ModelCall
from ai_tools.llm.channel import ModelChannel
from ai_tools.llm.consumer import EventCallback
from ai_tools.llm.events import AttemptCallback, ChatResponse
from ai_tools.llm.profile import ModelProfile, default_max_tokens
from ai_tools.llm.server import ModelServer
from ai_tools.llm.transport import http_client, pooled_agent
from ai_tools.llm.window import Found, ServerFacts, discover_window
from ai_tools.retry import DEFAULT_RETRY_POLICY, RetryPolicy

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
__all__ = ["OpenAIChatClient"]


@implementer(IProfiledLLMClient, IAttemptObservingLLMClient, IModelServerClient)
@attrs.define(eq=False, repr=False)
class OpenAIChatClient:
    """Chat completions against one OpenAI-compatible server.

    Everything but ``profile`` is optional: ``reactor`` (the global one by
    default), ``agent`` (the innermost ``IAgent`` under treq; by default an
    ``Agent`` on a pool of the client's own), ``retry_policy``, ``breaker``,
    ``environ`` (where the API key is read, at each request) and ``rand``
    (the jitter source).
    """

    # Fixed once built: the client's channel holds them.
    profile: ModelProfile = attrs.field(on_setattr=attrs.setters.frozen)
    reactor: Any = attrs.field(default=None, on_setattr=attrs.setters.frozen)
    agent: IAgent | None = attrs.field(default=None, on_setattr=attrs.setters.frozen)
    retry_policy: RetryPolicy = attrs.field(default=DEFAULT_RETRY_POLICY,
                                            on_setattr=attrs.setters.frozen)
    breaker: CircuitBreaker | None = attrs.field(default=None, on_setattr=attrs.setters.frozen)
    environ: Mapping[str, str] | None = attrs.field(default=None,
                                                    on_setattr=attrs.setters.frozen)
    rand: Callable[[], float] = attrs.field(default=random.random,
                                            on_setattr=attrs.setters.frozen)
    wall_clock: Callable[[], float] = attrs.field(default=time.time,
                                                  on_setattr=attrs.setters.frozen)
    server: ModelServer | None = attrs.field(default=None, on_setattr=attrs.setters.frozen)
    """The model server, shared with the other clients pointed there (one of its own
    when None): its slots, its fair queue, its breaker."""
    _pool: HTTPConnectionPool | None = attrs.field(default=None, init=False)
    _discovery: list[defer.Deferred[int]] | None = attrs.field(default=None, init=False)
    _channel: ModelChannel = attrs.field(init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _assistants: dict[str, AssistantModel] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        # The defaults that need the other fields (object.__setattr__: the fields are frozen).
        if self.reactor is None:
            object.__setattr__(self, "reactor", global_reactor())
        if self.breaker is None:
            object.__setattr__(self, "breaker", CircuitBreaker(
                self.reactor,
                failure_threshold=self.profile.breaker_threshold,
                cooldown=self.profile.breaker_cooldown,
                name=self.profile.label,
            ))
        agent = self.agent
        if agent is None:
            agent, self._pool = pooled_agent(
                self.reactor, self.profile.timeouts.connect, self.profile.max_concurrency
            )
        assert self.breaker is not None
        self._channel = ModelChannel(
            self.profile,
            self.reactor,
            http_client(agent),
            breaker=self.breaker,
            retry_policy=self.retry_policy,
            environ=self.environ,
            rand=self.rand,
            wall_clock=self.wall_clock,
            pool=self._pool,
            server=self.server,
        )
        if self.server is None:
            object.__setattr__(self, "server", self._channel.server)

    def __repr__(self) -> str:
        # Never show environ: it may hold the API key.
        return f"<OpenAIChatClient {self.profile.label}>"

    # -- ILLMClient -----------------------------------------------------------------

    @property
    def model(self) -> str:
        """Model name sent to the server."""
        return self.profile.model

    @property
    def context_window(self) -> int:
        """Context window in tokens: what the server reports (see
        :mod:`ai_tools.llm.window`), the configured one (the smaller of the two when
        both), else a known model's, else 8,192."""
        return self._channel.window.tokens

    @property
    def reply_cap_field(self) -> str:
        """The request field carrying the reply cap: ``max_tokens``, or
        ``max_completion_tokens`` once the server refused the other."""
        return self._channel.reply_cap_field

    @property
    def status_at_end_default(self) -> bool:
        """Whether loops on this server put their per-step status after the history by
        default (its prompt cache then keeps the conversation between steps): where the
        server's chat template is known to take a system message there."""
        return self._channel.server.takes_status_at_end()

    @property
    def context_window_source(self) -> str:
        """Where :attr:`context_window` comes from, in words (for status pages and logs)."""
        return self._channel.window.source

    def learn_context_window(self) -> defer.Deferred[int]:
        """Ask the server for the model's context window (once); fires with the window in
        use, logged with where it came from.  Never fails: a server that cannot be
        reached leaves the window as it is (and is asked again at the next call)."""
        window = self._channel.window
        if window.settled:
            window.report()
            return defer.succeed(window.tokens)
        waiter: defer.Deferred[int] = defer.Deferred()
        if self._discovery is not None:
            self._discovery.append(waiter)
        else:
            self._discovery = [waiter]
            facts = ServerFacts()
            discover_window(self.profile, self._channel.fetch, facts).addBoth(
                self._discovered, facts)
        return waiter

    def _discovered(self, found: Found | Failure, facts: ServerFacts) -> None:
        window = self._channel.window
        closed_meanwhile = isinstance(found, Failure) and self._closed
        if not closed_meanwhile:  # (the service stopping: the failure is ours, not the server's)
            self._learn_server(facts)
        if closed_meanwhile:
            pass
        elif isinstance(found, Failure):
            self._channel.log.warn(
                "Model {label}: could not ask the server for its context window ({error}); "
                "using {tokens} tokens for now", label=self.profile.label,
                error=found.getErrorMessage(), tokens=window.tokens)
        else:
            window.settled = True
            if found is not None:
                window.learn(*found)
            else:
                window.report()
        waiters, self._discovery = self._discovery or [], None
        for waiter in waiters:
            waiter.callback(window.tokens)

    def _learn_server(self, facts: ServerFacts) -> None:
        """What the server told of itself (its kind, slots, chat template), kept."""
        channel = self._channel
        kind = self.profile.server_kind or facts.kind
        channel.server.learn(kind, facts.slots, facts.chat_template)
        if kind == "llama-cpp-python" and self.profile.tool_choice == "auto":
            channel.whole_tool_answers("llama-cpp-python cannot stream a tool call the "
                                       "model chose", LogLevel.info)

    def for_assistant(self, name: str) -> AssistantModel:
        """This client as assistant ``name`` uses it: its calls take their turn in the
        server's queue as that assistant's, behind a breaker of its own (one
        assistant's failing requests never close the server to the others)."""
        view = self._assistants.get(name)
        if view is None:
            view = self._assistants[name] = AssistantModel(self, name, CircuitBreaker(
                self.reactor, failure_threshold=self.profile.breaker_threshold,
                cooldown=self.profile.breaker_cooldown,
                name=f"{self.profile.label} for {name}"))
        return view

    def status(self) -> dict[str, object]:
        """The client as status pages show it: the window, the server's slots and queue,
        the breakers that are not closed."""
        open_breakers = {name: view.breaker.state.value
                         for name, view in sorted(self._assistants.items())
                         if view.breaker.state is not BreakerState.CLOSED}
        return {"profile": self.profile.label, "context_window": self.context_window,
                "context_window_source": self.context_window_source,
                "stream_tool_answers": self._channel.stream_tools,
                **self._channel.server.status(), "assistant_breakers": open_breakers}

    def complete(
        self,
        messages: Sequence[JSONMapping],
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        stream: bool | None = None,
        on_event: EventCallback | None = None,
        *,
        extra_body: JSONMapping | None = None,
        on_attempt: AttemptCallback | None = None,
        party: str | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> defer.Deferred[ChatResponse]:
        """Ask the model; fires with a :class:`ChatResponse`.

        ``tools`` are OpenAI tool dicts or objects with a ``schema()`` method;
        ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"``, a tool name
        or a dict (None: the profile's, ``"auto"`` by default).  ``stream`` None
        follows the profile.  ``on_event`` gets each semantic event as it
        arrives.  Fails with an :class:`~ai_tools.errors.LLMError` subclass
        carrying ``partial_text``.  The first call waits for the window to be
        learned (:meth:`learn_context_window`): the request's default
        ``max_tokens`` comes from it.  ``on_attempt`` is told of each HTTP attempt
        before it is sent and may add headers to it
        (:class:`~ai_tools.llm.events.RequestAttempt`; tracing uses it).
        ``party`` and ``breaker`` are the assistant's
        (see :meth:`for_assistant`): whose turn the call takes in the server's queue,
        and the breaker of its own besides the server's (the client's by default).
        """
        if self._closed:
            return defer.fail(LLMError(f"model client for {self.profile.label} is closed"))
        request = _Request(self, messages, tools, tool_choice, extra_body)
        streaming = self.profile.stream if stream is None else bool(stream)
        owner = (party, self.breaker if breaker is None else breaker)
        if self._channel.window.settled:
            return self._start(request, streaming, on_event, owner, on_attempt)
        inner: list[defer.Deferred[Any]] = [self.learn_context_window()]
        result: defer.Deferred[ChatResponse] = defer.Deferred(lambda _: inner[0].cancel())

        def learned(_: object) -> None:
            if not result.called:
                inner[0] = self._start(request, streaming, on_event, owner, on_attempt)
                inner[0].chainDeferred(result)

        inner[0].addCallbacks(learned, lambda _: None)
        return result

    def _start(self, request: _Request, streaming: bool, on_event: EventCallback | None,
               owner: tuple[str | None, CircuitBreaker | None],
               on_attempt: AttemptCallback | None = None) -> defer.Deferred[ChatResponse]:
        if request.offers_tools and not self._channel.stream_tools:
            streaming = False
        try:
            body = request.build(streaming)
        except (TypeError, ValueError) as e:
            return defer.fail(LLMRequestError(f"cannot encode the request: {e}"))
        call = ModelCall(self._channel, body, streaming, on_event, request, on_attempt,
                         party=owner[0], breaker=owner[1])
        call.start()
        return call.result

    def close(self) -> defer.Deferred[None]:
        """Cancel requests in flight and close the pool's connections."""
        self._closed = True
        for call in list(self._channel.calls):
            call.result.cancel()
        if self._pool is not None:
            return self._pool.closeCachedConnections()
        return defer.succeed(None)


class _Request:
    """One ``complete()``'s request, encoded for streaming or not (and again when the
    call learns something that changes it: the window, the stream mode)."""

    __slots__ = ("_client", "_extra", "_messages", "_reply_room", "_tool_choice", "_tools",
                 "offers_tools")

    def __init__(self, client: OpenAIChatClient, messages: Sequence[JSONMapping],
                 tools: Sequence[Any] | None, tool_choice: Any,
                 extra_body: JSONMapping | None) -> None:
        self._client = client
        self._messages = messages
        self._tools = tools
        self._tool_choice = tool_choice
        self._extra = extra_body
        self._reply_room: int | None = None
        self.offers_tools = bool(tools) and client.profile.tool_calling == "native"

    def max_tokens(self) -> int:
        """The reply cap sent (0: none): the profile's, else the default for the window,
        lowered to the room a refusal named (:meth:`limit_reply`)."""
        profile = self._client.profile
        cap = (profile.max_tokens if profile.max_tokens is not None
               else default_max_tokens(self._client.context_window))
        room = self._reply_room
        return cap if room is None or not cap else min(cap, room)

    def limit_reply(self, tokens: int) -> bool:
        """Cap the reply at ``tokens`` (the server refused the prompt with the asked
        ``max_tokens``); True if that lowers the cap sent."""
        before = self.max_tokens()
        self._reply_room = tokens
        return bool(before) and self.max_tokens() < before

    def build(self, streaming: bool) -> bytes:
        """The request body: model, messages, tools and their choice, stream, max_tokens,
        the profile's extra body, then this call's."""
        profile = self._client.profile
        body: dict[str, object] = {"model": profile.model,
                                   "messages": sendable_messages(self._messages)}
        if self.offers_tools:
            body["tools"] = [t.schema() if callable(getattr(t, "schema", None)) else dict(t)
                             for t in self._tools or ()]
            choice = profile.tool_choice if self._tool_choice is None else self._tool_choice
            if choice is not None:
                body["tool_choice"] = _tool_choice(choice)
        body["stream"] = streaming
        if streaming and profile.stream_usage:
            body["stream_options"] = {"include_usage": True}
        max_tokens = self.max_tokens()
        if max_tokens:
            body[self._client.reply_cap_field] = max_tokens
        body.update(profile.extra_body)
        if self._extra:
            body.update(self._extra)
        return _ENCODER.encode(body).encode("utf-8")


def sendable_messages(messages: Sequence[JSONMapping]) -> list[Any]:
    """``messages`` as every server accepts them: an assistant message's ``content`` is
    ``""`` rather than null (llama-cpp-python answers 500 to null, e.g. beside
    ``tool_calls``), whatever the history holds.  Copies only the messages it changes."""
    sendable = list(messages)
    for index, message in enumerate(sendable):
        if message.get("content", "") is None and message.get("role") == "assistant":
            sendable[index] = {**message, "content": ""}
    return sendable


def _tool_choice(choice: object) -> Any:
    """A tool name becomes the ``{"type": "function", ...}`` object; the rest is sent as is."""
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": choice}}
    return choice
