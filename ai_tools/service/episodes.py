"""Episodic memory: one searchable record per conversation tick.

After a tick whose loop answered pending events, the host writes an
``episodes`` record — who spoke, what they said, and what the assistant said
back through its TERMINAL tools — with the speakers as ``participants``.  The
``search_episodic``, ``recall_conversation_context`` and
``recall_entity_profile`` tools read these records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.loop.prompts import event_line
from ai_tools.tools.records import EPISODES

MAX_EPISODE_CHARS = 4000
_SPEAKER_KEYS = ("from", "sender", "speaker", "sender_key", "sender_id")
_SPOKEN_ARGUMENTS = ("message", "text", "content")


def participants_of(events: Sequence[JSONMapping]) -> list[str]:
    """Names and ids of everyone who spoke in ``events``, in first-seen order."""
    seen: list[str] = []
    for event in events:
        for key in _SPEAKER_KEYS:
            value = event.get(key)
            if isinstance(value, str) and value and value not in seen:
                seen.append(value)
    return seen


def replies_in(messages: Sequence[JSONMapping], terminal_tools: set[str]) -> list[str]:
    """What the assistant said through TERMINAL tool calls in ``messages`` (native format)."""
    said: list[str] = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list | tuple) else ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or function.get("name") not in terminal_tools:
                continue
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    continue
            if isinstance(arguments, Mapping):
                for key in _SPOKEN_ARGUMENTS:
                    if isinstance(arguments.get(key), str):
                        said.append(f"{function['name']}: {arguments[key]}")
                        break
    return said


def episode_record(
    assistant_name: str,
    events: Sequence[JSONMapping],
    new_messages: Sequence[JSONMapping],
    terminal_tools: set[str],
    termination_reason: str,
) -> tuple[str, JSONObject] | None:
    """The ``(content, metadata)`` of the episode, or None when nobody spoke."""
    participants = participants_of(events)
    if not events or not participants:
        return None
    lines = [event_line(e) for e in events]
    lines.extend(f"- {assistant_name} ({reply.split(':', 1)[0]}):{reply.split(':', 1)[1]}"
                 for reply in replies_in(new_messages, terminal_tools))
    content = "\n".join(lines)[:MAX_EPISODE_CHARS]
    metadata: JSONObject = {"participants": list[JSONValue](participants), "kind": "conversation",
                "termination_reason": termination_reason}
    return content, metadata


__all__ = ["EPISODES", "episode_record", "participants_of", "replies_in"]
