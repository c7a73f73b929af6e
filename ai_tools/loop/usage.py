"""How full a model's context is: the one measure the tick, the loop and compaction use.

The measure of a request's context is the tokens of

* the system prompt's *head* — persona, mode, the tool list (everything but
  the per-iteration status line: step, budget, advisory, a few tens of tokens),
* the tool schemas sent with ``tools=`` (native tool calling),
* every message of the history,

in percent of the model's context window (:func:`context_window`: configured,
else the client's, else 8,192 tokens).  So the tick's emergency compaction
(before a loop), the loop's ``critical_tokens`` check (before each model call)
and the token advisory all read the same figure.

A :class:`ContextMeter` takes that measure incrementally: the prompt is
counted once per prompt (its key says when it changed), the history once per
message (messages are only appended during a loop; anything else — a
compaction, a replaced history — is counted again in full).  The service keeps
one meter per assistant, so a tick and the loops it runs share the counts.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ai_tools.execution.history import ConversationHistory
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.tokens import DEFAULT_CONTEXT_WINDOW, TokenCounter, default_counter

__all__ = ["ContextMeter", "ContextUsage", "context_window"]

_NOTHING = object()


def context_window(configured: int | None, llm: ILLMClient) -> int:
    """The context window in tokens: ``configured``, else the client's, else 8,192.

    The one rule for every measure: an unknown window counts as a small one
    (the model layer's default), so a full context is noticed rather than missed.
    """
    for window in (configured, getattr(llm, "context_window", None)):
        if isinstance(window, int) and not isinstance(window, bool) and window > 0:
            return window
    return DEFAULT_CONTEXT_WINDOW


@attrs.frozen
class ContextUsage:
    """One measure: ``tokens`` of the context in a window of ``window`` tokens.

    ``prompt_tokens`` of them are the prompt's (head and tool schemas), the
    rest the history's.
    """

    tokens: int
    window: int
    prompt_tokens: int = 0

    @property
    def percent(self) -> float:
        """``tokens`` in percent of ``window`` (above 100 when the history overflows)."""
        return 100.0 * max(self.tokens, 0) / self.window


@attrs.define(eq=False)
class ContextMeter:
    """Takes the measure of the module docstring, counting only what changed.

    ``counter`` counts text and messages (tiktoken when available, else about
    four characters per token).
    """

    counter: TokenCounter = attrs.field(factory=default_counter)
    last: ContextUsage | None = None
    """The last measure taken (status pages show it)."""
    _prompt_key: object = _NOTHING
    _prompt_tokens: int = 0
    _measured: tuple[ConversationHistory, int, int] | None = None
    """(history, its version, window) of :attr:`last`."""
    _history: ConversationHistory | None = None
    _counted: int = 0
    _last_message: object = None
    _history_tokens: int = 0
    _rewrites: int = 0

    def measure(self, prompt_key: object, prompt_text: Callable[[], str],
                history: ConversationHistory, window: int) -> ContextUsage:
        """The usage of a request whose prompt is ``prompt_key`` over ``history``.

        ``prompt_text()`` gives the counted prompt text (head and tool schemas);
        it is called only when ``prompt_key`` differs from the last one measured.
        """
        if prompt_key is not self._prompt_key:
            if prompt_key != self._prompt_key:
                self._prompt_tokens = self.counter.count_text(prompt_text())
                self._measured = None
            self._prompt_key = prompt_key
        measured = (history, history.version, window)
        if self._measured == measured and self.last is not None:
            return self.last  # nothing changed since
        prompt = self._prompt_tokens
        usage = self.last = ContextUsage(prompt + self.history_tokens(history), window, prompt)
        self._measured = measured
        return usage

    def history_tokens(self, history: ConversationHistory) -> int:
        """Tokens of every message of ``history``; only new messages are counted."""
        counted, last = self._counted, self._last_message
        tail = (history.since(counted - 1) if counted and history is self._history
                and history.rewrites == self._rewrites else None)
        if tail and tail[0] is last:
            new = tail[1:]
        else:  # first count, another history, or one replaced: count it all
            self._history, counted, self._history_tokens = history, 0, 0
            self._rewrites = history.rewrites
            new = history.since(0)
        if new:
            count = self.counter.count_message
            for message in new:
                self._history_tokens += count(message)
            self._counted, self._last_message = counted + len(new), new[-1]
        elif not counted:
            self._counted, self._last_message = 0, None
        return self._history_tokens
