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
from ai_tools.llm.repetition import RepetitionConfig

ENV_URL = "AI_TOOLS_LLM_URL"
ENV_MODEL = "AI_TOOLS_LLM_MODEL"
ENV_API_KEY_ENV = "AI_TOOLS_LLM_API_KEY_ENV"
ENV_CONTEXT_WINDOW = "AI_TOOLS_LLM_CONTEXT_WINDOW"
ENV_STREAM = "AI_TOOLS_LLM_STREAM"
ENV_TOOL_CALLING = "AI_TOOLS_LLM_TOOL_CALLING"

TOOL_CALLING_MODES = ("native", "fallback")


@attrs.frozen
class Timeouts:
    """Seconds to wait, per phase of a request (None: no limit).

    ``headers`` runs from sending the request to the response headers (for a
    non-streamed answer that includes the whole generation); ``idle`` is the
    longest silence allowed between two body chunks; ``total`` bounds one
    attempt from start to end.
    """

    connect: float = 10.0
    headers: float | None = 300.0
    idle: float | None = 60.0
    total: float | None = None


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
class ModelProfile:
    """How to reach one model over the OpenAI chat-completions API.

    ``extra_body`` is merged into every request body (``temperature``,
    ``max_tokens``, ``top_p``, server-specific options...).  ``tool_calling``
    says whether the model gets ``tools=`` (``"native"``) or tool calls are
    described in the prompt and parsed from the text (``"fallback"``).
    ``context_window`` None means: look the model up in
    :func:`ai_tools.llm.tokens.context_window_for`.  ``log_requests`` logs
    every request at debug level (credentials redacted); off by default, as a
    log event per request costs more CPU than parsing its stream.
    """

    base_url: str = attrs.field(converter=normalise_base_url)
    model: str
    api_key_env: str | None = None
    context_window: int | None = None
    extra_body: Mapping[str, Any] = attrs.field(factory=dict)
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
    name: str = ""
    log_requests: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.model:
            raise ConfigError("model profile: 'model' must not be empty")
        if self.max_concurrency < 1:
            raise ConfigError("model profile: 'max_concurrency' must be >= 1")
        if self.tool_calling not in TOOL_CALLING_MODES:
            raise ConfigError(
                f"model profile: 'tool_calling' must be one of {TOOL_CALLING_MODES}, "
                f"got {self.tool_calling!r}"
            )
        if self.context_window is not None and self.context_window < 1:
            raise ConfigError("model profile: 'context_window' must be a positive integer")

    @property
    def chat_url(self) -> str:
        """The full ``/chat/completions`` URL."""
        return self.base_url + "/chat/completions"

    @property
    def label(self) -> str:
        """A short name for logs: the profile name or ``model@host``."""
        return self.name or f"{self.model}@{urlsplit(self.base_url).netloc}"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "model profile") -> ModelProfile:
        """Build a profile from a config table; unknown keys are a ConfigError.

        ``timeouts`` and ``repetition`` may be nested tables.
        """
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
        for required in ("base_url", "model"):
            if not data.get(required):
                raise ConfigError(f"{where}: '{required}' is required")
        values = dict(data)
        try:
            if isinstance(values.get("timeouts"), Mapping):
                values["timeouts"] = Timeouts(**values["timeouts"])
            if isinstance(values.get("repetition"), Mapping):
                values["repetition"] = RepetitionConfig(**values["repetition"])
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
        ``AI_TOOLS_LLM_STREAM`` (``0``/``1``) and ``AI_TOOLS_LLM_TOOL_CALLING``.
        """
        env = os.environ if environ is None else environ
        url = env.get(ENV_URL, "").strip()
        model = env.get(ENV_MODEL, "").strip()
        if not url:
            raise ConfigError(f"${ENV_URL} is not set (e.g. http://localhost:11434/v1)")
        if not model:
            raise ConfigError(f"${ENV_MODEL} is not set (the model name the server expects)")
        values: dict[str, Any] = {"base_url": url, "model": model}
        if env.get(ENV_API_KEY_ENV, "").strip():
            values["api_key_env"] = env[ENV_API_KEY_ENV].strip()
        if env.get(ENV_CONTEXT_WINDOW, "").strip():
            try:
                values["context_window"] = int(env[ENV_CONTEXT_WINDOW])
            except ValueError:
                raise ConfigError(
                    f"${ENV_CONTEXT_WINDOW} must be an integer, got {env[ENV_CONTEXT_WINDOW]!r}"
                ) from None
        if env.get(ENV_STREAM, "").strip():
            values["stream"] = env[ENV_STREAM].strip().lower() not in ("0", "false", "no", "off")
        if env.get(ENV_TOOL_CALLING, "").strip():
            values["tool_calling"] = env[ENV_TOOL_CALLING].strip()
        return cls.from_mapping(values, where="environment")
