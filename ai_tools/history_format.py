"""What a conversation-history entry looks like, and how a saved history is made valid again.

The one place for the rules of a history entry: how a fallback-format tool
result starts (:data:`FALLBACK_RESULT_PREFIX`, :func:`fallback_result_text`,
:func:`is_fallback_result`), the text of a message content
(:func:`content_text`), and the repair after a crash.  It sits in the bottom
layer so the model client, the tool engine, the loop and the stores all import
it downward; the stores call the repair, they do not own it.

A process can stop between the moment a model asked for a tool call (the
assistant message is saved) and the moment the tool's answer is saved.  Models
reject a history in which a tool call has no answer, so on load every such call
gets a synthetic "interrupted" result.  This module is pure (no I/O, no
Twisted).

Two history formats exist:

* native: an assistant message with ``tool_calls``, answered by
  ``{"role": "tool", "tool_call_id": ...}`` messages;
* fallback: an assistant message whose content is a JSON call
  (``{"tool": ..., ...}`` or a list of them), answered by user messages that
  start with ``[TOOL RESULT: name]``.

Besides adding missing answers, :func:`repair_history` drops native tool
results that answer no pending call (orphans and duplicates), since those are
refused by chat-completion servers too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

import attrs

from ai_tools.json_types import JSONMapping

INTERRUPTED_ERROR = "interrupted: the process stopped before this tool call finished"
"""The error text of a synthetic result."""

INTERRUPTED_CONTENT = json.dumps({"success": False, "error": INTERRUPTED_ERROR})
"""The content of a synthetic result (the JSON a tool failure produces)."""

FALLBACK_RESULT_PREFIX = "[TOOL RESULT:"
"""How a fallback-format tool result (a user message) starts.

Written as ``[TOOL RESULT: name]`` (:func:`fallback_result_text`); recognised
with or without the space, since histories saved by earlier versions hold both.
"""

_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```$", re.DOTALL)


@attrs.frozen
class RepairReport:
    """What :func:`repair_history` changed."""

    added: int = 0
    """Synthetic "interrupted" results inserted."""

    dropped: int = 0
    """Native tool results removed because they answered no pending call."""

    @property
    def changed(self) -> bool:
        """Whether the history was modified."""
        return bool(self.added or self.dropped)


def fallback_result_text(tool_name: str, content: str) -> str:
    """The content of a fallback-format result: ``[TOOL RESULT: name]``, a newline, ``content``."""
    return f"{FALLBACK_RESULT_PREFIX} {tool_name}]\n{content}"


def is_fallback_result(message: JSONMapping) -> bool:
    """Whether ``message`` is a fallback-format tool result (not a real user line)."""
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, str)
        and content.startswith(FALLBACK_RESULT_PREFIX)
    )


def fallback_result_parts(message: JSONMapping) -> tuple[str, str] | None:
    """The tool name and the result text of a fallback-format result; ``None`` for another message.

    Reads ``[TOOL RESULT: name]`` and ``[TOOL RESULT:name]`` alike.
    """
    if not is_fallback_result(message):
        return None
    heading, _, body = str(message["content"]).partition("\n")
    name = heading[len(FALLBACK_RESULT_PREFIX):].strip()
    return (name[:-1].strip() if name.endswith("]") else name), body


def content_text(content: object) -> str:
    """The text of a message content: a string, or a list of content parts.

    Text parts are joined as they came (they are pieces of one text); a part
    without text (an image) adds nothing; any other value is its JSON.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "") if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return json.dumps(content, ensure_ascii=False, default=str)


def interrupted_tool_message(tool_call_id: str) -> dict[str, object]:
    """The synthetic native answer for an unanswered call."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": INTERRUPTED_CONTENT}


def interrupted_fallback_message(tool_name: str) -> dict[str, object]:
    """The synthetic fallback answer (a user message) for an unanswered call."""
    return {
        "role": "user",
        "content": fallback_result_text(tool_name, INTERRUPTED_CONTENT),
    }


def fallback_tool_calls(content: object) -> list[str]:
    """Names of the tools called by a fallback-format assistant ``content``.

    The content is a JSON object with a string ``"tool"`` key, or a list of
    such objects, optionally inside a Markdown code fence.  Anything else
    (plain prose, other JSON) is not a call and gives ``[]``.
    """
    if not isinstance(content, str):
        return []
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text or text[0] not in "{[":
        return []
    try:
        parsed = json.loads(text)
    except ValueError:
        return []
    calls = parsed if isinstance(parsed, list) else [parsed]
    names: list[str] = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
            return []
        names.append(call["tool"])
    return names


def _native_call_ids(message: JSONMapping) -> list[str]:
    ids: list[str] = []
    for call in cast("Iterable[object]", message.get("tool_calls") or ()):
        if isinstance(call, Mapping) and call.get("id") is not None:
            ids.append(str(call["id"]))
    return ids


def repair_history(
    history: Sequence[JSONMapping],
) -> tuple[list[dict[str, object]], RepairReport]:
    """Return a copy of ``history`` in which every tool call has exactly one answer.

    Missing answers are inserted right after the answers that do exist (so the
    order stays assistant → its results → whatever came next).  The input is
    not modified.
    """
    repaired: list[dict[str, object]] = []
    added = dropped = 0
    pending_native: list[str] = []  # ids of the current block still unanswered
    answered_native: set[str] = set()
    pending_fallback: list[str] = []  # tool names still awaiting a [TOOL RESULT]

    def close_block() -> None:
        nonlocal added
        for call_id in pending_native:
            repaired.append(interrupted_tool_message(call_id))
            added += 1
        for name in pending_fallback:
            repaired.append(interrupted_fallback_message(name))
            added += 1
        pending_native.clear()
        pending_fallback.clear()

    for original in history:
        message = dict(original)
        role = message.get("role")
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id in pending_native:
                pending_native.remove(call_id)
                answered_native.add(call_id)
                repaired.append(message)
            else:
                dropped += 1  # orphan or duplicate answer
            continue
        if pending_fallback and is_fallback_result(message):
            pending_fallback.pop(0)
            repaired.append(message)
            continue
        close_block()
        repaired.append(message)
        if role == "assistant":
            pending_native.extend(_native_call_ids(message))
            if not pending_native:
                pending_fallback.extend(fallback_tool_calls(message.get("content")))
    close_block()
    return repaired, RepairReport(added=added, dropped=dropped)


def unanswered_tool_calls(history: Sequence[JSONMapping]) -> list[str]:
    """Ids (native) or names (fallback) of tool calls without an answer.

    Empty for a valid history; used by tests and by callers that only want to
    check, not fix.
    """
    missing: list[str] = []
    pending_native: list[str] = []
    pending_fallback: list[str] = []
    for message in history:
        role = message.get("role")
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id in pending_native:
                pending_native.remove(call_id)
            continue
        if pending_fallback and is_fallback_result(message):
            pending_fallback.pop(0)
            continue
        missing.extend(pending_native)
        missing.extend(pending_fallback)
        pending_native, pending_fallback = [], []
        if role == "assistant":
            pending_native = _native_call_ids(message)
            if not pending_native:
                pending_fallback = fallback_tool_calls(message.get("content"))
    missing.extend(pending_native)
    missing.extend(pending_fallback)
    return missing


def repair_state(state: JSONMapping) -> tuple[dict[str, object], RepairReport]:
    """Repair the ``"history"`` list of an assistant state dict (a copy is returned)."""
    result = dict(state)
    history = result.get("history")
    if not isinstance(history, list):
        return result, RepairReport()
    result["history"], report = repair_history(history)
    return result, report
