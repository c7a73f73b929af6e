"""Token counting for the token advisory and compaction.

With the ``tokens`` extra installed, counts come from tiktoken when its
encoding files are already on this machine (in ``TIKTOKEN_CACHE_DIR`` or
tiktoken's default cache).  ai_tools never lets tiktoken fetch them behind an
operator's back — a game server or a test run must not reach the network — unless
``AI_TOOLS_TIKTOKEN_DOWNLOAD=1`` is set.  Without the files, and when tiktoken
is not installed, counting falls back to about four characters per token.  The
fallback is chosen once per counter and logged once.

Message lists are counted the way OpenAI documents it: a few tokens of
framing per message, plus the content, the name, and every tool call's name
and arguments; tool schemas sent with ``tools=`` count as their JSON.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

from twisted.logger import Logger

from ai_tools.history_format import content_text
from ai_tools.json_types import JSONMapping

log = Logger()

DEFAULT_ENCODING = "cl100k_base"
CHARS_PER_TOKEN = 4.0
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_PER_TOOL_CALL = 3
REPLY_PRIMING_TOKENS = 3
DEFAULT_CONTEXT_WINDOW = 8192

# Used only when a profile does not set context_window; prefixes, longest first wins.
KNOWN_CONTEXT_WINDOWS: Mapping[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3": 8_192,
    "qwen2.5": 32_768,
    "mistral": 32_768,
    "scripted": 32_768,
}


class Encoding(Protocol):
    """What we need of a tiktoken encoding."""

    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...


def _downloads_allowed() -> bool:
    return os.environ.get("AI_TOOLS_TIKTOKEN_DOWNLOAD") == "1"


def load_tiktoken_encoding(name: str = DEFAULT_ENCODING) -> Encoding:
    """Load a tiktoken encoding from local files; raises ImportError or OSError.

    tiktoken fetches missing encoding files over HTTP.  Unless
    ``AI_TOOLS_TIKTOKEN_DOWNLOAD=1`` is set, that fetch is replaced for the
    duration of the load by one that refuses, so only cached or local files are
    read.  (Loads run under the counter's lock, once per counter.)
    """
    import tiktoken
    import tiktoken.load

    if _downloads_allowed():
        return tiktoken.get_encoding(name)
    fetch = tiktoken.load.read_file

    def local_only(blobpath: str) -> bytes:
        if blobpath.startswith(("http://", "https://")):
            raise OSError(
                f"encoding file {blobpath} is not cached and downloads are off "
                "(set AI_TOOLS_TIKTOKEN_DOWNLOAD=1 to allow them)"
            )
        return fetch(blobpath)

    tiktoken.load.read_file = local_only
    try:
        return tiktoken.get_encoding(name)
    finally:
        tiktoken.load.read_file = fetch


def context_window_for(model: str, configured: int | None = None) -> int:
    """The context window: the configured one, else a known model's, else 8192."""
    if configured:
        return configured
    return known_context_window(model) or DEFAULT_CONTEXT_WINDOW


def known_context_window(model: str) -> int | None:
    """The window ``model`` was made with, when ai_tools knows the model; else None."""
    name = model.lower().rsplit("/", 1)[-1]
    for prefix in sorted(KNOWN_CONTEXT_WINDOWS, key=len, reverse=True):
        if name.startswith(prefix):
            return KNOWN_CONTEXT_WINDOWS[prefix]
    return None


class TokenCounter:
    """Counts tokens of text and of whole chat message lists.

    ``loader`` returns an encoding or raises; it is called at most once, on
    first use.  ``exact`` tells which path is in use (None before first use).
    """

    def __init__(
        self,
        encoding_name: str = DEFAULT_ENCODING,
        loader: Callable[[str], Encoding] = load_tiktoken_encoding,
    ) -> None:
        self.encoding_name = encoding_name
        self._loader = loader
        self._encoding: Encoding | None = None
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def exact(self) -> bool | None:
        """True with tiktoken, False with the estimate, None before first use."""
        if not self._loaded:
            return None
        return self._encoding is not None

    def _get_encoding(self) -> Encoding | None:
        if self._loaded:
            return self._encoding
        with self._lock:
            if not self._loaded:
                try:
                    self._encoding = self._loader(self.encoding_name)
                except ImportError:
                    log.info(
                        "tiktoken is not installed; counting about {cpt:.0f} characters "
                        "per token (install the 'tokens' extra for exact counts)",
                        cpt=CHARS_PER_TOKEN,
                    )
                except Exception as e:  # only a warning when tiktoken was asked for:
                    asked = os.environ.get("TIKTOKEN_CACHE_DIR") or _downloads_allowed()
                    (log.warn if asked else log.info)(
                        "tiktoken could not load encoding {encoding} ({error}); counting "
                        "about {cpt:.0f} characters per token. Set TIKTOKEN_CACHE_DIR to a "
                        "directory holding the encoding files for exact counts offline.",
                        encoding=self.encoding_name,
                        error=f"{type(e).__name__}: {e}"[:300],
                        cpt=CHARS_PER_TOKEN,
                    )
                self._loaded = True
        return self._encoding

    def count_text(self, text: str) -> int:
        """Tokens in ``text``."""
        if not text:
            return 0
        encoding = self._get_encoding()
        if encoding is None:
            return math.ceil(len(text) / CHARS_PER_TOKEN)
        return len(encoding.encode(text, disallowed_special=()))

    def count_message(self, message: JSONMapping) -> int:
        """Tokens of one chat message, framing included."""
        if (self._encoding if self._loaded else self._get_encoding()) is None:
            return _estimate_message(message)
        total = TOKENS_PER_MESSAGE
        total += self.count_text(str(message.get("role") or ""))
        total += self.count_text(content_text(message.get("content")))
        if message.get("name"):
            total += TOKENS_PER_NAME + self.count_text(str(message["name"]))
        if message.get("tool_call_id"):
            total += self.count_text(str(message["tool_call_id"]))
        for call in cast("Iterable[object]", message.get("tool_calls") or ()):
            total += self._count_call(call)
        return total

    def count_messages(
        self,
        messages: Iterable[JSONMapping],
        tools: Sequence[JSONMapping] | None = None,
    ) -> int:
        """Tokens of a whole request: every message, the tool schemas, reply priming."""
        total = sum(self.count_message(m) for m in messages)
        if tools:
            total += self.count_text(json.dumps(list(tools), ensure_ascii=False, default=str))
        return total + REPLY_PRIMING_TOKENS

    def _count_call(self, call: Any) -> int:
        if not isinstance(call, Mapping):
            return self.count_text(str(call))
        function = call.get("function")
        if not isinstance(function, Mapping):
            function = {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, default=str)
        return (
            TOKENS_PER_TOOL_CALL
            + self.count_text(str(call.get("id") or ""))
            + self.count_text(str(function.get("name") or ""))
            + self.count_text(arguments)
        )


def _estimate_message(message: JSONMapping) -> int:
    """``count_message`` with the characters-per-token estimate, in one pass.

    Same sum, piece by piece, as counting each text with ``count_text`` (the
    estimate of a text is ``ceil(len / CHARS_PER_TOKEN)``, 0 for ""), without a
    call per piece: messages are counted on every loop iteration.
    """
    ceil = math.ceil
    total = TOKENS_PER_MESSAGE + ceil(len(str(message.get("role") or "")) / CHARS_PER_TOKEN)
    content = message.get("content")
    if content is not None:
        text = content if type(content) is str else content_text(content)
        total += ceil(len(text) / CHARS_PER_TOKEN)
    name = message.get("name")
    if name:
        total += TOKENS_PER_NAME + ceil(len(str(name)) / CHARS_PER_TOKEN)
    call_id = message.get("tool_call_id")
    if call_id:
        total += ceil(len(str(call_id)) / CHARS_PER_TOKEN)
    for call in cast("Iterable[object]", message.get("tool_calls") or ()):
        if type(call) is not dict and not isinstance(call, Mapping):
            total += ceil(len(str(call)) / CHARS_PER_TOKEN)
            continue
        function = call.get("function")
        if type(function) is not dict and not isinstance(function, Mapping):
            function = {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, default=str)
        total += (TOKENS_PER_TOOL_CALL
                  + ceil(len(str(call.get("id") or "")) / CHARS_PER_TOKEN)
                  + ceil(len(str(function.get("name") or "")) / CHARS_PER_TOKEN)
                  + ceil(len(arguments) / CHARS_PER_TOKEN))
    return total


def estimate_native_exchange(call_id: str, name: str, arguments_json: str,
                             assistant_content: str | None, result_content: str) -> int:
    """The estimate of a native tool exchange's two messages, from the lengths of its texts.

    Equal to ``_estimate_message`` of the assistant message carrying the one call
    and of the tool message answering it (what ``build_tool_exchange(...,
    native=True)`` makes) without building or walking them: the loop counts one
    exchange per tool call.
    """
    ceil = math.ceil
    id_tokens = ceil(len(call_id) / CHARS_PER_TOKEN)
    total = (_NATIVE_EXCHANGE_FRAMING + id_tokens + id_tokens
             + ceil(len(name) / CHARS_PER_TOKEN)
             + ceil(len(arguments_json) / CHARS_PER_TOKEN)
             + ceil(len(result_content) / CHARS_PER_TOKEN))
    if assistant_content is not None:
        total += ceil(len(assistant_content) / CHARS_PER_TOKEN)
    return total


_NATIVE_EXCHANGE_FRAMING = (
    TOKENS_PER_MESSAGE + math.ceil(len("assistant") / CHARS_PER_TOKEN) + TOKENS_PER_TOOL_CALL
    + TOKENS_PER_MESSAGE + math.ceil(len("tool") / CHARS_PER_TOKEN)
)
"""Tokens of a native exchange that do not depend on its texts (framing and roles)."""



_default_counter: TokenCounter | None = None


def default_counter() -> TokenCounter:
    """The process-wide counter (its encoding is loaded once, on first count)."""
    global _default_counter
    if _default_counter is None:
        _default_counter = TokenCounter()
    return _default_counter


def count_messages(
    messages: Iterable[JSONMapping], tools: Sequence[JSONMapping] | None = None
) -> int:
    """Tokens of a message list with the process-wide counter."""
    return default_counter().count_messages(messages, tools)


def count_text(text: str) -> int:
    """Tokens of ``text`` with the process-wide counter."""
    return default_counter().count_text(text)
