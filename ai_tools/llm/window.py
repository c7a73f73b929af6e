"""A model's context window: configured, learned from its server, known, or the default.

The window the server really runs with is what counts: Ollama cuts a prompt
longer than its runtime ``num_ctx`` silently, llama.cpp refuses it, and both
often run with much less than the model was trained for.  So a client asks
its server once (:func:`discover_window`), with what each kind of server
offers:

* vLLM: ``GET /v1/models``, the model's ``max_model_len``;
* llama.cpp's ``llama-server``: ``GET /props`` at the server's root,
  ``default_generation_settings.n_ctx`` (the window of one slot: with
  ``--parallel N`` each request gets ``-c`` / N);
* Ollama (its native API at the root, not under ``/v1``): ``GET /api/ps``,
  the ``context_length`` the loaded model runs with; for a model not loaded
  yet, the ``num_ctx`` of its Modelfile (``POST /api/show``'s
  ``parameters``) — never ``/api/show``'s trained maximum;
* LM Studio: ``GET /api/v1/models``, ``loaded_instances[].config.context_length``.

A server that tells none of these (llama-cpp-python's server: its
``/v1/models`` has no window and ``/props`` is 404; hosted APIs) leaves the
configured window, else a known model's, else 8,192 tokens; and a
context-overflow 400 names the window in its text (``exceed context window of
2048``, ``maximum context length is 2048 tokens``, llama.cpp's ``n_ctx``):
:meth:`ContextWindow.learn_from_error` takes it from there.

A configured window and a learned one: the smaller wins (the operator may
want less than the server offers; the server never gives more).
:class:`ContextWindow` logs once which window is used and where it came from,
and again only when it changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.json_types import JSONMapping
from ai_tools.llm.profile import ModelProfile
from ai_tools.llm.tokens import DEFAULT_CONTEXT_WINDOW, known_context_window

__all__ = ["ContextWindow", "ServerFacts", "discover_window", "reply_room_in_error", "server_root",
           "window_in_error"]

log = Logger(namespace="ai_tools.llm.window")

PROBE_BODY_BYTES = 1 << 20
"""The most one metadata answer may be (``/props`` carries the chat template)."""
PROBE_TIMEOUT = 10.0
"""Seconds one metadata request may take, at most (less when the call's total is less)."""

_OVERFLOW_PATTERNS = (
    re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE),  # OpenAI, vLLM
    re.compile(r"context window of (\d+)", re.IGNORECASE),  # llama-cpp-python
    re.compile(r'"n_ctx"\s*:\s*(\d+)'),  # llama.cpp's exceed_context_size_error
    re.compile(r"context (?:length|size) (?:of|is) (\d+)", re.IGNORECASE),
)
_INPUT_PATTERNS = (
    re.compile(r"your request has (\d+) input tokens", re.IGNORECASE),  # vLLM >= 0.6
    re.compile(r"\((\d+) in the messages, \d+ in the completion\)", re.IGNORECASE),  # older vLLM
)
"""Errors refusing a prompt that fits only without the asked ``max_tokens``: they name the
prompt's tokens (a prompt too long by itself names no completion tokens, and matches none)."""


