"""A plain (not streamed) chat-completion answer: JSON body in, ChatResponse and events out.

The same events come out as for a stream (one :class:`TextDelta` with the
whole text, the usage, the final message, :class:`StreamDone`), so callers
handle one shape; the same answer cap and repeated-line check apply.
"""

from __future__ import annotations

import json
from typing import cast

from ai_tools.errors import LLMProtocolError, LLMServerError, RepeatedLineLoop
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.llm.consumer import EventCallback, emit_event
from ai_tools.llm.events import (
    AssistantMessageFinal,
    ChatResponse,
    StreamDone,
    TextDelta,
    UsageUpdate,
)
from ai_tools.llm.http_errors import server_message
from ai_tools.llm.profile import AnswerLimits, ModelProfile
from ai_tools.llm.repetition import RepeatedLineDetector
from ai_tools.llm.stream import StreamProtocolError, check_answer_size

_NOT_JSON = object()


def parse_completion(
    raw: bytes,
    profile: ModelProfile,
    limits: AnswerLimits,
    on_event: EventCallback | None,
) -> ChatResponse:
    """The :class:`ChatResponse` of a plain answer; its events go to ``on_event``.

    Raises :class:`~ai_tools.errors.LLMProtocolError` for a body that is not
    a chat completion or is over ``limits.answer_chars``,
    :class:`~ai_tools.errors.LLMServerError` for an error object in a 200,
    :class:`~ai_tools.errors.RepeatedLineLoop` for a looping text.
    """
    url = profile.chat_url
    data = _decode(raw, url)
    choice, message = _first_choice(data, raw, url)
    if message.get("content", "") is None:  # (beside tool calls): "" is what every server takes
        message = {**message, "content": ""}
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else None
    response = ChatResponse.from_message(
        message,
        finish_reason=cast("str | None", choice.get("finish_reason")),
        usage=usage,
        model=str(data.get("model") or profile.model),
    )
    try:
        check_answer_size(answer_chars(response), limits.answer_chars)
    except StreamProtocolError as e:
        raise LLMProtocolError(f"{url}: {e}") from None
    if response.content and on_event is not None:
        emit_event(on_event, TextDelta(response.content))
    if profile.repetition.enabled and response.content:  # no text: nothing can repeat
        _check_repetition(response.content, RepeatedLineDetector(profile.repetition))
    if on_event is not None:
        if usage:
            emit_event(on_event, UsageUpdate(usage))
        emit_event(on_event, AssistantMessageFinal(response.message))
        emit_event(on_event, StreamDone())
    return response


def answer_chars(response: ChatResponse) -> int:
    """The size of an answer as the answer cap counts it: text, reasoning, arguments."""
    reasoning = response.message.get("reasoning_content") or response.message.get("reasoning")
    size = len(response.content) + (len(reasoning) if isinstance(reasoning, str) else 0)
    return size + sum(len(call.raw_arguments) for call in response.tool_calls)


def _decode(raw: bytes, url: str) -> JSONObject:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        # Raised below, outside this handler: an error raised here would carry the
        # decoder's exception, its traceback and every frame of it as context.
        data = _NOT_JSON
    if data is _NOT_JSON:
        raise LLMProtocolError(f"200 from {url} but the body is not JSON: {server_message(raw)}")
    if not isinstance(data, dict):
        raise LLMProtocolError(f"200 from {url} but the body is not a JSON object")
    if data.get("error"):
        raise LLMServerError(f"200 from {url} carrying an error: {server_message(raw)}", url=url)
    return data


def _first_choice(
    data: JSONMapping, raw: bytes, url: str
) -> tuple[JSONMapping, JSONMapping]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMProtocolError(f"200 from {url} but the answer has no choices: {raw[:200]!r}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise LLMProtocolError(f"200 from {url} but choices[0] has no message")
    return choice, message


def _check_repetition(text: str, detector: RepeatedLineDetector) -> None:
    detector.feed(text)
    if detector.finish():
        raise RepeatedLineLoop(f"the model repeated itself ({detector.repeated!r})", text)
