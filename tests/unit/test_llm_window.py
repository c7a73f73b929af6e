"""The context window a client uses: asked of its server (each kind its own way), learned
from a context-overflow error, the configured one, logged once with where it came from.

The client talks to the scripted model emulating each kind of server
(:class:`ai_tools.testing.ServerKind`), in memory, time on a Clock.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.error import ConnectionLost, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.logger import formatEvent

from ai_tools.errors import LLMConnectionError, LLMRequestError
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.profile import ModelProfile
from ai_tools.llm.window import (
    PROBE_TIMEOUT,
    ContextWindow,
    read_llama_cpp,
    read_ollama_running,
    reply_room_in_error,
    server_root,
    window_in_error,
)
from ai_tools.retry import RetryPolicy
from ai_tools.testing import ServerKind
from tests.unit.test_llm_client import USER, Harness, logged  # noqa: F401  (a fixture)


def harness(kind: ServerKind, script: Any = ("ok",), **profile: Any) -> Harness:
    h = Harness(list(script), model="local", **profile)
    h.resource.server_kind = kind
    return h


def window_lines(events: list[dict[str, Any]]) -> list[str]:
    return [formatEvent(e) for e in events if "context window" in formatEvent(e)]


@pytest.mark.parametrize(("kind", "source"), [
    (ServerKind("llama.cpp", 8192), "llama.cpp GET /props"),
    (ServerKind("vllm", 8192), "vLLM GET /v1/models max_model_len"),
    (ServerKind("ollama", 8192, model="local"), "Ollama GET /api/ps context_length"),
    (ServerKind("ollama", 8192, loaded=False, model="local"), "Ollama POST /api/show: num_ctx"),
    (ServerKind("lmstudio", 8192, model="local"), "LM Studio GET /api/v1/models"),
], ids=["llama.cpp", "vllm", "ollama-loaded", "ollama-not-loaded", "lmstudio"])
def test_the_window_is_asked_of_each_kind_of_server(kind: ServerKind, source: str,
                                                    logged: list) -> None:  # noqa: F811
    """An unknown model name, no configured window: the first call asks the server, the
    window is the server's runtime one (not a trained maximum), logged once with its source."""
    h = harness(kind, ["one", "two"])
    assert h.client.context_window == 8192  # the default, before asking
    h.run(h.client.complete(USER))
    h.run(h.client.complete(USER))
    assert h.client.context_window == 8192
    assert source in h.client.context_window_source
    lines = window_lines(logged)
    assert len(lines) == 1 and "8192 tokens" in lines[0] and source in lines[0], lines
    assert len(h.requests) == 2  # the chat requests; the metadata ones are apart
    assert h.resource.metadata_requests  # asked once, before the first call


@pytest.mark.parametrize("window", [2048, 32768])
def test_a_learned_window_is_used_whatever_its_size(window: int) -> None:
    """Smaller or larger than the default: the server's runtime window is the one used,
    also for a model ai_tools knows by a larger trained window (llama3.1: 131,072)."""
    h = Harness(["ok"], model="llama3.1:8b")
    h.resource.server_kind = ServerKind("ollama", window, model="llama3.1:8b")
    assert h.client.context_window == 131072
    h.run(h.client.complete(USER))
    assert h.client.context_window == window


def test_llama_cpp_slots_divide_the_window() -> None:
    """With --parallel 4 each request gets a quarter of -c."""
    h = harness(ServerKind("llama.cpp", 16384, slots=4))
    h.run(h.client.complete(USER))
    assert h.client.context_window == 4096
    assert "4 slots" in h.client.context_window_source
    assert read_llama_cpp({"n_ctx": 8192, "total_slots": 2}, "m") == (
        4096, "llama.cpp GET /props n_ctx 8192 over 2 slots")


def test_the_configured_window_and_the_servers_the_smaller_wins(logged: list) -> None:  # noqa: F811
    h = harness(ServerKind("vllm", 8192), context_window=16384)
    h.run(h.client.complete(USER))
    assert h.client.context_window == 8192
    line, = window_lines(logged)
    assert "configured 16384" in line and "the server's is smaller" in line
    h = harness(ServerKind("vllm", 8192), context_window=4096)
    h.run(h.client.complete(USER))
    assert h.client.context_window == 4096


