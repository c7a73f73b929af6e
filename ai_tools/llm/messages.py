"""Chat-history messages for tool calls, in both history formats (native and fallback).

Native format (models with tool calling): an assistant message carrying
``tool_calls``, answered by one ``{"role": "tool", "tool_call_id": ...}`` message
per call.  Fallback format (models without): the assistant message holds the
call as JSON text, and the result comes back as a user message starting with
``[TOOL RESULT: name]``.  Only normal calls go into history; exit calls are
signals and never need an answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ai_tools.history_format import (
    FALLBACK_RESULT_PREFIX,
    fallback_result_text,
    is_fallback_result,
)
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.llm.events import ToolCall

__all__ = [
    "FALLBACK_RESULT_PREFIX",
    "assistant_tool_calls_message",
    "fallback_call_message",
    "fallback_result_message",
    "is_fallback_result",
    "tool_result_message",
]


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def assistant_tool_calls_message(
    calls: Iterable[ToolCall], content: str | None = None
) -> JSONObject:
    """Native: the assistant message asking for ``calls`` (pass normal calls only)."""
    return {
        "role": "assistant",
        "content": content or "",
        "tool_calls": [call.to_openai() for call in calls],
    }


def tool_result_message(call: ToolCall | str, result: JSONMapping | str) -> JSONObject:
    """Native: the answer to one call (``call`` is the call or its id)."""
    call_id = call.id if isinstance(call, ToolCall) else call
    content = result if isinstance(result, str) else _json(dict(result))
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def fallback_call_message(call: ToolCall) -> JSONObject:
    """Fallback: the assistant message holding the call as JSON text."""
    body: dict[str, object] = {"tool": call.name, "parameters": dict(call.arguments)}
    if call.reasoning:
        body["reasoning"] = call.reasoning
    return {"role": "assistant", "content": _json(body)}


def fallback_result_message(name: str, result: JSONMapping | str) -> JSONObject:
    """Fallback: the result of tool ``name`` as a user message."""
    content = result if isinstance(result, str) else _json(dict(result))
    return {"role": "user", "content": fallback_result_text(name, content)}

