"""The model client and the ReAct loop against a real llama.cpp server.

The servers are llama-cpp-python's OpenAI-compatible server (built portable
and installed in ``.venv-llama`` by ``make llama-server``, part of
``make test``) with SmolLM2-135M-Instruct, a model small enough to answer in a
fraction of a second on one core.  They run as child processes on 127.0.0.1:

* ``native``: ``--chat_format chatml-function-calling``, the server's native
  tool calling (OpenAI ``tools``/``tool_calls``);
* ``plain``: the model's own chat template, no tool calling: the fallback mode,
  where the loop describes the tools in the prompt and parses JSON calls;
* ``tiny``: a 256-token window, where an unbounded reply ends in seconds.

Greedy decoding (temperature 0), a bounded ``max_tokens`` and, where a test
needs a tool call, a forced choice (``tool_choice`` naming the tool, or a JSON
schema for the fallback answer) make each answer deterministic.  The tests
check the protocol, not the model's judgement: a 135M model chooses tools
badly.  Keep-alives come every 50 ms instead of every 15 s (see
``scripts/llama/serve.py``), so every streamed answer here carries some.

Tests marked ``xfail(strict=True)`` describe the right behaviour where the
client has a known defect (issue 14 §1); each reason names the defect.  When
the fix lands the test passes, strict mode turns that into a failure, and the
mark must be removed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
import treq
from twisted.logger import formatEvent, globalLogPublisher
from twisted.web.client import Agent, HTTPConnectionPool

from ai_tools.errors import LLMEmptyAnswer, LLMRequestError
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.reasons import TerminationReason
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.events import AssistantMessageFinal, StreamDone, TextDelta
from ai_tools.llm.parsing import parse_tool_calls
from ai_tools.llm.profile import ModelProfile, Timeouts
from ai_tools.loop import LoopConfig, LoopContext, LoopResult, execute_react_loop
from ai_tools.retry import RetryPolicy
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from tests.integration.llama_server import (
    MODEL_ALIAS,
    LlamaServer,
    reactor,
    require_prepared,
    start_servers,
)
from tests.unit.react_fakes import check_history_valid

ONE_TRY = RetryPolicy(max_attempts=1)
END_OF_TURN = {"0": -100, "2": -100}
"""``logit_bias`` that bans SmolLM2's end tokens (<|endoftext|>, <|im_end|>): the
answer then runs to ``max_tokens``, so its length is known."""
BODY_LIMIT = 1 << 20

LOOK_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"detail": {"type": "string", "enum": ["brief", "full"]}},
    "required": ["detail"],
}
"""One enum argument: a forced call is a few tokens long, and always complete."""
LOOK = {"type": "function", "function": {"name": "look", "description": "Look around the room.",
                                         "parameters": LOOK_PARAMETERS}}
FORCE_LOOK = {"type": "function", "function": {"name": "look"}}
FALLBACK_LOOK = {
    "type": "json_object",
    "schema": {
        "type": "object",
        "properties": {
            "tool": {"type": "string", "enum": ["look"]},
            "arguments": LOOK_PARAMETERS,
        },
        "required": ["tool", "arguments"],
    },
}
"""A ``response_format`` that makes the fallback answer a JSON call of ``look``."""


def known_client_defect(reason: str) -> pytest.MarkDecorator:
    """Mark a test of the right behaviour that fails today only because of ``reason``,
    a known defect of the client: an expected failure (an assertion, not a crash)
    until the fix lands, then, being strict, a failure until the mark is removed."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


class LookTool(Tool):
    """Looks around: the only tool of the loop tests (its argument is an enum, so short)."""

    name = "look"
    description = "Look around the room."
    parameters = LOOK_PARAMETERS

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True, "seen": "a quiet plaza", "detail": params["detail"]}


@pytest.fixture(scope="module")
def prepared() -> tuple[Path, Path]:
    """The server's Python and the model (skips or fails the module when missing)."""
    return require_prepared()