@attrs.define(eq=False)
class ContextWindow:
    """What a client knows of its model's window, and where it came from."""

    label: str
    configured: int | None
    fallback: int
    """The known model's window, else the default (used when nothing else is)."""
    fallback_source: str
    learned: int | None = None
    learned_from: str = ""
    settled: bool = False
    """Whether the server has been asked (or is not to be asked)."""
    _logged: int | None = None

    @classmethod
    def for_profile(cls, profile: ModelProfile) -> ContextWindow:
        """The window of ``profile``'s model before the server is asked."""
        known = known_context_window(profile.model)
        if known is not None:
            return cls(profile.label, profile.context_window, known,
                       f"known for model {profile.model!r}", settled=not profile.discover_window)
        return cls(profile.label, profile.context_window, DEFAULT_CONTEXT_WINDOW,
                   f"the default for a model ai_tools does not know ({profile.model!r})",
                   settled=not profile.discover_window)

    @property
    def tokens(self) -> int:
        """The window in tokens (see the module docstring for the order)."""
        if self.learned is not None:
            return min(self.learned, self.configured or self.learned)
        return self.configured or self.fallback

    @property
    def source(self) -> str:
        """Where :attr:`tokens` comes from, in words."""
        learned, configured = self.learned, self.configured
        if learned is not None and configured is not None and configured != learned:
            smaller = "the configured one" if configured < learned else "the server's"
            return (f"configured {configured}, {self.learned_from}: {learned}; "
                    f"{smaller} is smaller")
        if learned is not None:
            return self.learned_from
        if configured is not None:
            return "the configured context_window"
        return self.fallback_source

    def learn(self, tokens: int, source: str) -> bool:
        """Take the window ``tokens`` the server told (``source`` says how); True if the
        window in use changed."""
        before = self.tokens
        self.learned, self.learned_from = tokens, source
        self.report()
        return self.tokens != before

    def learn_from_error(self, text: str) -> bool:
        """Take the window a context-overflow error names; True if the window changed."""
        tokens = window_in_error(text)
        if tokens is None or tokens == self.learned:
            return False
        return self.learn(tokens, "named by the server's context-overflow error")

    def report(self) -> None:
        """Log the window in use and where it came from (once per window)."""
        tokens = self.tokens
        if tokens != self._logged:
            self._logged = tokens
            log.info("Model {label}: context window {tokens} tokens ({source})",
                     label=self.label, tokens=tokens, source=self.source)


def window_in_error(text: str) -> int | None:
    """The window a context-overflow error text names, or None."""
    for pattern in _OVERFLOW_PATTERNS:
        match = pattern.search(text)
        if match is not None:
            tokens = int(match.group(1))
            if tokens > 0:
                return tokens
    return None


def reply_room_in_error(text: str, window: int) -> int | None:
    """The tokens a reply may still take, from an error refusing prompt + ``max_tokens``.

    vLLM refuses a request whose prompt and ``max_tokens`` together exceed its
    window (``max_model_len``) instead of shortening the reply; its error names the
    prompt's tokens.  The room is the window (the one the error names, else
    ``window``) minus those; None when the error names no prompt tokens or leaves
    no room (the prompt alone is too long: compaction's business, not the reply's).
    """
    for pattern in _INPUT_PATTERNS:
        match = pattern.search(text)
        if match is not None:
            room = (window_in_error(text) or window) - int(match.group(1))
            return room if room > 0 else None
    return None


def server_root(base_url: str) -> str:
    """The server's root URL: the base URL without its ``/v1`` (where native APIs are)."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


# -- what each kind of server answers -------------------------------------------------------

Found = tuple[int, str] | None
Reader = Callable[[Any, str], Found]


def _positive(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _same_model(name: object, model: str) -> bool:
    if not isinstance(name, str):
        return False
    return name in (model, f"{model}:latest") or f"{name}:latest" == model


def _listed(data: object, key: str, model: str) -> list[JSONMapping]:
    """The entries of ``data[key]`` (a list of objects): the model's own, else all of them
    when there is only one (a server serving one model answers to any name)."""
    entries = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        return []
    entries = [e for e in entries if isinstance(e, Mapping)]
    own = [e for e in entries if any(_same_model(e.get(k), model) for k in ("id", "name",
                                                                              "model", "key"))]
    return own or (entries if len(entries) == 1 else [])


def read_vllm(data: object, model: str) -> Found:
    """vLLM's ``/v1/models``: ``max_model_len`` of the model."""
    for entry in _listed(data, "data", model):
        tokens = _positive(entry.get("max_model_len"))
        if tokens:
            return tokens, "vLLM GET /v1/models max_model_len"
    return None


