"""What each kind of model server tells about itself, for the scripted server to answer.

A real server's context window shows in its own metadata endpoints (see
:mod:`ai_tools.llm.window`) and in the 400 it answers to a prompt longer than
the window.  :class:`ServerKind` answers those as one kind of server does,
so the window discovery is tested against each:

========================  ======================================================  ===============
kind                      metadata with the window                                prompt too long
========================  ======================================================  ===============
``openai`` (default)      none (``/v1/models`` lists the model only)              OpenAI's 400
``llama.cpp``             ``GET /props`` (``n_ctx`` per slot, ``total_slots``)    llama.cpp's 400
``llama-cpp-python``      none (``/v1/models`` without it, ``/props`` 404)        OpenAI's 400
``ollama``                ``GET /api/ps`` ``context_length`` (model loaded),      none: Ollama
                          else ``POST /api/show`` Modelfile ``num_ctx``           truncates
``vllm``                  ``GET /v1/models`` ``max_model_len``                    OpenAI's 400
``lmstudio``              ``GET /api/v1/models`` loaded ``context_length``        OpenAI's 400
========================  ======================================================  ===============

Without a ``context_window`` the kind reports none and never overflows.  The
``llama-cpp-python`` kind also ends a streamed answer offering tools with
``tool_choice: "auto"`` before its first chunk, as that server does.
"""

from __future__ import annotations

import json

import attrs

from ai_tools.json_types import JSONArray, JSONMapping, JSONObject
from ai_tools.llm.profile import KNOWN_SERVER_KINDS

__all__ = ["SERVER_KINDS", "ServerKind"]

SERVER_KINDS = KNOWN_SERVER_KINDS

Answer = tuple[int, JSONObject]


def _kind(instance: object, attribute: object, value: str) -> None:
    if value not in SERVER_KINDS:
        raise ValueError(f"server kind must be one of {', '.join(SERVER_KINDS)}, got {value!r}")


@attrs.frozen
class ServerKind:
    """One kind of server: its window (tokens, None: it tells none), its slots
    (llama.cpp's ``--parallel``: each slot gets window / slots) and, for Ollama,
    whether the model is loaded (``/api/ps`` lists it) or not yet.  ``model`` is the
    name it lists the model under (Ollama and LM Studio list the names clients use)."""

    kind: str = attrs.field(default="openai", validator=_kind)
    context_window: int | None = None
    slots: int = 1
    loaded: bool = True
    model: str | None = None
    """The name the server lists its model under (default: the scripted model's)."""

    @property
    def slot_window(self) -> int | None:
        """The window one request gets."""
        return None if self.context_window is None else self.context_window // self.slots

    def metadata(self, method: str, path: str, model: str) -> Answer | None:
        """The answer to a metadata request (None: this kind has no such endpoint)."""
        path = path.rstrip("/")
        model = self.model or model
        if method == "GET" and path.endswith("/v1/models") and not path.startswith("/api/"):
            return 200, self._models(model)
        if self.context_window is None:
            return None
        answer: Answer | None = None
        if self.kind == "llama.cpp" and method == "GET" and path == "/props":
            answer = 200, {"default_generation_settings": {"n_ctx": self.slot_window},
                           "total_slots": self.slots, "model_alias": model}
        elif self.kind == "ollama" and method == "GET" and path == "/api/ps":
            running: JSONArray = [
                {"name": model, "model": model, "context_length": self.context_window}]
            answer = 200, {"models": running if self.loaded else []}
        elif self.kind == "ollama" and method == "POST" and path == "/api/show":
            answer = 200, {"parameters": f"num_ctx {self.context_window}\nstop \"<|im_end|>\"",
                           "model_info": {"general.architecture": "llama",
                                          "llama.context_length": self.context_window * 16}}
        elif self.kind == "lmstudio" and method == "GET" and path == "/api/v1/models":
            answer = 200, {"models": [{
                "type": "llm", "key": model, "max_context_length": self.context_window * 16,
                "loaded_instances": [{"id": model,
                                      "config": {"context_length": self.context_window}}]}]}
        return answer

    def _models(self, model: str) -> JSONObject:
        entry: JSONObject = {"id": model, "object": "model", "owned_by": "ai_tools"}
        if self.kind == "llama-cpp-python":
            entry = {"id": model, "object": "model", "owned_by": "me", "permissions": []}
        elif self.kind == "llama.cpp":
            entry["meta"] = {"n_ctx_train": 131072}  # the trained window, not the runtime one
        elif self.kind == "vllm" and self.context_window is not None:
            entry["max_model_len"] = self.context_window
        return {"object": "list", "data": [entry]}

    def breaks_stream(self, body: JSONMapping) -> bool:
        """Whether this kind ends the stream of this request before its first chunk:
        llama-cpp-python does when tools are offered with ``tool_choice: "auto"`` (it
        cannot stream a call the model chose), without ``[DONE]``."""
        return (self.kind == "llama-cpp-python" and bool(body.get("stream"))
                and bool(body.get("tools")) and body.get("tool_choice") == "auto")

    def overflow(self, body: JSONMapping) -> Answer | None:
        """The error a prompt longer than the window gets (None: it fits, or this kind
        truncates silently, as Ollama does).  Tokens are estimated at 4 characters."""
        window = self.slot_window
        if window is None or self.kind == "ollama":
            return None
        prompt = max(1, len(json.dumps([body.get("messages"), body.get("tools")],
                                       ensure_ascii=False, default=str)) // 4)
        if self.kind == "vllm":
            return _vllm_overflow(window, prompt, body.get("max_tokens"))
        if prompt < window:
            return None
        if self.kind == "llama.cpp":
            return 400, {"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt,
                "n_ctx": window,
                "message": "the request exceeds the available context size, try increasing it"}}
        return 400, {"error": {
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
            "message": f"This model's maximum context length is {window} tokens. However, you "
                       f"requested {prompt} tokens ({prompt} in the messages, None in the "
                       "completion). Please reduce the length of the messages or completion."}}


def _vllm_overflow(window: int, prompt: int, max_tokens: object) -> Answer | None:
    """vLLM's refusals: a prompt too long by itself, or one that fits only without the
    asked ``max_tokens`` (vLLM does not shorten the reply to fit; its texts as of 0.6)."""
    if prompt >= window:
        message = (f"This model's maximum context length is {window} tokens. However, you "
                   f"requested {prompt} tokens in the messages, Please reduce the length of "
                   "the messages.")
    elif isinstance(max_tokens, int) and prompt + max_tokens > window:
        message = (f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                   f"model's maximum context length is {window} tokens and your request has "
                   f"{prompt} input tokens ({max_tokens} > {window} - {prompt}).")
    else:
        return None
    return 400, {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                 "message": message}
