"""Exceptions shared across the layers of ai_tools.

Each carries a message written for the person (or model) who must act on it.
"""

from __future__ import annotations


class AIToolsError(Exception):
    """Base class of every error raised on purpose by ai_tools."""


class ToolRegistrationError(AIToolsError):
    """A tool class was refused by a registry (bad schema, duplicate name...)."""


class ToolNotFound(AIToolsError):
    """A tool name is not in the registry."""


class PermissionDenied(AIToolsError):
    """The acting character lacks the right to do this (never retried)."""


class NotFound(AIToolsError):
    """A world object, record or assistant does not exist (never retried)."""


class ConfigError(AIToolsError):
    """A configuration mistake; the message names the key and the file."""


class ServiceNotRunning(AIToolsError):
    """An AssistantService was used before ``startService()`` (or after it stopped):
    nothing would ever tick, so a caller waiting for an answer would wait forever."""


class LeaseLost(AIToolsError):
    """A state write was fenced off: this worker no longer holds the assistant's lease
    at the epoch it wrote with (another worker owns the assistant now)."""


class WorldConflict(AIToolsError):
    """A shared-world change was computed from rows another worker changed meanwhile.

    The change was not applied; the world catches up and computes it again.
    """


class LLMError(AIToolsError):
    """A model request failed.

    ``partial_text`` keeps whatever the model produced before the failure so
    that output is never lost.
    """

    reason = "llm_error"
    attempts = 0
    """HTTP requests the failed call sent (set by the model client; 0 when none was,
    e.g. refused by an open circuit breaker)."""
    queued = 0.0
    """Seconds the call waited in the client's queue for a slot of the server."""

    def __init__(self, message: str, partial_text: str = "") -> None:
        super().__init__(message)
        self.partial_text = partial_text


class LLMUnavailable(LLMError):
    """The circuit breaker is open: requests fail fast until it half-opens."""

    reason = "llm_unavailable"


class RepeatedLineLoop(LLMError):
    """Generation was stopped because the model kept repeating itself."""

    reason = "repeated_line_loop"


class LLMRequestError(LLMError):
    """The model server refused the request (400, 401, 403, 404...): never retried.

    The message says what to fix (the URL, the model name, the API key variable).
    """

    def __init__(
        self, message: str, partial_text: str = "", status: int | None = None, url: str = ""
    ) -> None:
        super().__init__(message, partial_text)
        self.status = status
        self.url = url


class LLMServerError(LLMError):
    """The model server failed (429, 5xx, or an error reported inside the stream).

    Raised once retries are exhausted; ``retry_after`` is the server's hint in
    seconds, if it gave one.
    """

    def __init__(
        self,
        message: str,
        partial_text: str = "",
        status: int | None = None,
        url: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, partial_text)
        self.status = status
        self.url = url
        self.retry_after = retry_after


class LLMConnectionError(LLMError):
    """The model server could not be reached, or dropped the connection."""

    reached = True
    """False when no answer came at all (refused, reset, unreachable): the server's
    own breaker counts those."""


class LLMInterrupted(LLMConnectionError):
    """The server ended a stream early for another request: ``[DONE]`` without the final
    chunk, then the connection closed (llama-cpp-python's ``interrupt_requests``, when a
    second request waits for its one slot)."""


class LLMTimeout(LLMError):
    """The model server was too slow: no headers in time, or a stalled stream."""


class LLMProtocolError(LLMError):
    """The answer was not what an OpenAI-compatible server sends (bad JSON, cut stream)."""


class LLMEmptyAnswer(LLMProtocolError):
    """The model answered with nothing: no text, no tool call, no reasoning.

    The server worked (it is not counted against it); the message says how the
    answer ended (``finish_reason``) and what that usually means.
    """


class LLMEmptyStream(LLMConnectionError):
    """A streamed answer ended before its first chunk (no data, no ``[DONE]``)."""