def read_llama_cpp(data: object, model: str) -> Found:
    """llama.cpp's ``/props``: the slot's ``n_ctx`` (total / slots when only the total)."""
    if not isinstance(data, Mapping):
        return None
    settings = data.get("default_generation_settings")
    slots = _positive(data.get("total_slots")) or 1
    if isinstance(settings, Mapping) and _positive(settings.get("n_ctx")):
        how = f", {slots} slots" if slots > 1 else ""
        return settings["n_ctx"], f"llama.cpp GET /props n_ctx per slot{how}"
    total = _positive(data.get("n_ctx"))
    if total:
        return max(1, total // slots), f"llama.cpp GET /props n_ctx {total} over {slots} slots"
    return None


def read_ollama_running(data: object, model: str) -> Found:
    """Ollama's ``/api/ps``: the runtime ``context_length`` of the loaded model."""
    for entry in _listed(data, "models", model):
        if _same_model(entry.get("name"), model) or _same_model(entry.get("model"), model):
            tokens = _positive(entry.get("context_length"))
            if tokens:
                return tokens, "Ollama GET /api/ps context_length (the loaded model's num_ctx)"
    return None


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def read_ollama_modelfile(data: object, model: str) -> Found:
    """Ollama's ``/api/show``: the ``num_ctx`` its Modelfile sets (not the trained maximum)."""
    parameters = data.get("parameters") if isinstance(data, Mapping) else None
    match = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if match is not None and int(match.group(1)) > 0:
        return int(match.group(1)), "Ollama POST /api/show: num_ctx of the Modelfile"
    return None


def read_lm_studio(data: object, model: str) -> Found:
    """LM Studio's ``/api/v1/models``: the loaded instance's ``context_length``."""
    for entry in _listed(data, "models", model):
        instances = entry.get("loaded_instances")
        for instance in instances if isinstance(instances, list) else ():
            config = instance.get("config") if isinstance(instance, Mapping) else None
            tokens = _positive(config.get("context_length")) if isinstance(config,
                                                                            Mapping) else None
            if tokens:
                return tokens, "LM Studio GET /api/v1/models loaded context_length"
    return None


@attrs.frozen
class Probe:
    """One metadata request and how to read its answer."""

    method: str
    url: str
    read: Reader
    body: JSONMapping | None = None


def probes(profile: ModelProfile) -> list[Probe]:
    """The metadata requests, in the order they are tried (the first window found wins)."""
    root = server_root(profile.base_url)
    return [
        Probe("GET", profile.base_url + "/models", read_vllm),
        Probe("GET", root + "/props", read_llama_cpp),
        Probe("GET", root + "/api/ps", read_ollama_running),
        Probe("POST", root + "/api/show", read_ollama_modelfile, {"model": profile.model}),
        Probe("GET", root + "/api/v1/models", read_lm_studio),
    ]


Fetch = Callable[[Probe], "defer.Deferred[tuple[int, bytes]]"]
"""Sends a probe; fires with (status, body) or fails when the server cannot be reached."""


@attrs.define
class ServerFacts:
    """What the metadata answers tell besides the window: the server's kind (when its
    answers show it) and how many requests it serves at once (llama.cpp's slots)."""

    kind: str | None = None
    slots: int | None = None
    chat_template: str | None = None
    """llama.cpp's ``/props`` ``chat_template`` (the one the server formats prompts with)."""

    def take(self, probe: Probe, data: object) -> None:
        """Read what ``probe``'s answer ``data`` tells of the server."""
        if probe.read is read_llama_cpp and isinstance(data, Mapping) and (
                "total_slots" in data or "default_generation_settings" in data):
            self.kind = "llama.cpp"
            self.slots = _positive(data.get("total_slots"))
            template = data.get("chat_template")
            self.chat_template = template if isinstance(template, str) else None
        elif probe.read is read_vllm and self.kind is None:
            entries = _listed(data, "data", "")
            if entries and all(e.get("owned_by") == "me" and "permissions" in e
                               for e in entries):
                self.kind = "llama-cpp-python"  # its /v1/models, and nothing else has it
            elif entries and any("max_model_len" in e for e in entries):
                self.kind = "vllm"


@defer.inlineCallbacks
def discover_window(profile: ModelProfile, fetch: Fetch,
                    facts: ServerFacts | None = None) -> Any:
    """Ask the server for its window; fires with ``(tokens, source)``, ``None`` when the
    server answered but told no window, or fails when it could not be reached.  What the
    answers tell of the server on the way goes into ``facts``."""
    model = profile.model
    for probe in probes(profile):
        status, raw = yield fetch(probe)
        if not 200 <= status < 300:
            continue
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if facts is not None:
            facts.take(probe, data)
        found = probe.read(data, model)
        if found is not None:
            return found
    return None

