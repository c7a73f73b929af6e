"""Fitting a history into a token budget when a few messages alone overflow it.

Compaction summarises or drops the messages older than its preserve window;
that frees nothing when the window itself is too big — four messages, one of
them a model's 30,000-token reply or a tool call with a megabyte of arguments.
:func:`fit_messages` then works inside the kept messages, in two steps:

1. **clip** every message's text, call arguments and tool result to one
   limit, halved until the messages fit (down to :data:`MIN_CLIP_BYTES`), with
   the marker of :mod:`ai_tools.execution.results`, so the model sees that
   something was cut;
2. **drop** the oldest messages, if even clipped ones do not fit, leaving a
   note — never separating a tool call from its answers.

The history stays valid either way: a clipped call keeps its id, and its
arguments stay a JSON object; a clipped fallback call stays a call of the
same tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ai_tools.execution.history import is_tool_result
from ai_tools.execution.results import (
    CLIPPED_KEY,
    MIN_MAX_RESULT_BYTES,
    clip_arguments,
    clip_text,
)
from ai_tools.history_format import fallback_tool_calls
from ai_tools.json_encoding import model_json
from ai_tools.json_types import JSONMapping
from ai_tools.llm.tokens import CHARS_PER_TOKEN

__all__ = ["MIN_CLIP_BYTES", "TRUNCATION_PREFIX", "FitResult", "fit_messages"]

MIN_CLIP_BYTES = MIN_MAX_RESULT_BYTES
"""The smallest limit a message is clipped to (room for the marker and a start)."""

TRUNCATION_PREFIX = "[EARLIER CONVERSATION REMOVED]"
"""How the note left in place of dropped messages starts (compaction's too)."""


@attrs.frozen
class FitResult:
    """The messages fitted into a budget, and what it took."""

    messages: tuple[dict[str, object], ...]
    clipped: int = 0
    """Messages whose text, arguments or result were clipped."""
    dropped: int = 0
    """Oldest messages dropped (clipping alone was not enough)."""


def fit_messages(messages: Sequence[JSONMapping], budget: int,
                 count: Callable[[JSONMapping], int]) -> FitResult:
    """``messages`` within ``budget`` tokens as ``count`` counts a message (see the module).

    Messages that fit already are returned unchanged.  The newest message is
    always kept (clipped to :data:`MIN_CLIP_BYTES` at most), so the result
    may stay above a budget smaller than that.
    """
    kept = [dict(m) for m in messages]
    sizes = [count(m) for m in kept]
    if sum(sizes) <= budget:
        return FitResult(tuple(kept))
    limit = max(int(budget * CHARS_PER_TOKEN), MIN_CLIP_BYTES)  # a first guess, halved as needed
    original = kept
    while True:
        kept = [_clip_message(m, limit) for m in original]
        sizes = [count(m) for m in kept]
        if sum(sizes) <= budget or limit <= MIN_CLIP_BYTES:
            break
        limit = max(limit // 2, MIN_CLIP_BYTES)
    clipped = sum(1 for new, old in zip(kept, original, strict=True) if new is not old)
    if sum(sizes) <= budget:
        return FitResult(tuple(kept), clipped=clipped)
    start = _first_kept(kept, sizes, budget - count(_note(len(kept))))
    if start == 0:  # one message, or one call with its answers: nothing can go
        return FitResult(tuple(kept), clipped=clipped)
    return FitResult((_note(start), *kept[start:]), clipped=clipped, dropped=start)


def _note(dropped: int) -> dict[str, object]:
    """The message left in place of the ``dropped`` oldest messages."""
    return {"role": "user", "content": f"{TRUNCATION_PREFIX} {dropped} older messages were "
                                       "dropped to free context space."}


def _first_kept(messages: Sequence[JSONMapping], sizes: Sequence[int],
                allowed: int) -> int:
    """Where the kept messages start: the earliest place whose tail fits ``allowed``,
    never a tool result (its call goes with it); at worst the last such place."""
    total = sum(sizes)
    last_start = 0
    for index in range(1, len(messages)):
        total -= sizes[index - 1]
        if is_tool_result(messages[index]):
            continue
        last_start = index
        if total <= allowed:
            return index
    return last_start


def _clip_message(message: dict[str, object], limit: int) -> dict[str, object]:
    """``message`` with its text and call arguments clipped to ``limit`` bytes each.

    The same object when nothing needed clipping.
    """
    changed: dict[str, object] = {}
    content = message.get("content")
    if isinstance(content, str) and len(content) > limit // 4:
        names = fallback_tool_calls(content) if message.get("role") == "assistant" else []
        new = _clip_fallback_calls(content, names, limit) if names else clip_text(content, limit)
        if new != content:
            changed["content"] = new
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        new_calls = [_clip_call(c, limit) for c in calls]
        if any(new is not old for new, old in zip(new_calls, calls, strict=True)):
            changed["tool_calls"] = new_calls
    return {**message, **changed} if changed else message


def _clip_call(call: Any, limit: int) -> Any:
    """A native ``tool_calls`` entry with its arguments text clipped (same id and name)."""
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return call
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return call
    clipped = clip_arguments(arguments, limit)
    if clipped is None:
        return call
    return {**call, "function": {**function, "arguments": model_json(clipped)}}


def _clip_fallback_calls(content: str, names: Sequence[str], limit: int) -> str:
    """A fallback call message too large to keep: the same calls, their parameters clipped.

    (Cutting the JSON text would leave no call to answer, and the results
    after it would be orphans.)
    """
    if len(content.encode("utf-8", "surrogatepass")) <= limit:
        return content
    marker = (f"[CLIPPED: the call was {len(content)} characters of JSON, too large to "
              "keep]")
    calls = [{"tool": name, "parameters": {CLIPPED_KEY: marker}} for name in names]
    return json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
