"""The conversation history of an assistant: the chat-completion messages it has exchanged.

Two formats exist:

* **native** — for models with tool calling: an assistant message carrying
  ``tool_calls``, answered by ``{"role": "tool", "tool_call_id": ..., "content": ...}``;
* **fallback** — for models without it: the assistant message's content is the
  JSON call ``{"tool": ..., "parameters": ..., "reasoning": ...}`` and the result
  comes back as a user message starting ``[TOOL RESULT: name]``.

The one rule a model server enforces is that every tool call has exactly one
answer.  :class:`ConversationHistory` keeps it by construction: a tool call and
its answer enter together through :meth:`ConversationHistory.add_tool_exchange`
(one list operation), and :meth:`ConversationHistory.append` refuses bare tool
calls and bare tool results.  A history loaded from storage or rewritten by
compaction goes through :meth:`ConversationHistory.replace`, which re-indexes it;
:meth:`ConversationHistory.repair` closes any call left unanswered by a crash.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ai_tools.execution.results import DEFAULT_MAX_RESULT_BYTES, clip_arguments, clip_text
from ai_tools.history_format import (
    FALLBACK_RESULT_PREFIX,
    RepairReport,
    fallback_result_text,
    is_fallback_result,
    repair_history,
    unanswered_tool_calls,
)
from ai_tools.json_encoding import model_json
from ai_tools.json_types import JSONMapping
from ai_tools.llm.events import ToolCall

__all__ = [
    "FALLBACK_RESULT_PREFIX",
    "ROLES",
    "ConversationHistory",
    "build_tool_exchange",
    "fallback_call_text",
    "is_tool_result",
]

ROLES = frozenset({"system", "user", "assistant", "tool"})
"""Roles a chat-completion message may have."""


def is_tool_result(message: JSONMapping) -> bool:
    """Whether ``message`` answers a tool call (native ``tool`` or fallback ``[TOOL RESULT``)."""
    return message.get("role") == "tool" or is_fallback_result(message)


def fallback_call_text(call: ToolCall, clipped: JSONMapping | None = None) -> str:
    """The assistant content of the fallback format: the call as a JSON object.

    ``clipped`` stands for arguments too large to keep (see :func:`build_tool_exchange`).
    """
    body: dict[str, object] = {"tool": call.name,
                            "parameters": dict(call.arguments if clipped is None else clipped)}
    if call.reasoning:
        body["reasoning"] = call.reasoning
    return json.dumps(body)


def build_tool_exchange(
    call: ToolCall,
    result_content: str,
    *,
    native: bool,
    assistant_content: str | None = None,
    max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
) -> tuple[dict[str, object], dict[str, object]]:
    """The two messages recording ``call`` and its answer ``result_content`` (JSON text).

    ``assistant_content`` is text the model wrote next to a native call; in the
    fallback format it goes before the JSON call.  The arguments and that text
    are clipped to ``max_bytes`` each (:mod:`ai_tools.execution.results`); the
    result is shaped to that limit by the engine already.
    """
    if assistant_content:
        assistant_content = clip_text(assistant_content, max_bytes)
    entry = _call_entry(call, native, max_bytes)
    return (_assistant_message(native, assistant_content, [entry]),
            _result_message(call, result_content, native))


def _call_entry(call: ToolCall, native: bool, max_bytes: int) -> Any:
    """The call as its assistant message lists it: a native entry, or the fallback JSON."""
    clipped = clip_arguments(call.arguments_json, max_bytes)
    if native:
        arguments = call.arguments_json if clipped is None else model_json(clipped)
        return {"id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": arguments}}
    return fallback_call_text(call, clipped)


def _assistant_message(native: bool, text: str | None, entries: Sequence[Any]
                       ) -> dict[str, object]:
    """The one assistant message of an answer: its text and every call it made.

    Fallback: one call is its JSON object, several a JSON array of them (both
    what the fallback parser reads and what the history repair recognises).
    """
    if native:
        return {"role": "assistant", "content": text, "tool_calls": list(entries)}
    calls = entries[0] if len(entries) == 1 else f"[{', '.join(entries)}]"
    return {"role": "assistant", "content": f"{text}\n{calls}" if text else calls}


def _result_message(call: ToolCall, result_content: str, native: bool) -> dict[str, object]:
    if native:
        return {"role": "tool", "tool_call_id": call.id, "content": result_content}
    return {"role": "user", "content": fallback_result_text(call.name, result_content)}


@attrs.define(eq=False)
class _OpenAnswer:
    """The answer whose calls the history is recording (so a later call can join it)."""

    index: int
    """Where its assistant message is."""
    version: int
    """The history's version after its last exchange: any other change closes it."""
    native: bool
    text: str | None
    entries: list[Any]


def _native_ids(message: JSONMapping) -> Iterator[str]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return
    for call in calls:
        if isinstance(call, Mapping) and call.get("id") is not None:
            yield str(call["id"])


@attrs.define(eq=False)
class ConversationHistory:
    """An assistant's messages, oldest first, with every tool call answered.

    Read it with :attr:`messages` (a copy of the list: the messages themselves
    are shared and must not be modified), iterate it, or take ``len()``.
    """

    _messages: list[dict[str, object]] = attrs.field(factory=list, alias="messages")
    _tool_call_ids: set[str] = attrs.field(init=False, factory=set)
    _version: int = attrs.field(init=False, default=0)
    _rewrites: int = attrs.field(init=False, default=0)
    _open: _OpenAnswer | None = attrs.field(init=False, default=None)

    @property
    def version(self) -> int:
        """A number that changes with every change of the messages (for caches of counts)."""
        return self._version

    @property
    def rewrites(self) -> int:
        """A number that changes when a message already there is replaced (an answer's
        assistant message gaining a call, a reload, a compaction): counts made
        message by message must start again."""
        return self._rewrites

    def __attrs_post_init__(self) -> None:
        self.replace(self._messages)

    # -- reading ---------------------------------------------------------------

    @property
    def messages(self) -> list[dict[str, object]]:
        """A new list of the messages (what a model request sends)."""
        return list(self._messages)

    def since(self, start: int) -> list[dict[str, object]]:
        """A new list of the messages from index ``start`` on (cheap for a short tail)."""
        return self._messages[start:]

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[dict[str, object]]:
        return iter(list(self._messages))

    def has_tool_call_id(self, call_id: str) -> bool:
        """Whether a native tool call with this id is already in the history."""
        return call_id in self._tool_call_ids

    def unanswered_tool_calls(self) -> list[str]:
        """Ids (native) or names (fallback) of tool calls without an answer: ``[]`` when valid."""
        return unanswered_tool_calls(self._messages)

    def to_list(self) -> list[dict[str, object]]:
        """A deep copy of the messages, for persistence."""
        return copy.deepcopy(self._messages)

    def copy(self) -> ConversationHistory:
        """An independent history with the same messages (e.g. for a reflection run)."""
        return ConversationHistory(self.to_list())

    # -- writing ---------------------------------------------------------------

    def append(self, message: JSONMapping) -> None:
        """Add a plain message (system, user, or assistant text).

        Raises ValueError for a malformed message, a ``tool`` message or an
        assistant message with ``tool_calls``: those enter only through
        :meth:`add_tool_exchange`, so no call is ever left unanswered.
        """
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in ROLES:
            raise ValueError(f"a message needs a role among {sorted(ROLES)}, got {role!r}")
        if role == "tool" or message.get("tool_calls"):
            raise ValueError("tool calls and tool results enter through add_tool_exchange()")
        self._messages.append(dict(message))
        self._version += 1

    def add_user(self, content: str) -> dict[str, object]:
        """Add a user message; returns it (the very object the history holds)."""
        message: dict[str, object] = {"role": "user", "content": content}
        self._messages.append(message)
        self._version += 1
        return message

    def add_assistant(self, content: str, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> None:
        """Add an assistant text message (no tool call), clipped to ``max_bytes``."""
        self._messages.append({"role": "assistant", "content": clip_text(content, max_bytes)})
        self._version += 1

    def add_tool_exchange(
        self,
        call: ToolCall,
        result_content: str,
        *,
        native: bool,
        assistant_content: str | None = None,
        max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        same_answer: bool = False,
    ) -> tuple[dict[str, object], dict[str, object]]:
        """Append a tool call and its answer together; return the two messages.

        ``same_answer``: the call belongs to the model answer whose calls were
        recorded last; it joins that answer's one assistant message (a new
        message object in its place) and its result follows theirs — the
        answer recorded as the model said it.  When anything else changed the
        history since, the call starts a message of its own.  Oversized
        arguments and text are clipped to ``max_bytes`` (see
        :func:`build_tool_exchange`).  Raises ValueError if a native call reuses
        an id already in the history (that id would then have two answers).
        """
        if native and call.id in self._tool_call_ids:
            raise ValueError(f"tool call id {call.id!r} is already in the history")
        opened = self._open
        if (same_answer and opened is not None and opened.version == self._version
                and opened.native == native):
            exchange = self._join(opened, call, result_content, max_bytes)
        else:  # what build_tool_exchange makes, its call entry kept for the calls to come
            text = clip_text(assistant_content, max_bytes) if assistant_content else \
                assistant_content
            entry = _call_entry(call, native, max_bytes)
            exchange = (_assistant_message(native, text, (entry,)),
                        _result_message(call, result_content, native))
            self._open = _OpenAnswer(len(self._messages), 0, native, text, [entry])
            self._messages.extend(exchange)
        self._version += 1
        self._open.version = self._version  # type: ignore[union-attr]
        if native:
            self._tool_call_ids.add(call.id)
        return exchange

    def _join(self, opened: _OpenAnswer, call: ToolCall, result_content: str,
              max_bytes: int) -> tuple[dict[str, object], dict[str, object]]:
        """Add ``call`` to the open answer's assistant message; its result goes last."""
        opened.entries.append(_call_entry(call, opened.native, max_bytes))
        assistant = _assistant_message(opened.native, opened.text, opened.entries)
        result = _result_message(call, result_content, opened.native)
        self._messages[opened.index] = assistant
        self._messages.append(result)
        self._rewrites += 1
        return assistant, result

    def take_back(self, message: JSONMapping) -> bool:
        """Remove ``message`` (this very object, a plain message); True if it was there.

        For a message that turned out not to count: the pending events a loop
        delivered but no model answer saw (they go back to pending).
        """
        for index in range(len(self._messages) - 1, -1, -1):
            if self._messages[index] is message:
                if message.get("role") == "tool" or message.get("tool_calls"):
                    raise ValueError("a tool call or result leaves only with its exchange")
                del self._messages[index]
                self._version += 1
                return True
        return False

    def replace(self, messages: Iterable[JSONMapping]) -> None:
        """Replace every message (loading, compaction); the new list is taken as is."""
        self._messages = [dict(m) for m in messages]
        self._tool_call_ids = {i for m in self._messages for i in _native_ids(m)}
        self._version += 1
        self._rewrites += 1
        self._open = None

    def repair(self) -> RepairReport:
        """Give every unanswered call an "interrupted" answer and drop orphan answers."""
        repaired, report = repair_history(self._messages)
        if report.changed:
            self.replace(repaired)
        return report

    def clear(self) -> None:
        """Forget every message."""
        self.replace(())

    @classmethod
    def from_list(cls, messages: Sequence[JSONMapping] | None) -> ConversationHistory:
        """A history from saved messages (repaired so every call has an answer)."""
        history = cls([dict(m) for m in messages or ()])
        history.repair()
        return history
