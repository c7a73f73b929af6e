"""A model client as one assistant uses it: its turn in the server's queue, its own breaker.

Assistants share a model client (one per profile) and the model server behind
it.  :meth:`~ai_tools.llm.client.OpenAIChatClient.for_assistant` gives each
an :class:`AssistantModel`: an ``ILLMClient`` whose calls wait for the
server's slots as that assistant's (the queue serves assistants in turns) and
go through a circuit breaker of the assistant's own, besides the server's:
one assistant whose requests keep timing out (a 41-tool prompt on a slow
server) opens its own breaker, not the server's to the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from zope.interface import implementer

from ai_tools.errors import LLMUnavailable
from ai_tools.interfaces import (
    IAttemptObservingLLMClient,
    IProfiledLLMClient,
    IRefusingLLMClient,
)
from ai_tools.json_types import JSONMapping
from ai_tools.llm.breaker import CircuitBreaker
from ai_tools.llm.consumer import EventCallback
from ai_tools.llm.events import AttemptCallback, ChatResponse

if TYPE_CHECKING:
    from ai_tools.llm.client import OpenAIChatClient

__all__ = ["AssistantModel"]


@implementer(IProfiledLLMClient, IAttemptObservingLLMClient, IRefusingLLMClient)
class AssistantModel:
    """``client`` for assistant ``name``, behind ``breaker``.

    Everything but :meth:`complete`, :meth:`close`, :attr:`breaker` and
    :meth:`refusal` is the client's own (its window, its profile, its status).
    """

    def __init__(self, client: OpenAIChatClient, name: str, breaker: CircuitBreaker) -> None:
        self.client = client
        self.name = name
        self.breaker = breaker

    def __repr__(self) -> str:
        return f"<AssistantModel {self.client.profile.label} for {self.name}>"

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(self.client, attribute)

    @property
    def model(self) -> str:
        """Model name sent to the server."""
        return str(self.client.model)

    @property
    def context_window(self) -> int:
        """The client's context window."""
        return int(self.client.context_window)

    def refusal(self) -> LLMUnavailable | None:
        """The error a call would fail with at once now (this assistant's breaker or the
        server's is open and cooling down), else None: a tick asks before it starts."""
        # (a built client always has its server: None only asks it to make its own)
        for breaker in (self.breaker, self.client.server.breaker):  # type: ignore[union-attr]
            try:
                breaker.check()
            except LLMUnavailable as e:
                return e
        return None

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
    ) -> defer.Deferred[ChatResponse]:
        """The client's ``complete``, as this assistant's call."""
        return self.client.complete(messages, tools, tool_choice, stream, on_event,
                                    extra_body=extra_body, on_attempt=on_attempt,
                                    party=self.name, breaker=self.breaker)

    def close(self) -> defer.Deferred[None]:
        """Nothing: the client is shared; its owner closes it."""
        return defer.succeed(None)
