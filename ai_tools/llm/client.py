"""An OpenAI-compatible chat-completions client over treq.

One :class:`OpenAIChatClient` per model profile.  Its transport is treq over
public ``Agent`` composition (see :mod:`ai_tools.llm.transport`): by default
an ``Agent`` on a persistent ``HTTPConnectionPool`` the client owns (closed
by :meth:`OpenAIChatClient.close`); the tests give another innermost
``agent`` (``treq.testing``'s ``RequestTraversalAgent``) and drive the same
transport.

Each :meth:`OpenAIChatClient.complete` is a :class:`~ai_tools.llm.call.ModelCall`
running :class:`~ai_tools.llm.exchange.Exchange` attempts over the client's
:class:`~ai_tools.llm.channel.ModelChannel`.  The client caps concurrent
requests with a ``DeferredSemaphore``, streams answers through a byte-level
SSE parser into the semantic events of spec 003, retries 429, 5xx and
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
from twisted.web.client import HTTPConnectionPool
from twisted.web.iweb import IAgent
from zope.interface import implementer

from ai_tools.errors import LLMError, LLMRequestError
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.breaker import CircuitBreaker
from ai_tools.llm.call import ModelCall
from ai_tools.llm.channel import ModelChannel
from ai_tools.llm.consumer import EventCallback
from ai_tools.llm.events import ChatResponse
from ai_tools.llm.profile import ModelProfile
from ai_tools.llm.tokens import context_window_for
from ai_tools.llm.transport import http_client, pooled_agent
from ai_tools.retry import DEFAULT_RETRY_POLICY, RetryPolicy

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
__all__ = ["OpenAIChatClient"]


@implementer(ILLMClient)
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
    _pool: HTTPConnectionPool | None = attrs.field(default=None, init=False)
    _channel: ModelChannel = attrs.field(init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        # The defaults that need the other fields (object.__setattr__: the fields are frozen).
        if self.reactor is None:
            from twisted.internet import reactor

            object.__setattr__(self, "reactor", reactor)
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
        )

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
        """Context window in tokens (configured, else known for the model)."""
        return context_window_for(self.profile.model, self.profile.context_window)

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        stream: bool | None = None,
        on_event: EventCallback | None = None,
        *,
        extra_body: Mapping[str, Any] | None = None,
    ) -> defer.Deferred[ChatResponse]:
        """Ask the model; fires with a :class:`ChatResponse`.

        ``tools`` are OpenAI tool dicts or objects with a ``schema()`` method;
        ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"``, a tool name
        or a dict.  ``stream`` None follows the profile.  ``on_event`` gets each
        semantic event as it arrives.  Fails with an
        :class:`~ai_tools.errors.LLMError` subclass carrying ``partial_text``.
        """
        if self._closed:
            return defer.fail(LLMError(f"model client for {self.profile.label} is closed"))
        streaming = self.profile.stream if stream is None else bool(stream)
        try:
            body = self._request_body(messages, tools, tool_choice, streaming, extra_body)
        except (TypeError, ValueError) as e:
            return defer.fail(LLMRequestError(f"cannot encode the request: {e}"))
        call = ModelCall(self._channel, body, streaming, on_event)
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

    # -- the request ----------------------------------------------------------------

    def _request_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None,
        tool_choice: Any,
        streaming: bool,
        extra_body: Mapping[str, Any] | None,
    ) -> bytes:
        body: dict[str, Any] = {"model": self.profile.model, "messages": list(messages)}
        if tools and self.profile.tool_calling == "native":
            body["tools"] = [
                t.schema() if callable(getattr(t, "schema", None)) else dict(t) for t in tools
            ]
            if tool_choice is not None:
                body["tool_choice"] = _tool_choice(tool_choice)
        body["stream"] = streaming
        if streaming and self.profile.stream_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(self.profile.extra_body)
        if extra_body:
            body.update(extra_body)
        return _ENCODER.encode(body).encode("utf-8")


def _tool_choice(choice: Any) -> Any:
    """A tool name becomes the ``{"type": "function", ...}`` object; the rest is sent as is."""
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": choice}}
    return choice
