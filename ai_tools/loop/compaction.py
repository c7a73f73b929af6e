"""Compaction: keeping a conversation history inside the model's context window.

When the history fills the context window past a threshold (80% awake, 70%
during sleep; measured as :mod:`ai_tools.loop.usage`
says), the messages older than a preserve
window (the last 20) are summarised by the model into one summary message.  If
the model fails (error, empty answer), a deterministic truncation drops them
and leaves a short note instead.  Either way the history stays valid: the cut
never separates a tool call from its answers, so no tool result is orphaned
and no tool call is left unanswered.

Given a :class:`HistoryBudget` (the tick gives one: what the history may take
for the context to be at ``target_percent`` after compaction), compaction
also works inside the preserve window when the messages kept are still too
big — a few huge messages fill a window without ever reaching the preserve
window's count: it clips their texts, arguments and results, and if need be
drops the oldest of them (:mod:`ai_tools.loop.fitting`).  So a history that
fills the window is always brought under the threshold, however few its
messages are.

The functions work on plain lists of chat-completion message dicts;
:func:`compact_history` applies them to an assistant's history object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import attrs
from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.execution.history import is_tool_result
from ai_tools.interfaces import ILLMClient
from ai_tools.json_types import JSONMapping
from ai_tools.llm.tokens import CHARS_PER_TOKEN
from ai_tools.loop.fitting import TRUNCATION_PREFIX, fit_messages
from ai_tools.numbers import is_number

__all__ = [
    "SUMMARY_PREFIX",
    "TRUNCATION_PREFIX",
    "CompactionConfig",
    "CompactionResult",
    "HistoryBudget",
    "compact_history",
    "compact_messages",
    "needs_compaction",
    "split_point",
    "truncate_messages",
]

log = Logger()

SUMMARY_PREFIX = "[CONVERSATION SUMMARY]"
"""How the summary message (a user message) starts."""


_SUMMARY_INSTRUCTIONS = (
    "You compress an assistant's conversation history. Write a concise summary of the "
    "conversation below, in the third person, keeping: who said what that still matters, "
    "promises and open tasks, facts learned about people, places and objects, and the "
    "results of important actions. Omit small talk and repeated tool output. Answer with "
    "the summary text only."
)


@attrs.frozen
class CompactionConfig:
    """When and how much to compact."""

    awake_threshold: float = 80.0
    """Usage percent from which an awake assistant's history is compacted."""
    sleep_threshold: float = 70.0
    """Usage percent from which compaction runs during sleep (maintenance)."""
    target_percent: float = attrs.field(default=50.0)
    """Usage percent the context is brought down to when the messages kept alone would
    stay above it: they are clipped (and the oldest dropped) to fit."""
    preserve_window: int = attrs.field(default=20)
    """The most recent messages always kept verbatim."""
    max_transcript_chars: int = 48_000
    """Longest transcript sent to the model for summarising (oldest part cut first)."""
    max_message_chars: int = 2_000
    """Each message is clipped to this in the transcript."""

    @preserve_window.validator
    def _check_window(self, attribute: attrs.Attribute[int], value: int) -> None:
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"preserve_window must be a positive integer, got {value!r}")

    @target_percent.validator
    def _check_target(self, attribute: attrs.Attribute[float], value: float) -> None:
        if not is_number(value) or not 0 < value <= 100:
            raise ValueError(f"target_percent must be a percentage in (0, 100], got {value!r}")


@attrs.frozen
class HistoryBudget:
    """What a history may take after compaction: ``tokens``, as ``count`` counts a message.

    ``window`` (the model's context window in tokens, if known) also bounds the
    summary request: its transcript takes at most half of it, so a small local
    model is not sent more than it can read.
    """

    tokens: int
    count: Callable[[JSONMapping], int]
    window: int | None = None


DEFAULT_COMPACTION = CompactionConfig()


@attrs.frozen
class CompactionResult:
    """What a compaction did."""

    messages: tuple[dict[str, object], ...]
    method: str
    """``summary``, ``truncation``, ``clipping`` (only messages clipped or dropped to fit
    the budget) or ``none`` (nothing to compact)."""
    removed: int = 0
    """Messages replaced by the summary or dropped."""
    clipped: int = 0
    """Kept messages clipped to fit the budget."""
    error: str | None = None
    """Why summarising failed, when ``method`` is ``truncation``."""


def needs_compaction(
    usage_pct: float, mode: str = "awake", config: CompactionConfig = DEFAULT_COMPACTION
) -> bool:
    """Whether a history at ``usage_pct`` percent should be compacted in ``mode``."""
    threshold = config.sleep_threshold if mode == "sleep" else config.awake_threshold
    return usage_pct >= threshold


def split_point(messages: Sequence[JSONMapping], preserve: int) -> int:
    """Index where the kept window starts: ``messages[:i]`` may be compacted.

    Starts at ``len - preserve`` and moves earlier while the window would begin
    with a tool result, so a tool call and its answers are never separated.
    """
    index = max(len(messages) - preserve, 0)
    while index > 0 and is_tool_result(messages[index]):
        index -= 1
    return index


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 14] + " …[clipped]"


def _render(message: JSONMapping, limit: int) -> str:
    role = str(message.get("role", "?"))
    content = message.get("content")
    parts = [content if isinstance(content, str) else ""]
    for call in cast("Iterable[object]", message.get("tool_calls") or ()):
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        parts.append(f"calls {fn.get('name', '?')}({fn.get('arguments', '')})")
    text = " ".join(p for p in parts if p) or json.dumps(dict(message), default=str)
    return f"{role}: {_clip(text, limit)}"


