"""Values a model request produces: streamed semantic events, tool calls, the response.

The streamed events are the semantic ones: a tool loop consumes
:class:`TextDelta`, :class:`AssistantMessageFinal`, :class:`StreamDone`,
:class:`ServerError` and :class:`UsageUpdate` without knowing how the transport
framed them.  A non-streaming request produces the same events (one
``TextDelta`` with the whole text), so callers handle one shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import cast

import attrs

from ai_tools.json_encoding import canonical_json
from ai_tools.json_types import JSONMapping, JSONObject


@attrs.frozen
class TextDelta:
    """A fragment of the assistant's visible text, in arrival order."""

    text: str


@attrs.frozen
class AssistantMessageFinal:
    """The complete assistant message, tool-call deltas assembled.

    ``message`` is a chat-completion message dict (``role``, ``content``, and
    ``tool_calls`` when the model called tools) ready to go into history.
    """

    message: JSONMapping


@attrs.frozen
class StreamDone:
    """The model finished; no more events follow."""


@attrs.frozen
class ServerError:
    """An error the server reported inside an otherwise successful response."""

    error: JSONMapping | str


@attrs.frozen
class UsageUpdate:
    """Token usage (and timing, where the server reports it)."""

    usage: JSONMapping


@attrs.frozen
class RequestAttempt:
    """One HTTP attempt of a model request is about to be sent (retries included).

    Given to the ``on_attempt`` observer of
    :meth:`~ai_tools.llm.client.OpenAIChatClient.complete` (tracing): ``headers``
    is the one thing an observer may change — what it puts there (text names and
    values, e.g. the W3C ``traceparent``) goes out with this attempt only.
    ``retry_of`` is why the previous attempt failed (None for the first).
    """

    attempt: int
    url: str
    headers: dict[str, str] = attrs.field(factory=dict)
    retry_of: str | None = None


AttemptCallback = Callable[[RequestAttempt], object]
"""An observer of a model request's HTTP attempts."""


LLMEvent = TextDelta | AssistantMessageFinal | StreamDone | ServerError | UsageUpdate
"""Any streamed semantic event."""


@attrs.frozen(slots=False)  # (not slotted: arguments_json is kept in the instance)
class ToolCall:
    """One tool call asked for by the model: the one call type of the whole engine.

    ``arguments`` is the decoded argument object; ``raw_arguments`` the text the
    model produced.  When that text is not a JSON object, ``arguments`` is
    empty and ``arguments_error`` says why, so the parser can report a
    ``tool_parse_error`` without losing what the model wrote.  ``native`` is
    False for calls found in the message text (fallback mode).
    """

    id: str
    name: str
    arguments: JSONMapping = attrs.field(factory=dict)
    raw_arguments: str = ""
    reasoning: str | None = None
    native: bool = True
    arguments_error: str | None = None

    @property
    def arguments_json(self) -> str:
        """The arguments as canonical JSON (compact, sorted keys), computed once.

        The text the history records for the call: the same arguments always
        give the same text.  Raises TypeError/ValueError when the arguments are
        not plain JSON (NaN, a non-string key...).
        """
        text: str | None = self.__dict__.get("_arguments_json")
        if text is None:
            text = canonical_json(self.arguments)
            object.__setattr__(self, "_arguments_json", text)  # (frozen: kept, not changed)
        return text

    @classmethod
    def from_openai(cls, call: JSONMapping, index: int = 0) -> ToolCall:
        """Build a call from an OpenAI ``tool_calls`` entry (never raises).

        Accepts ``arguments`` as a JSON string (OpenAI, vLLM) or already as an
        object (Ollama); an empty string means no arguments.
        """
        function = call.get("function")
        if not isinstance(function, Mapping):
            function = {}
        name = function.get("name")
        call_id = call.get("id")
        raw = function.get("arguments")
        arguments, raw_text, problem = decode_arguments(raw)
        return cls(
            id=str(call_id) if call_id else f"call_{index}",
            name=name if isinstance(name, str) else "",
            arguments=arguments,
            raw_arguments=raw_text,
            arguments_error=problem,
        )

    def to_openai(self) -> JSONObject:
        """The OpenAI ``tool_calls`` entry for history (arguments as JSON text)."""
        if self.arguments_error is None:
            raw = json.dumps(dict(self.arguments), ensure_ascii=False)
        else:
            raw = self.raw_arguments
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": raw},
        }


def decode_arguments(raw: object) -> tuple[JSONObject, str, str | None]:
    """Decode tool-call arguments: ``(object, raw text, problem or None)``."""
    if raw is None:
        return {}, "", None
    if isinstance(raw, Mapping):
        return dict(raw), json.dumps(dict(raw), ensure_ascii=False), None
    if not isinstance(raw, str):
        text = json.dumps(raw, ensure_ascii=False)
        return {}, text, f"arguments must be a JSON object, got {type(raw).__name__}"
    if not raw.strip():
        return {}, raw, None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return {}, raw, f"arguments are not valid JSON ({e})"
    if not isinstance(value, dict):
        return {}, raw, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, raw, None


@attrs.frozen
class ChatResponse:
    """What one chat completion produced.

    ``content`` is the full assistant text (empty when the model only called
    tools); ``tool_calls`` the native calls in order; ``message`` the assistant
    message as the server sent it (or as assembled from the stream), usable
    as-is in history.
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: JSONMapping | None = None
    model: str = ""
    message: JSONMapping = attrs.field(factory=dict)
    attempts: int = 1
    """HTTP requests the call sent to get this answer (retries included)."""
    queued: float = 0.0
    """Seconds the call waited in the client's queue for one of the server's slots."""

    @property
    def text(self) -> str:
        """Alias of :attr:`content`."""
        return self.content

    @classmethod
    def from_message(
        cls,
        message: JSONMapping,
        finish_reason: str | None = None,
        usage: JSONMapping | None = None,
        model: str = "",
    ) -> ChatResponse:
        """Build a response from an assistant message dict."""
        content = message.get("content")
        raw_calls = message.get("tool_calls") or ()
        calls = tuple(
            ToolCall.from_openai(c, i)
            for i, c in enumerate(cast("Iterable[object]", raw_calls))
            if isinstance(c, Mapping)
        )
        return cls(
            content=content if isinstance(content, str) else "",
            tool_calls=calls,
            finish_reason=finish_reason,
            usage=usage,
            model=model,
            message=dict(message),
        )
