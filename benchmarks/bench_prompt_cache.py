"""Where the loop's status goes, on a real local server: the system prompt or after the history.

A 4-iteration fallback loop (calls forced by a response schema) against the
llama-cpp-python test server (SmolLM2-135M, one thread, a 4,096-token window)
over a history of about 1,700 tokens, once with the default placement (the
status at the end of the system prompt) and once with ``status_at_end``, the
two taking turns for ``ROUNDS`` rounds; wall time per loop, medians.  With the
status in the system prompt every request differs from the previous one at its
first message, so the server reads the whole history again at every step; with
``status_at_end`` each request begins with the previous one and the server's
prompt cache keeps it.

Needs the prepared test server (``make llama-server``, part of ``make test``).

Run: ``make bench BENCH=prompt_cache`` (or ``python -m benchmarks prompt_cache``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from twisted.internet import defer, task

from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.loop import LoopConfig, LoopContext, execute_react_loop
from ai_tools.retry import RetryPolicy
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry
from benchmarks.processes import run_in_child
from tests.integration.llama_server import require_prepared, start_servers
from tests.integration.test_llama_cpp_server import FALLBACK_LOOK, LookTool, profile

ROUNDS = 3
ITERATIONS = 4
TURNS = 12
"""Earlier turns in the history (about 140 tokens each)."""


def _history() -> ConversationHistory:
    sentence = "the harbour is grey and the gulls are loud today. " * 12
    return ConversationHistory([
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Turn {i}: {sentence}"}
        for i in range(TURNS)])


async def _loop(client: Any, reactor: Any, at_end: bool) -> float:
    ctx = LoopContext(
        assistant_name="ada", actor=Actor("char:ada"), registry=ToolRegistry([LookTool]),
        llm=client, history=_history(), clock=reactor,
        pending_events=[{"type": "say", "from": "Bob", "text": "What do you see?"}])
    started = time.perf_counter()
    result = await execute_react_loop(ctx, LoopConfig(max_iterations=ITERATIONS,
                                                      status_at_end=at_end))
    elapsed = time.perf_counter() - started
    if result.iterations != ITERATIONS:
        raise AssertionError(f"the loop ran {result.iterations} iteration(s): {result.error}")
    return elapsed


async def _bench(reactor: Any) -> None:
    servers, stop = await start_servers(require_prepared(), {"plain": (4096, [])})
    client = OpenAIChatClient(
        profile(servers["plain"], tool_calling="fallback", stream=False,
                extra_body={"temperature": 0, "max_tokens": 48,
                            "response_format": FALLBACK_LOOK}),
        reactor=reactor, retry_policy=RetryPolicy(max_attempts=1))
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for _ in range(ROUNDS):
            for at_end in (False, True):
                times[at_end].append(await _loop(client, reactor, at_end))
    finally:
        await client.close()
        await stop()
    default, at_end = statistics.median(times[False]), statistics.median(times[True])
    print(f"{ITERATIONS}-iteration loop over {TURNS} earlier turns, SmolLM2-135M on one thread, "
          f"medians of {ROUNDS} rounds in turns")
    print(f"  status in the system prompt (default): {default:6.2f} s per loop")
    print(f"  status after the history (status_at_end): {at_end:6.2f} s per loop "
          f"({default / at_end:.1f}x faster)")


def run() -> None:
    """Measure on this process's global reactor (which it runs and stops)."""
    task.react(lambda reactor: defer.ensureDeferred(_bench(reactor)))


def main() -> None:
    """Run in a child process (see :func:`benchmarks.processes.run_in_child`)."""
    run_in_child("benchmarks.bench_prompt_cache")


if __name__ == "__main__":
    run()
