"""What an answer that arrived whole must be to be an answer.

A model server may answer 200 with nothing in it (no text, no tool call),
with a ``finish_reason`` of ``error``, or with one ai_tools does not know.
:func:`checked_answer` turns the first two into errors that say so, the
loop's result and the log then carry them; an unknown ``finish_reason`` is
logged once per client and the answer is used as it is.  (An error object
inside a 200 body or stream is a :class:`~ai_tools.errors.LLMServerError`
already, where the body is read.)
"""

from __future__ import annotations

from twisted.logger import Logger

from ai_tools.errors import LLMEmptyAnswer, LLMServerError
from ai_tools.llm.events import ChatResponse

__all__ = ["KNOWN_FINISH_REASONS", "checked_answer"]

log = Logger(namespace="ai_tools.llm.client")

KNOWN_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "function_call",
                                  "content_filter"})

_EMPTY_BECAUSE = {
    "length": "it was cut at max_tokens before any text: raise max_tokens",
    "content_filter": "the server's content filter withheld it",
    "stop": "the model stopped at once (with tool_choice \"auto\", llama-cpp-python's "
            "chatml-function-calling answers text this way: give the tool calls' answer "
            "through a tool such as say)",
}


def checked_answer(response: ChatResponse, url: str, label: str,
                   warned: set[str]) -> ChatResponse:
    """``response`` if it is an answer; raises :class:`LLMEmptyAnswer` for an empty one,
    :class:`LLMServerError` for ``finish_reason`` ``error``.  ``warned`` holds the
    unknown finish reasons already logged (one warning each)."""
    finish = response.finish_reason
    if finish == "error":
        raise LLMServerError(f"{url}: the model's answer ended with finish_reason 'error'",
                             response.content, url=url)
    if not response.content and not response.tool_calls and not _reasoning(response):
        why = _EMPTY_BECAUSE.get(finish or "", "")
        raise LLMEmptyAnswer(f"{url}: the model sent an empty answer (no text, no tool call; "
                             f"finish_reason {finish!r}){': ' + why if why else ''}")
    if finish is not None and finish not in KNOWN_FINISH_REASONS and finish not in warned:
        if len(warned) < 32:
            warned.add(finish)
        log.warn("Model {label} ended an answer with finish_reason {finish!r}, which "
                 "ai_tools does not know; the answer is used as it is", label=label,
                 finish=finish)
    return response


def _reasoning(response: ChatResponse) -> bool:
    message = response.message
    return bool(message.get("reasoning_content") or message.get("reasoning"))