def transcript(messages: Sequence[JSONMapping], config: CompactionConfig) -> str:
    """The old messages as plain text for the summariser, newest part kept if too long."""
    lines = [_render(m, config.max_message_chars) for m in messages]
    total = 0
    kept: list[str] = []
    for line in reversed(lines):
        total += len(line) + 1
        if total > config.max_transcript_chars and kept:
            kept.append("[… older messages omitted …]")
            break
        kept.append(line)
    return "\n".join(reversed(kept))


def truncate_messages(
    messages: Sequence[JSONMapping], config: CompactionConfig = DEFAULT_COMPACTION
) -> CompactionResult:
    """Drop the messages older than the preserve window, leaving a note (no model)."""
    index = split_point(messages, config.preserve_window)
    if index == 0:
        return CompactionResult(tuple(dict(m) for m in messages), "none")
    note: dict[str, object] = {
        "role": "user",
        "content": f"{TRUNCATION_PREFIX} {index} older messages were dropped to free "
                   "context space; their content is no longer available."}
    kept = [dict(m) for m in messages[index:]]
    return CompactionResult((note, *kept), "truncation", removed=index)


def compact_messages(
    messages: Sequence[JSONMapping],
    llm: ILLMClient | None,
    config: CompactionConfig = DEFAULT_COMPACTION,
    budget: HistoryBudget | None = None,
) -> defer.Deferred[CompactionResult]:
    """Summarise the messages older than the preserve window with ``llm``.

    Fires with a :class:`CompactionResult`; never fails (a failing or empty
    summary falls back to :func:`truncate_messages`).  With a ``budget``, the
    messages are then fitted into it (see the module).  Cancelling the
    Deferred cancels the model request.
    """
    if budget is not None and budget.window:
        fits = int(budget.window * CHARS_PER_TOKEN / 2)
        config = attrs.evolve(config, max_transcript_chars=min(config.max_transcript_chars, fits))
    d: defer.Deferred[CompactionResult] = _summarise(messages, llm, config)
    return d.addCallback(_fitted, budget)


def _fitted(result: CompactionResult, budget: HistoryBudget | None) -> CompactionResult:
    """``result`` with its messages fitted into ``budget`` (unchanged if they fit)."""
    if budget is None:
        return result
    fit = fit_messages(result.messages, budget.tokens, budget.count)
    if not fit.clipped and not fit.dropped:
        return result
    return attrs.evolve(result, messages=fit.messages,
                        method="clipping" if result.method == "none" else result.method,
                        removed=result.removed + fit.dropped, clipped=fit.clipped)


@defer.inlineCallbacks
def _summarise(messages: Sequence[JSONMapping], llm: ILLMClient | None,
               config: CompactionConfig) -> Any:
    """The summary (or truncation) of the messages older than the preserve window."""
    index = split_point(messages, config.preserve_window)
    if index == 0:
        return CompactionResult(tuple(dict(m) for m in messages), "none")
    old = messages[:index]
    if llm is None:
        result = truncate_messages(messages, config)
        return attrs.evolve(result, error="no model to summarise with")
    request = [
        {"role": "system", "content": _SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": transcript(old, config)},
    ]
    try:
        response = yield defer.maybeDeferred(llm.complete, request, stream=False)
        summary = str(getattr(response, "content", "") or "").strip()
        if not summary:
            raise ValueError("the model returned an empty summary")
    except defer.CancelledError:
        raise
    except Exception as e:
        log.warn("History compaction: summary failed ({error}); truncating instead",
                 error=str(e))
        result = truncate_messages(messages, config)
        return attrs.evolve(result, error=str(e) or type(e).__name__)
    note: dict[str, object] = {"role": "user", "content": f"{SUMMARY_PREFIX}\n{summary}"}
    kept = [dict(m) for m in messages[index:]]
    return CompactionResult((note, *kept), "summary", removed=index)


def _get_messages(history: Any) -> list[dict[str, object]]:
    if isinstance(history, list):
        return history
    for attr in ("messages", "get_messages", "as_list"):
        value = getattr(history, attr, None)
        if value is not None:
            value = value() if callable(value) else value
            return list(value)
    raise TypeError(f"cannot read messages from {type(history).__name__}")


def _set_messages(history: Any, messages: Sequence[dict[str, object]]) -> None:
    if isinstance(history, list):
        history[:] = messages
        return
    for attr in ("replace", "set_messages", "replace_messages"):
        method = getattr(history, attr, None)
        if callable(method):
            method(list(messages))
            return
    raise TypeError(f"cannot replace the messages of {type(history).__name__}")


@defer.inlineCallbacks
def compact_history(
    history: Any,
    llm: ILLMClient | None,
    config: CompactionConfig = DEFAULT_COMPACTION,
    on_done: Callable[[CompactionResult], None] | None = None,
    budget: HistoryBudget | None = None,
) -> Any:
    """Compact ``history`` in place; fires with the :class:`CompactionResult`.

    ``history`` is a list of messages or the assistant's history object.  The
    messages are replaced only once the new list is ready, so a history is
    never seen half-compacted.  ``budget``: see :func:`compact_messages`.
    """
    result = yield compact_messages(_get_messages(history), llm, config, budget)
    if result.method != "none":
        _set_messages(history, result.messages)
        log.info("History compacted by {method}: {removed} messages replaced, {clipped} "
                 "clipped", method=result.method, removed=result.removed,
                 clipped=result.clipped)
    if on_done is not None:
        on_done(result)
    return result
