"""Model profiles: where a model lives and how to talk to it.

A :class:`ModelProfile` is a plain value built from configuration (a TOML
table through :meth:`ModelProfile.from_mapping`, or the environment through
:meth:`ModelProfile.from_environ`).  It holds no secret: ``api_key_env`` names
the environment variable holding the key, read when a request is sent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from ai_tools.errors import ConfigError
from ai_tools.json_types import JSONMapping
from ai_tools.llm.repetition import RepetitionConfig
from ai_tools.numbers import is_positive_number

ENV_URL = "AI_TOOLS_LLM_URL"
ENV_MODEL = "AI_TOOLS_LLM_MODEL"
ENV_API_KEY_ENV = "AI_TOOLS_LLM_API_KEY_ENV"
ENV_CONTEXT_WINDOW = "AI_TOOLS_LLM_CONTEXT_WINDOW"
ENV_STREAM = "AI_TOOLS_LLM_STREAM"
ENV_TOOL_CALLING = "AI_TOOLS_LLM_TOOL_CALLING"
ENV_TOOL_CHOICE = "AI_TOOLS_LLM_TOOL_CHOICE"
ENV_MAX_TOKENS = "AI_TOOLS_LLM_MAX_TOKENS"

TOOL_CALLING_MODES = ("native", "fallback")
KNOWN_SERVER_KINDS = ("openai", "llama.cpp", "llama-cpp-python", "ollama", "vllm", "lmstudio")
"""The kinds of server ``server_kind`` may name (the scripted server plays each)."""
TOOL_CHOICES = ("auto", "required", "none")

MAX_TOKENS_SHARE = 4
"""The default ``max_tokens`` is the context window divided by this (a quarter)..."""
MAX_TOKENS_CEILING = 4096
"""...and never more than this many tokens."""


def default_max_tokens(window: int) -> int:
    """The ``max_tokens`` sent when a profile sets none: a quarter of ``window``, at most
    4,096 tokens (at least 1).

    A reply may then never fill the window by itself: a model that does not stop
    (7,439 tokens over 198 s were seen) leaves three quarters of it to the history,
    and a large window does not let one reply run for minutes.
    """
    return max(1, min(window // MAX_TOKENS_SHARE, MAX_TOKENS_CEILING))


def _seconds_or_none(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if value is None and attribute.name != "connect":
        return
    if not is_positive_number(value):
        raise ValueError(f"timeouts.{attribute.name} must be a positive number of seconds"
                         f"{'' if attribute.name == 'connect' else ' or none'}, got {value!r}")


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"limits.{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class Timeouts:
    """Seconds to wait, per phase of a model call (None: no limit).

    ``headers`` runs from sending a request to the response headers (for a
    non-streamed answer that includes the whole generation); ``idle`` is the
    longest silence allowed between two body chunks; ``progress`` the longest
    time a stream may go without an event (SSE comments such as
    ``: keep-alive`` are bytes but not progress); ``total`` bounds the whole
    call from its first request sent: every attempt and the waits between
    attempts (not the wait in the client's own queue for one of the server's
    slots); ``queue`` bounds each wait in that queue.
    """

    connect: float = attrs.field(default=10.0, validator=_seconds_or_none)
    headers: float | None = attrs.field(default=300.0, validator=_seconds_or_none)
    idle: float | None = attrs.field(default=60.0, validator=_seconds_or_none)
    progress: float | None = attrs.field(default=300.0, validator=_seconds_or_none)
    total: float | None = attrs.field(default=600.0, validator=_seconds_or_none)
    queue: float | None = attrs.field(default=900.0, validator=_seconds_or_none)


@attrs.frozen
class AnswerLimits:
    """How much a model server may send back for one answer, bounded in bytes.

    ``body_bytes`` caps the decoded bytes of a successful response body,
    plain or streamed (a gzip body counts as it decodes, so a small
    compressed body cannot inflate past it); ``answer_chars`` caps the
    answer itself, in characters: text, reasoning and tool-call arguments
    together; ``line_bytes`` caps one line of an SSE stream;
    ``error_body_bytes`` is how much of an error response is read (the rest
    is dropped, and the status still makes the error).  Crossing one of the
    first three fails the call with a protocol error; nothing of the answer
    is kept but the partial text of the error.
    """

    body_bytes: int = attrs.field(default=32 * 1024 * 1024, validator=_positive_int)
    answer_chars: int = attrs.field(default=1024 * 1024, validator=_positive_int)
    line_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_int)
    error_body_bytes: int = attrs.field(default=64 * 1024, validator=_positive_int)


def normalise_base_url(url: str) -> str:
    """``http://host:port`` → ``http://host:port/v1``; drop a trailing ``/chat/completions``."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"model base_url must be an http(s) URL, got {url!r}")
    if url.endswith("/chat/completions"):
        url = url[: -len("/chat/completions")]
    if not parts.path:
        url += "/v1"
    return url


