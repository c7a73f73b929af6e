"""Keep the API key out of every text that leaves the model client.

A server may echo the key it was sent (``Incorrect API key provided: Bearer
sk-…``) in an error body, in an error object inside a stream, or anywhere in
an answer.  The client knows the key, so a :class:`Redactor` built from it
replaces it wherever such a text leaves the client: error messages and their
partial text, server-error events, the answer, text fragments, and request
headers shown in a log.  Without a key (a local server) every method returns
its argument as it is.
"""

from __future__ import annotations

import json
from typing import Any

from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.llm.events import ChatResponse

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8
"""Shorter keys are placeholders (``none``, ``x``): replacing them would garble text."""


class Redactor:
    """Replaces one secret by :data:`REDACTED` in texts, JSON values and errors."""

    __slots__ = ("_escaped", "_secret")

    def __init__(self, secret: str | None) -> None:
        if secret is not None and len(secret) < MIN_SECRET_CHARS:
            secret = None
        self._secret = secret
        # The key as it appears inside a JSON string (differs only if it holds " or \).
        self._escaped = json.dumps(secret, ensure_ascii=False)[1:-1] if secret else None

    @property
    def active(self) -> bool:
        """Whether there is a secret to look for."""
        return self._secret is not None

    def text(self, text: str) -> str:
        """``text`` with every occurrence of the secret replaced."""
        secret = self._secret
        if secret is None or secret not in text:
            return text
        return text.replace(secret, REDACTED)

    def value(self, value: object) -> Any:
        """A JSON value (an error object, a message) with the secret replaced in its strings.

        Returns ``value`` itself when the secret does not occur in it.
        """
        if self._secret is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        try:
            encoded = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            return REDACTED if self._secret in repr(value) else value
        assert self._escaped is not None
        if self._escaped not in encoded:
            return value
        return json.loads(encoded.replace(self._escaped, REDACTED))

    def response(self, response: ChatResponse) -> ChatResponse:
        """``response`` itself, or rebuilt from its message with the secret replaced."""
        if self._secret is None:
            return response
        message = self.value(response.message)
        if message is response.message:
            return response
        return ChatResponse.from_message(message, finish_reason=response.finish_reason,
                                         usage=response.usage, model=response.model)

    def error(self, error: BaseException) -> None:
        """Redact ``error``'s message and ``partial_text`` (if it has one), in place."""
        if self._secret is None:
            return
        error.args = tuple(self.text(a) if isinstance(a, str) else a for a in error.args)
        partial = getattr(error, "partial_text", None)
        if isinstance(partial, str):
            error.partial_text = self.text(partial)  # type: ignore[attr-defined]

    def headers(self, headers: JSONMapping) -> JSONObject:
        """Header values for display, the secret replaced in each (see also
        :func:`~ai_tools.llm.http_errors.redact_headers`, which hides credential
        headers by name)."""
        return {name: self.value(value) for name, value in headers.items()}


NO_SECRET = Redactor(None)
"""The redactor of a client without an API key."""
