"""Turn streamed chat-completion chunks into the semantic events of spec 003.

An OpenAI-compatible server streams ``chat.completion.chunk`` objects as SSE
``data:`` lines and ends with ``data: [DONE]``.  Text arrives as ``delta.content``
fragments; tool calls arrive as ``delta.tool_calls`` fragments keyed by
``index`` (id and name in the first fragment, the arguments JSON spread over
many).  :class:`ChatStreamAssembler` emits a :class:`TextDelta` per text
fragment, assembles the calls, and at the end emits one
:class:`AssistantMessageFinal` followed by :class:`StreamDone`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ai_tools.llm.events import (
    AssistantMessageFinal,
    ChatResponse,
    LLMEvent,
    ServerError,
    StreamDone,
    TextDelta,
    UsageUpdate,
)
from ai_tools.llm.sse import SSEEvent


class StreamProtocolError(ValueError):
    """A chunk of the stream is not what an OpenAI-compatible server sends."""


class _PendingCall:
    __slots__ = ("arguments", "id", "name", "type")

    def __init__(self) -> None:
        self.id = ""
        self.type = "function"
        self.name = ""
        self.arguments: list[str] = []


class ChatStreamAssembler:
    """Accumulates one streamed completion; ``feed(SSEEvent) -> [events]``.

    ``finished`` becomes True at ``[DONE]``.  :meth:`response` builds the
    :class:`ChatResponse` from what arrived (also after a failure, to keep the
    partial output).
    """

    def __init__(self) -> None:
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.model = ""
        self.finished = False
        self.error: Mapping[str, Any] | str | None = None
        self._calls: dict[int, _PendingCall] = {}

    @property
    def text(self) -> str:
        """The text received so far."""
        return "".join(self.text_parts)

    def feed(self, sse: SSEEvent) -> list[LLMEvent]:
        """Interpret one SSE event."""
        if self.finished:
            return []
        data = sse.data
        if data == "[DONE]" or data.strip() == "[DONE]":
            return self.finish()
        if sse.event == "error":
            return [self._server_error(_loads_or_text(data))]
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise StreamProtocolError(
                f"stream chunk is not JSON ({e}): {data[:200]!r}"
            ) from None
        if not isinstance(chunk, dict):
            raise StreamProtocolError(f"stream chunk is not a JSON object: {data[:200]!r}")
        return self.feed_chunk(chunk)

    def feed_chunk(self, chunk: Mapping[str, Any]) -> list[LLMEvent]:
        """Interpret one decoded ``chat.completion.chunk`` object."""
        events: list[LLMEvent] = []
        if chunk.get("error"):
            events.append(self._server_error(chunk["error"]))
            return events
        model = chunk.get("model")
        if model and not self.model:
            self.model = str(model)
        choices = chunk.get("choices") or ()
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                    self._choice(choice, events)
        usage = chunk.get("usage")
        if isinstance(usage, Mapping) and usage:
            self.usage = dict(usage)
            events.append(UsageUpdate(self.usage))
        return events

    def finish(self) -> list[LLMEvent]:
        """End of stream: the assembled message, then StreamDone."""
        if self.finished:
            return []
        self.finished = True
        return [AssistantMessageFinal(self.message()), StreamDone()]

    def message(self) -> dict[str, Any]:
        """The assistant message assembled so far."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{index}",
                    "type": call.type or "function",
                    "function": {"name": call.name, "arguments": "".join(call.arguments)},
                }
                for index, call in sorted(self._calls.items())
            ]
        if self.reasoning_parts:
            message["reasoning_content"] = "".join(self.reasoning_parts)
        return message

    def response(self) -> ChatResponse:
        """The :class:`ChatResponse` for what arrived."""
        return ChatResponse.from_message(
            self.message(), finish_reason=self.finish_reason, usage=self.usage, model=self.model
        )

    def _server_error(self, error: Any) -> ServerError:
        if not isinstance(error, Mapping | str):
            error = str(error)
        self.error = error
        return ServerError(error)

    def _choice(self, choice: Mapping[str, Any], events: list[LLMEvent]) -> None:
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            # Some servers stream whole messages instead of deltas.
            delta = choice.get("message")
        if isinstance(delta, Mapping):
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text_parts.append(content)
                events.append(TextDelta(content))
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self.reasoning_parts.append(reasoning)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for position, fragment in enumerate(calls):
                    if isinstance(fragment, Mapping):
                        self._tool_fragment(fragment, position)
        finish = choice.get("finish_reason")
        if finish:
            self.finish_reason = str(finish)

    def _tool_fragment(self, fragment: Mapping[str, Any], position: int) -> None:
        index = fragment.get("index")
        if not isinstance(index, int):
            # Servers that send each call whole, without an index.
            index = len(self._calls) if fragment.get("id") else max(position, 0)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _PendingCall()
        if fragment.get("id"):
            call.id = str(fragment["id"])
        if fragment.get("type"):
            call.type = str(fragment["type"])
        function = fragment.get("function")
        if isinstance(function, Mapping):
            name = function.get("name")
            if isinstance(name, str) and name:
                call.name = name if not call.name else call.name
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call.arguments.append(arguments)
            elif isinstance(arguments, Mapping):
                call.arguments.append(json.dumps(dict(arguments), ensure_ascii=False))


def _loads_or_text(data: str) -> Any:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return data
    if isinstance(value, Mapping) and "error" in value:
        return value["error"]
    return value