def test_a_server_that_tells_nothing_keeps_the_configured_or_default_window(
        logged: list) -> None:  # noqa: F811
    """OpenAI-like and llama-cpp-python servers tell no window: the configured one (else
    the default for an unknown model) is used, and the log says so, once."""
    h = harness(ServerKind("llama-cpp-python", 2048))
    h.run(h.client.complete(USER))
    assert h.client.context_window == 8192
    line, = window_lines(logged)
    assert "8192 tokens" in line and "does not know ('local')" in line
    assert ("GET", "/props") in h.resource.metadata_requests


def test_discovery_off_asks_nothing() -> None:
    h = harness(ServerKind("llama.cpp", 4096), discover_window=False)
    h.run(h.client.complete(USER))
    assert h.resource.metadata_requests == []
    assert h.client.context_window == 8192


def test_learn_context_window_at_start_up() -> None:
    """A host may ask before any call (e.g. at start-up): one discovery for every caller."""
    h = harness(ServerKind("llama.cpp", 8192))
    first, second = h.client.learn_context_window(), h.client.learn_context_window()
    assert h.run(first) == 8192 and h.run(second) == 8192
    asked = list(h.resource.metadata_requests)
    assert h.run(h.client.learn_context_window()) == 8192
    h.run(h.client.complete(USER))
    assert h.resource.metadata_requests == asked


def test_an_unreachable_server_is_asked_again_at_the_next_call(logged: list) -> None:  # noqa: F811
    """Discovery never fails or holds the call; when the server could not be reached it
    is asked again at the next call."""

    class Refusing:
        calls = 0

        def request(self, *args: Any, **kwargs: Any) -> defer.Deferred:
            Refusing.calls += 1
            return defer.fail(ConnectionRefusedError("nobody home"))

    client = OpenAIChatClient(ModelProfile(base_url="http://127.0.0.1:9", model="local"),
                              reactor=Clock(), agent=Refusing(),
                              retry_policy=RetryPolicy(max_attempts=1))
    for _ in range(2):
        failures: list = []
        client.complete(USER).addErrback(failures.append)
        assert failures and failures[0].check(LLMConnectionError)
    assert Refusing.calls == 4  # per call: the first metadata request, then the call
    assert client.context_window == 8192
    assert any("could not ask the server for its context window" in formatEvent(e)
               for e in logged)


def test_an_overflow_error_teaches_the_window_and_the_request_is_sent_again(
        logged: list) -> None:  # noqa: F811
    """llama-cpp-python tells its window only in the 400 of a request too long for it.
    With the default max_tokens (a quarter of the window), the request is rebuilt with
    the learned window's and sent once more; the window is logged with its source."""
    h = harness(ServerKind("llama-cpp-python", 2048), ["first", "second"])
    long_prompt = [{"role": "user", "content": "word " * 1800}]  # ~2,250 tokens
    with pytest.raises(LLMRequestError, match="maximum context length is 2048 tokens"):
        h.run(h.client.complete(long_prompt))
    assert h.client.context_window == 2048
    assert "context-overflow error" in h.client.context_window_source
    assert any("2048 tokens" in line for line in window_lines(logged))
    answer = h.run(h.client.complete(USER))
    assert answer.content == "first"
    assert [r.body["max_tokens"] for r in h.requests] == [2048, 512, 512]


def test_vllm_refusing_prompt_plus_max_tokens_gets_a_shorter_reply(logged: list) -> None:  # noqa: F811
    """vLLM refuses a prompt that fits its window only without the asked max_tokens (it
    does not shorten the reply).  The call is sent again at once with the room left,
    and answered; the next call asks the default again (its prompt may be shorter)."""
    h = harness(ServerKind("vllm", 8192), ["first", "second"], context_window=8192)
    prompt = [{"role": "user", "content": "word " * 5200}]  # ~6,500 tokens of 8,192
    answer = h.run(h.client.complete(prompt))
    assert answer.content == "first"
    sent = [r.body["max_tokens"] for r in h.requests]
    assert sent[0] == 2048 and 0 < sent[1] < 2048
    assert any("at most" in formatEvent(e) for e in logged)
    h.run(h.client.complete(USER))
    assert h.requests[-1].body["max_tokens"] == 2048


def test_a_prompt_too_long_by_itself_is_not_sent_again() -> None:
    """No room is left for any reply: the error reaches the caller (compaction's turn)."""
    h = harness(ServerKind("vllm", 2048), ["first"], context_window=2048)
    with pytest.raises(LLMRequestError, match="in the messages"):
        h.run(h.client.complete([{"role": "user", "content": "word " * 1800}]))
    assert len(h.requests) == 1