@attrs.frozen
class Prices:
    """What a model's tokens cost, per million (the console's loop traces show the cost)."""

    input: float = attrs.field(validator=lambda _, a, v: _price(a.name, v))
    output: float = attrs.field(validator=lambda _, a, v: _price(a.name, v))
    currency: str = attrs.field(default="USD", validator=attrs.validators.instance_of(str))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Prices:
        """From a ``prices`` table: ``input`` and ``output`` required, ``currency``."""
        unknown = sorted(set(data) - {"input", "output", "currency"})
        missing = [k for k in ("input", "output") if k not in data]
        if unknown or missing:
            raise ConfigError("'prices' takes input and output (per million tokens) and "
                              f"currency; {'unknown: ' + ', '.join(unknown) if unknown else ''}"
                              f"{'missing: ' + ', '.join(missing) if missing else ''}")
        return cls(**data)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The price of one request's tokens."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


def _price(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 <= value < float("inf")):
        raise ConfigError(f"'prices.{name}' must be a price per million tokens (a number "
                          f">= 0), not {value!r}")


@attrs.frozen
class ModelProfile:
    """How to reach one model over the OpenAI chat-completions API.

    ``extra_body`` is merged into every request body (``temperature``,
    ``max_tokens``, ``top_p``, server-specific options...).  ``tool_calling``
    says whether the model gets ``tools=`` (``"native"``) or tool calls are
    described in the prompt and parsed from the text (``"fallback"``).
    ``context_window`` None means: what the server reports, else look the model
    up in :func:`ai_tools.llm.tokens.context_window_for` (see
    :mod:`ai_tools.llm.window`); ``discover_window`` False never asks the
    server.  ``tool_choice`` is sent with the tools (``"auto"`` by default; None
    sends none).  ``max_tokens`` caps each reply (None: a quarter of the
    window, at most 4,096, see :func:`default_max_tokens`; 0: send no cap);
    a ``max_tokens`` in ``extra_body`` wins.  ``log_requests`` logs
    every request at debug level (credentials redacted); off by default, as a
    log event per request costs more CPU than parsing its stream.
    """

    base_url: str = attrs.field(converter=normalise_base_url)
    model: str
    api_key_env: str | None = None
    context_window: int | None = None
    extra_body: JSONMapping = attrs.field(factory=dict)
    stream: bool = True
    timeouts: Timeouts = attrs.field(factory=Timeouts)
    max_concurrency: int = 8
    tool_calling: str = "native"
    headers: Mapping[str, str] = attrs.field(factory=dict)
    stream_usage: bool = True
    retry_after_cap: float = 60.0
    breaker_threshold: int = 5
    breaker_cooldown: float = 30.0
    repetition: RepetitionConfig = attrs.field(factory=RepetitionConfig)
    limits: AnswerLimits = attrs.field(factory=AnswerLimits)
    name: str = ""
    log_requests: bool = False
    tool_choice: str | None = "auto"
    max_tokens: int | None = None
    discover_window: bool = True
    prices: Prices | None = None
    """Per million input and output tokens (None: no cost is shown)."""
    server_slots: int | None = None
    """Requests the server serves at once, fixed (None: learned from the server, else
    ``max_concurrency``); the rest wait in the client's queue."""
    server_kind: str | None = None
    """What the server is (one of ``server_kinds.SERVER_KINDS``; None: learned)."""

    def __attrs_post_init__(self) -> None:
        if not self.model:
            raise ConfigError("model profile: 'model' must not be empty")
        for field in ("retry_after_cap", "breaker_cooldown"):
            if not is_positive_number(getattr(self, field)):
                raise ConfigError(f"model profile: '{field}' must be a positive number of "
                                  f"seconds, got {getattr(self, field)!r}")
        if self.max_concurrency < 1:
            raise ConfigError("model profile: 'max_concurrency' must be >= 1")
        if self.tool_calling not in TOOL_CALLING_MODES:
            raise ConfigError(
                f"model profile: 'tool_calling' must be one of {TOOL_CALLING_MODES}, "
                f"got {self.tool_calling!r}"
            )
        self._check_server()
        if self.context_window is not None and self.context_window < 1:
            raise ConfigError("model profile: 'context_window' must be a positive integer")
        if self.tool_choice is not None and self.tool_choice not in TOOL_CHOICES:
            raise ConfigError(
                f"model profile: 'tool_choice' must be one of {TOOL_CHOICES} or none "
                f"(\"off\"), got {self.tool_choice!r}"
            )
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(
                self.max_tokens, int) or self.max_tokens < 0):
            raise ConfigError("model profile: 'max_tokens' must be a positive integer "
                              "(0: send none)")
        for field, kind in (("timeouts", Timeouts), ("repetition", RepetitionConfig),
                            ("limits", AnswerLimits)):
            if not isinstance(getattr(self, field), kind):
                raise ConfigError(f"model profile: '{field}' must be a table")
        if self.prices is not None and not isinstance(self.prices, Prices):
            raise ConfigError("model profile: 'prices' must be a table (input, output)")

    def _check_server(self) -> None:
        """What the profile says of the server itself: its slots and its kind."""
        if self.server_slots is not None and (isinstance(self.server_slots, bool) or not
                                              isinstance(self.server_slots, int)
                                              or self.server_slots < 1):
            raise ConfigError("model profile: 'server_slots' must be a positive integer")
        if self.server_kind is not None and self.server_kind not in KNOWN_SERVER_KINDS:
            raise ConfigError(f"model profile: 'server_kind' must be one of "
                              f"{', '.join(KNOWN_SERVER_KINDS)}, got {self.server_kind!r}")

    @property
    def chat_url(self) -> str:
        """The full ``/chat/completions`` URL."""
        return self.base_url + "/chat/completions"

    @property
    def label(self) -> str:
        """A short name for logs: the profile name or ``model@host``."""
        return self.name or f"{self.model}@{urlsplit(self.base_url).netloc}"

    @classmethod
    def from_mapping(cls, data: JSONMapping, where: str = "model profile") -> ModelProfile:
        """Build a profile from a config table; unknown keys are a ConfigError.

        ``timeouts``, ``repetition`` and ``limits`` may be nested tables.
        """
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
        for required in ("base_url", "model"):
            if not data.get(required):
                raise ConfigError(f"{where}: '{required}' is required")
        values: dict[str, Any] = dict(data)  # checked by the attrs validators
        if values.get("tool_choice") in ("off", ""):
            values["tool_choice"] = None
        try:
            if isinstance(values.get("timeouts"), Mapping):
                values["timeouts"] = Timeouts(**values["timeouts"])
            if isinstance(values.get("repetition"), Mapping):
                values["repetition"] = RepetitionConfig(**values["repetition"])
            if isinstance(values.get("limits"), Mapping):
                values["limits"] = AnswerLimits(**values["limits"])
            if isinstance(values.get("prices"), Mapping):
                values["prices"] = Prices.from_mapping(values["prices"])
            return cls(**values)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: {e}") from None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ModelProfile:
        """Build a profile from ``AI_TOOLS_LLM_*`` variables.

        ``AI_TOOLS_LLM_URL`` and ``AI_TOOLS_LLM_MODEL`` are required;
        ``AI_TOOLS_LLM_API_KEY_ENV`` names the variable holding the key
        (e.g. ``OPENAI_API_KEY``); optional ``AI_TOOLS_LLM_CONTEXT_WINDOW``,
        ``AI_TOOLS_LLM_STREAM`` (``0``/``1``), ``AI_TOOLS_LLM_TOOL_CALLING``,
        ``AI_TOOLS_LLM_TOOL_CHOICE`` and ``AI_TOOLS_LLM_MAX_TOKENS``.
        """
        env = os.environ if environ is None else environ
        url = env.get(ENV_URL, "").strip()
        model = env.get(ENV_MODEL, "").strip()
        if not url:
            raise ConfigError(f"${ENV_URL} is not set (e.g. http://localhost:11434/v1)")
        if not model:
            raise ConfigError(f"${ENV_MODEL} is not set (the model name the server expects)")
        values: dict[str, object] = {"base_url": url, "model": model}
        if env.get(ENV_API_KEY_ENV, "").strip():
            values["api_key_env"] = env[ENV_API_KEY_ENV].strip()
        for variable, key in ((ENV_CONTEXT_WINDOW, "context_window"),
                              (ENV_MAX_TOKENS, "max_tokens")):
            if env.get(variable, "").strip():
                values[key] = _integer_variable(env, variable)
        if env.get(ENV_STREAM, "").strip():
            values["stream"] = env[ENV_STREAM].strip().lower() not in ("0", "false", "no", "off")
        for variable, key in ((ENV_TOOL_CALLING, "tool_calling"),
                              (ENV_TOOL_CHOICE, "tool_choice")):
            if env.get(variable, "").strip():
                values[key] = env[variable].strip()
        return cls.from_mapping(values, where="environment")


def _integer_variable(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"${name} must be an integer, got {env[name]!r}") from None