@pytest_twisted.async_yield_fixture(scope="module")
async def servers(prepared: tuple[Path, Path]) -> AsyncIterator[dict[str, LlamaServer]]:
    """The three servers, started together once for this module."""
    started, stop = await start_servers(prepared, {
        "native": (2048, ["--chat_format", "chatml-function-calling"]),
        "plain": (2048, []),
        "tiny": (256, []),
    })
    yield started
    await stop()


def profile(server: LlamaServer, **overrides: Any) -> ModelProfile:
    """A profile for ``server``: greedy, 32 tokens at most, its window, generous timeouts."""
    values: dict[str, Any] = {
        "base_url": server.url,
        "model": MODEL_ALIAS,
        "context_window": server.n_ctx,
        "extra_body": {"temperature": 0, "max_tokens": 32},
        "timeouts": Timeouts(connect=10, headers=120, idle=60, total=180),
        "breaker_threshold": 1000,
    }
    values.update(overrides)
    return ModelProfile.from_mapping(values)


@pytest_twisted.async_yield_fixture
async def clients() -> AsyncIterator[Any]:
    """Makes clients (one attempt per request unless told); closes them at the end."""
    made: list[OpenAIChatClient] = []

    def make(server: LlamaServer, retry_policy: RetryPolicy = ONE_TRY,
             **overrides: Any) -> OpenAIChatClient:
        client = OpenAIChatClient(profile(server, **overrides), reactor=reactor(),
                                  retry_policy=retry_policy)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def raw(method: str, url: str, data: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """One request through a bare treq client: what the server sends, unparsed
    (at most BODY_LIMIT bytes)."""
    pool = HTTPConnectionPool(reactor(), persistent=False)
    http = treq.client.HTTPClient(cast(Any, Agent(reactor(), pool=pool)))
    body_bytes = bytearray()

    def keep(data: bytes) -> None:
        body_bytes.extend(data)
        if len(body_bytes) > BODY_LIMIT:
            raise ValueError(f"{url} sent more than {BODY_LIMIT} bytes")

    try:
        response = await http.request(method, url, json=data)
        await treq.collect(response, keep)
        return response.code, bytes(body_bytes)
    finally:
        await pool.closeCachedConnections()


async def raw_stream(server: LlamaServer, body: dict[str, Any]) -> bytes:
    """POST ``body`` with ``stream: true`` (no client in between); the whole SSE body."""
    status, data = await raw("POST", server.url + "/chat/completions",
                             {**body, "model": MODEL_ALIAS, "stream": True})
    assert status == 200
    return data


def chats(server: LlamaServer, before: int = 0) -> list[tuple[str, str, int]]:
    """The chat requests of the server's access log from the ``before``-th request on
    (the client's metadata requests for the window left out)."""
    return [r for r in server.requests()[before:] if r[1] == "/v1/chat/completions"]


def sse_chunks(data: bytes) -> tuple[list[dict[str, Any]], int, bool]:
    """The JSON chunks of an SSE body, its number of keep-alive comments, and [DONE]."""
    chunks: list[dict[str, Any]] = []
    pings = 0
    done = False
    for line in data.decode("utf-8").splitlines():
        if line.startswith(":"):
            pings += 1
        elif line.startswith("data:"):
            payload = line[5:].strip()
            if payload == "[DONE]":
                done = True
            else:
                chunks.append(json.loads(payload))
    return chunks, pings, done


def loop_context(client: Any, said: str = "What do you see?") -> LoopContext:
    """A loop for Ada, who has the look tool, after Bob ``said`` something."""
    return LoopContext(
        assistant_name="ada", actor=Actor("char:ada"), registry=ToolRegistry([LookTool]),
        llm=client, history=ConversationHistory(), clock=reactor(),
        pending_events=[{"type": "say", "from": "Bob", "text": said}])


async def run_loop(ctx: LoopContext, **config: Any) -> LoopResult:
    result = await execute_react_loop(ctx, LoopConfig(**config))
    check_history_valid(ctx.history.messages)
    return result


# -- plain and streamed answers --------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_plain_answer(servers: dict[str, LlamaServer], clients: Any) -> None:
    """A whole answer: text, a finish reason, token usage and the served model's name."""
    response = await clients(servers["plain"]).complete(
        [{"role": "user", "content": "Say hello."}], stream=False)
    assert response.content.strip()
    assert response.finish_reason in ("stop", "length")
    assert response.tool_calls == ()
    usage = response.usage or {}
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 32
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert response.model == MODEL_ALIAS


@pytest_twisted.ensureDeferred
async def test_streamed_answer_with_keepalives(servers: dict[str, LlamaServer],
                                               clients: Any) -> None:
    """A streamed answer interleaved with keep-alive comments arrives whole and in order.

    The same request through a bare HTTP client shows what the server sent (the
    keep-alives among the chunks); the client must deliver exactly the text of
    the data chunks, as deltas, then the final message and StreamDone.
    """
    server = servers["plain"]
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    body = {"messages": messages, "temperature": 0, "max_tokens": 48, "logit_bias": END_OF_TURN}
    chunks, pings, done = sse_chunks(await raw_stream(server, body))
    sent = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert pings >= 1, "the server sent no keep-alive: the test would prove nothing"
    assert done and sent

    events: list[Any] = []
    response = await clients(server, extra_body={"temperature": 0, "max_tokens": 48,
                                                 "logit_bias": END_OF_TURN}).complete(
        messages, stream=True, on_event=events.append)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1
    assert "".join(deltas) == response.content == sent
    assert isinstance(events[-2], AssistantMessageFinal)
    assert isinstance(events[-1], StreamDone)
    assert response.finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest_twisted.ensureDeferred
async def test_finish_reason_length(servers: dict[str, LlamaServer], clients: Any,
                                    stream: bool) -> None:
    """An answer cut by ``max_tokens`` reports ``length`` (and, whole, its 4 tokens)."""
    client = clients(servers["plain"], extra_body={"temperature": 0, "max_tokens": 4,
                                                   "logit_bias": END_OF_TURN})
    response = await client.complete([{"role": "user", "content": "Describe a forest."}],
                                     stream=stream)
    assert response.finish_reason == "length"
    assert response.content
    if not stream:
        assert (response.usage or {})["completion_tokens"] == 4


# -- native tool calls -------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest_twisted.ensureDeferred
async def test_native_tool_call(servers: dict[str, LlamaServer], clients: Any,
                                stream: bool) -> None:
    """A tool call (the choice forced by naming the tool) comes back as ``tool_calls``.

    Streamed, the server sends the arguments in pieces (checked on the raw
    stream); the client assembles them into the same call.
    """
    server = servers["native"]
    messages = [{"role": "system", "content": "You act only through tools."},
                {"role": "user", "content": "Look around the room."}]
    events: list[Any] = []
    response = await clients(server).complete(messages, tools=[LOOK], tool_choice="look",
                                              stream=stream, on_event=events.append)
    assert response.finish_reason == "tool_calls"
    (call,) = response.tool_calls
    assert call.name == "look"
    assert call.arguments_error is None
    assert call.arguments["detail"] in ("brief", "full")
    assert call.id
    parsed = parse_tool_calls(response, ["look"])
    assert parsed.ok and parsed.mode == "native"
    assert [c.name for c in parsed.normal] == ["look"]
    final = [e for e in events if isinstance(e, AssistantMessageFinal)]
    assert final and final[0].message["tool_calls"][0]["function"]["name"] == "look"
    if stream:
        chunks, _, done = sse_chunks(await raw_stream(server, {
            "messages": messages, "tools": [LOOK], "tool_choice": FORCE_LOOK,
            "temperature": 0, "max_tokens": 32}))
        pieces = [tc["function"]["arguments"] for c in chunks
                  for tc in c["choices"][0]["delta"].get("tool_calls") or ()]
        assert done and len(pieces) > 1, "the arguments did not come in pieces"
        assert "".join(pieces) == call.raw_arguments


@pytest_twisted.ensureDeferred
async def test_auto_tool_choice_keeps_the_tools(servers: dict[str, LlamaServer],
                                                clients: Any) -> None:
    """With ``tool_choice: "auto"`` the server puts the tools in the prompt (``"none"``
    is the baseline without them); for this prompt the model calls the tool."""
    client = clients(servers["native"])
    messages = [{"role": "system", "content": "You act through tools."},
                {"role": "user", "content": "Look at the sky."}]
    without = await client.complete(messages, tools=[LOOK], tool_choice="none", stream=False)
    auto = await client.complete(messages, tools=[LOOK], tool_choice="auto", stream=False)
    assert (auto.usage or {})["prompt_tokens"] >= (without.usage or {})["prompt_tokens"] + 50
    assert auto.finish_reason == "tool_calls"
    assert [c.name for c in auto.tool_calls] == ["look"] * len(auto.tool_calls) != []
    assert all(c.arguments_error is None for c in auto.tool_calls)


@pytest_twisted.ensureDeferred
async def test_auto_tool_choice_text_answer_is_empty(servers: dict[str, LlamaServer],
                                                     clients: Any) -> None:
    """A limitation of this server, which docs/models.md warns about: when the model
    chooses to answer in text under ``tool_choice: "auto"``, the server constrains
    the text by its grammar for further calls, and the answer comes back empty.
    The client says so (an empty answer, finish_reason stop), never takes it for an
    answer.  If this fails, the server was fixed: update the docs."""
    server = servers["native"]
    messages = [{"role": "system", "content": "You are a guide in a small town."},
                {"role": "user", "content": "Say hi to Bob."}]
    status, data = await raw("POST", server.url + "/chat/completions", {
        "model": MODEL_ALIAS, "messages": messages, "tools": [LOOK], "tool_choice": "auto",
        "temperature": 0, "max_tokens": 32})
    message = json.loads(data)["choices"][0]["message"]
    assert status == 200 and not message.get("tool_calls") and not message.get("content")
    with pytest.raises(LLMEmptyAnswer, match=r"empty answer.*finish_reason 'stop'"):
        await clients(server).complete(messages, tools=[LOOK], stream=False)


@pytest_twisted.ensureDeferred
async def test_streamed_auto_tool_call_is_asked_again_whole(
        servers: dict[str, LlamaServer], clients: Any) -> None:
    """llama-cpp-python cannot stream a call the model chose itself (``tool_choice:
    "auto"``, the profile's default): it answers 200 and ends the stream at once,
    without ``[DONE]`` (checked on the raw stream).

    The client knows this server by its ``/v1/models`` and never streams a request
    offering tools to it (no prompt evaluated for a refusal).  A client that does not
    ask (``discover_window = false``) learns it at the first refusal: it asks again for
    the whole answer at once, and from then on for whole answers whenever tools are
    offered.  The prompt is one for which the model (greedy) picks the tool.
    """
    server = servers["native"]
    messages = [{"role": "system", "content": "You act through tools."},
                {"role": "user", "content": "Look at the sky."}]
    chunks, _, done = sse_chunks(await raw_stream(server, {
        "messages": messages, "tools": [LOOK], "tool_choice": "auto", "temperature": 0,
        "max_tokens": 32}))
    assert chunks == [] and not done
    knowing = clients(server)
    before = len(server.requests())
    response = await knowing.complete(messages, tools=[LOOK], stream=True)
    assert [c.name for c in response.tool_calls] == ["look"] and response.attempts == 1
    assert chats(server, before) == [("POST", "/v1/chat/completions", 200)]
    client = clients(server, discover_window=False)
    before = len(server.requests())
    response = await client.complete(messages, tools=[LOOK], stream=True)
    assert [c.name for c in response.tool_calls] == ["look"] and response.attempts == 2
    again = await client.complete(messages, tools=[LOOK], stream=True)
    assert again.attempts == 1 and again.tool_calls
    assert chats(server, before) == [("POST", "/v1/chat/completions", 200)] * 3


@pytest_twisted.ensureDeferred
async def test_chatml_function_calling_hides_tool_results(servers: dict[str, LlamaServer],
                                                          clients: Any) -> None:
    """A limitation of this server, which docs/models.md warns about: with
    ``--chat_format chatml-function-calling`` the prompt leaves out the content
    of ``tool`` messages, so the model never sees a tool's result (a long result
    costs no prompt token).  If this fails, the server was fixed: update the docs.
    """
    client = clients(servers["native"], extra_body={"temperature": 0, "max_tokens": 1})
    call = {"id": "c1", "type": "function",
            "function": {"name": "look", "arguments": '{"detail": "brief"}'}}
    prompt_tokens = []
    for result in ("ok", "a long and detailed description of the plaza " * 40):
        response = await client.complete(
            [{"role": "system", "content": "You act only through tools."},
             {"role": "user", "content": "Look around the room."},
             {"role": "assistant", "content": "", "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "c1", "content": result}],
            tools=[LOOK], tool_choice="look", stream=False)
        prompt_tokens.append((response.usage or {})["prompt_tokens"])
    assert prompt_tokens[0] == prompt_tokens[1]


# -- the context window --------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_models_endpoint_reports_no_window(servers: dict[str, LlamaServer]) -> None:
    """What window discovery finds on this server: ``/v1/models`` names the model and
    says nothing of its window, and there is no ``/props`` (llama.cpp's own server's)."""
    server = servers["plain"]
    status, data = await raw("GET", server.url + "/models")
    assert status == 200
    listing = json.loads(data)
    assert [m["id"] for m in listing["data"]] == [MODEL_ALIAS]
    assert set(listing["data"][0]) == {"id", "object", "owned_by", "permissions"}
    status, _ = await raw("GET", server.root + "/props")
    assert status == 404


@pytest_twisted.ensureDeferred
async def test_window_overflow_is_a_clear_request_error(servers: dict[str, LlamaServer],
                                                        clients: Any) -> None:
    """A prompt longer than the server's window: a 400 naming the window, not retried."""
    server = servers["plain"]
    client = clients(server, retry_policy=RetryPolicy(max_attempts=3, base_delay=0))
    before = len(server.requests())
    with pytest.raises(LLMRequestError, match="maximum context length is 2048 tokens") as caught:
        await client.complete([{"role": "user", "content": "word " * 2100}], stream=False)
    assert caught.value.status == 400
    assert chats(server, before) == [("POST", "/v1/chat/completions", 400)]


@pytest_twisted.ensureDeferred
async def test_window_is_asked_of_the_server_and_logged(servers: dict[str, LlamaServer],
                                                        clients: Any) -> None:
    """A model name ai_tools does not know and no configured window: the client asks
    the server, and logs the window it uses and where it came from (this server
    reports none, so the default)."""
    server = servers["plain"]
    client = clients(server, context_window=None)
    logged: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        text = formatEvent(event)
        if "window" in text.lower():
            logged.append(text)

    globalLogPublisher.addObserver(cast(Any, observe))
    try:
        result = await run_loop(loop_context(client), max_iterations=1)
    finally:
        globalLogPublisher.removeObserver(cast(Any, observe))
    assert result.usage["requests"] == 1
    asked = [path for method, path, _ in server.requests() if method == "GET"]
    assert "/v1/models" in asked and "/props" in asked
    assert client.context_window == 8192
    (line,) = [text for text in logged if "context window" in text]
    assert "8192 tokens" in line and "does not know ('local')" in line


@pytest_twisted.ensureDeferred
async def test_window_is_learned_from_the_overflow_error(servers: dict[str, LlamaServer],
                                                         clients: Any) -> None:
    """This server names its window only in the 400 of a prompt too long for it: the
    client takes the window from there (and uses it from then on)."""
    server = servers["plain"]
    client = clients(server, context_window=None)
    with pytest.raises(LLMRequestError, match="maximum context length is 2048 tokens"):
        await client.complete([{"role": "user", "content": "word " * 2100}], stream=False)
    assert client.context_window == 2048
    assert "context-overflow error" in client.context_window_source


# -- the ReAct loop ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest_twisted.ensureDeferred
async def test_native_loop_with_tool_results_in_history(servers: dict[str, LlamaServer],
                                                        clients: Any, stream: bool) -> None:
    """Two native steps: the second request carries the first call and its result."""
    server = servers["native"]
    client = clients(server, stream=stream,
                     extra_body={"temperature": 0, "max_tokens": 32, "tool_choice": FORCE_LOOK})
    ctx = loop_context(client)
    before = len(server.requests())
    result = await run_loop(ctx, max_iterations=2)
    assert result.error is None
    assert result.termination_reason == TerminationReason.MAX_ITERATIONS
    assert [r["tool"] for r in result.results] == ["look"] * 2
    assert all(r["success"] for r in result.results)
    assert chats(server, before) == [("POST", "/v1/chat/completions", 200)] * 2
    roles = [m["role"] for m in ctx.history.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]


@pytest_twisted.ensureDeferred
async def test_the_status_after_the_history_is_accepted(servers: dict[str, LlamaServer],
                                                        clients: Any) -> None:
    """``status_at_end``: a system message after the tool results is taken by the
    server's chat template, native and fallback (the requests' shape, each one the
    previous one plus the new exchange, is checked by the loop's unit tests)."""
    cases = (("native", {"tool_choice": FORCE_LOOK}, {}),
             ("plain", {"response_format": FALLBACK_LOOK}, {"tool_calling": "fallback"}))
    for name, extra, profile in cases:
        server = servers[name]
        client = clients(server, stream=False, **profile,
                         extra_body={"temperature": 0, "max_tokens": 48, **extra})
        before = len(server.requests())
        result = await run_loop(loop_context(client), max_iterations=2, status_at_end=True)
        assert result.error is None, (name, result.error)
        assert [r["tool"] for r in result.results] == ["look"] * 2, name
        assert chats(server, before) == [("POST", "/v1/chat/completions", 200)] * 2, name
        assert result.usage["prompt_tokens"] > 0, name


@pytest_twisted.ensureDeferred
async def test_loop_offers_its_tools(servers: dict[str, LlamaServer], clients: Any) -> None:
    """The loop's request makes the server put the tools in the prompt: its prompt
    is longer than the same request with ``tool_choice: "none"`` by the tools' text."""
    server = servers["native"]
    used = []
    for extra in ({"tool_choice": "none"}, {}):
        client = clients(server, stream=False,
                         extra_body={"temperature": 0, "max_tokens": 32, **extra})
        result = await run_loop(loop_context(client, "Look at the sky."), max_iterations=1)
        assert result.usage["requests"] == 1, result.error
        used.append(result.usage["prompt_tokens"])
    without_tools, offered = used
    assert offered >= without_tools + 50


@pytest_twisted.ensureDeferred
async def test_fallback_loop_with_tool_results_in_history(servers: dict[str, LlamaServer],
                                                          clients: Any) -> None:
    """Two streamed fallback steps on a server without tool calling: the calls are
    JSON text (forced by a response schema), the results ``[TOOL RESULT: look]``
    messages.  (Whole answers take the same path in the loop as streamed ones.)"""
    server = servers["plain"]
    client = clients(server, stream=True, tool_calling="fallback",
                     extra_body={"temperature": 0, "max_tokens": 48,
                                 "response_format": FALLBACK_LOOK})
    ctx = loop_context(client)
    before = len(server.requests())
    result = await run_loop(ctx, max_iterations=2)
    assert result.error is None
    assert result.termination_reason == TerminationReason.MAX_ITERATIONS
    assert [r["tool"] for r in result.results] == ["look"] * 2
    assert all(r["success"] for r in result.results)
    assert chats(server, before) == [("POST", "/v1/chat/completions", 200)] * 2
    messages = ctx.history.messages
    assert [m["role"] for m in messages] == ["user"] + ["assistant", "user"] * 2
    assert all("tool_calls" not in m for m in messages)
    assert all(m["content"].startswith("[TOOL RESULT: look]") for m in messages[2::2])


@pytest_twisted.ensureDeferred
async def test_reply_is_bounded_without_max_tokens(servers: dict[str, LlamaServer],
                                                   clients: Any) -> None:
    """A profile without ``max_tokens`` (as the environment builds one) still bounds a
    reply: a model that never stops is cut at most at half the window."""
    server = servers["tiny"]
    client = clients(server, extra_body={"temperature": 0, "logit_bias": END_OF_TURN})
    response = await client.complete([{"role": "user", "content": "Tell me a story."}],
                                     stream=False)
    assert response.finish_reason == "length"
    assert (response.usage or {})["completion_tokens"] <= server.n_ctx // 2