def test_reply_room_in_error_texts() -> None:
    new = ("'max_tokens' or 'max_completion_tokens' is too large: 2048. This model's maximum "
           "context length is 8192 tokens and your request has 6500 input tokens "
           "(2048 > 8192 - 6500).")
    assert reply_room_in_error(new, 4096) == 1692
    old = ("This model's maximum context length is 4096 tokens. However, you requested 4200 "
           "tokens (3000 in the messages, 1200 in the completion).")
    assert reply_room_in_error(old, 8192) == 1096
    assert reply_room_in_error("requested 5000 tokens in the messages", 4096) is None
    assert reply_room_in_error("your request has 9000 input tokens", 4096) is None
    assert reply_room_in_error("model not found", 4096) is None


def test_window_in_error_texts() -> None:
    assert window_in_error("This model's maximum context length is 4096 tokens. However") == 4096
    assert window_in_error("Requested tokens (3000) exceed context window of 2048") == 2048
    assert window_in_error('{"error": {"type": "exceed_context_size_error", "n_ctx": 8192}}'
                           ) == 8192
    assert window_in_error("model not found") is None


def test_server_root() -> None:
    assert server_root("http://127.0.0.1:11434/v1") == "http://127.0.0.1:11434"
    assert server_root("https://openrouter.ai/api/v1") == "https://openrouter.ai/api"


def test_window_state_without_a_server() -> None:
    window = ContextWindow.for_profile(ModelProfile(base_url="http://h/v1", model="gpt-4o"))
    assert window.tokens == 128_000 and "known for model 'gpt-4o'" in window.source
    assert window.learn(32_000, "test") and window.tokens == 32_000
    assert not window.learn(32_000, "test")


def test_a_server_that_never_answers_the_metadata_request(logged: list) -> None:  # noqa: F811
    """Each metadata request has its deadline; the log says what happened, and the call
    goes on with the window it has."""

    class Silent:
        def request(self, *args: Any, **kwargs: Any) -> defer.Deferred:
            return defer.Deferred()  # never answers (cancellable)

    clock = Clock()
    client = OpenAIChatClient(ModelProfile(base_url="http://127.0.0.1:9", model="local"),
                              reactor=clock, agent=Silent(),
                              retry_policy=RetryPolicy(max_attempts=1))
    learned = client.learn_context_window()
    clock.advance(PROBE_TIMEOUT)
    assert learned.result == 8192
    (line,) = [formatEvent(e) for e in logged if "could not ask" in formatEvent(e)]
    assert "GET http://127.0.0.1:9/v1/models: no answer within 10s" in line


def test_ollama_s_running_list_is_read_for_this_model_only() -> None:
    """Another model loaded (or another tag of it) says nothing of this one's window."""
    running = {"models": [{"name": "qwen2.5:7b", "model": "qwen2.5:7b", "context_length": 4096}]}
    assert read_ollama_running(running, "qwen2.5:7b") == (
        4096, "Ollama GET /api/ps context_length (the loaded model's num_ctx)")
    assert read_ollama_running(running, "qwen2.5") is None  # qwen2.5:latest, not :7b
    assert read_ollama_running(running, "llama3.1") is None
    assert read_ollama_running({"models": [{"name": "llama3.1:latest",
                                            "context_length": 2048}]}, "llama3.1")[0] == 2048


def test_closing_the_client_while_it_asks_for_the_window_warns_of_nothing(
        logged: list) -> None:  # noqa: F811
    """A service stopping (a store that would not open, a shutdown) closes its clients: the
    window request that then fails is no server problem, and no warning says it is."""
    pending: list[defer.Deferred] = []

    class Held:
        def request(self, *args: Any, **kwargs: Any) -> defer.Deferred:
            d: defer.Deferred = defer.Deferred()
            pending.append(d)
            return d

    clock = Clock()
    client = OpenAIChatClient(ModelProfile(base_url="http://127.0.0.1:9", model="local"),
                              reactor=clock, agent=Held(),
                              retry_policy=RetryPolicy(max_attempts=1))
    learned = client.learn_context_window()
    client.close()
    for d in pending:
        if not d.called:
            d.errback(ConnectionLost("Connection to the other side was lost"))
    clock.advance(PROBE_TIMEOUT)
    assert learned.called
    assert not [e for e in logged if "could not ask" in formatEvent(e)]
