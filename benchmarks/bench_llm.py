"""Client CPU per streamed completion: OpenAIChatClient vs a bare twisted.web Agent loop.

The scripted server runs in a subprocess (``python -m ai_tools.testing``) so
that only the client side's CPU is measured in this process.  Each round sends
500 concurrent streaming requests (50 ms server latency, ~28 SSE chunks each,
2 ms apart) through our client (treq over its own pooled Agent, SSE parsing,
event assembly, the answer's bounds, an ``on_event`` callback, retry/breaker
bookkeeping, deadlines) and through a bare ``Agent`` that only reads the body
bytes, over the same server, alternating which goes first.  The collector is
emptied before every round so that no round pays for garbage left by the
previous one.  The ratio reported is the median of the per-pair ratios (ours /
the bare round next to it), which cancels the drift of a shared machine.
Target: ratio <= 1.7 (the client on treq, whose per-request wrapping the bare
loop does not pay).

``BENCH_LLM_STREAM=0`` runs the same rounds with plain (non-streamed) JSON
answers: the per-request cost of the client itself, without the chunks.

Run: ``make bench BENCH=llm``.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet import defer, protocol
from twisted.web.client import Agent, HTTPConnectionPool, ResponseDone
from twisted.web.http_headers import Headers

from ai_tools.llm.body import BytesProducer
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.events import TextDelta
from ai_tools.retry import RetryPolicy
from benchmarks.processes import ScriptedServerProcess, run_in_child

CONCURRENCY = 500
ROUNDS = 11
CHUNK_CHARS = int(os.environ.get("BENCH_LLM_CHUNK_CHARS", "10"))  # text per SSE chunk
STREAM = os.environ.get("BENCH_LLM_STREAM", "1") != "0"  # 0: plain JSON answers
TARGET_RATIO = 1.7
TEXT = (
    "The plaza lies quiet under a pale sky. A fountain murmurs at its centre, and "
    "pigeons scatter whenever the baker's door swings open. To the north, the old "
    "library; to the east, the market road. Nothing here seems to need you right now."
)
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant in a text world."},
    {"role": "user", "content": "Describe the plaza."},
]


class _Drain(protocol.Protocol):
    """The bare baseline: collect the body bytes, nothing else."""

    def __init__(self, done: defer.Deferred[int]) -> None:
        self.done = done
        self.size = 0

    def dataReceived(self, data: bytes) -> None:
        self.size += len(data)

    def connectionLost(self, reason: Any = None) -> None:
        if reason is None or reason.check(ResponseDone):
            self.done.callback(self.size)
        else:
            self.done.errback(reason)


async def _bare_one(agent: Agent, url: bytes, body: bytes) -> int:
    headers = Headers(
        {
            b"Content-Type": [b"application/json"],
            b"Accept": [b"text/event-stream"],
        }
    )
    response = await agent.request(b"POST", url, headers, BytesProducer(body))
    done: defer.Deferred[int] = defer.Deferred()
    response.deliverBody(_Drain(done))
    return await done


async def _round(kind: str, run_one: Any) -> tuple[float, float]:
    """(client CPU ms per request, wall seconds) for one round of CONCURRENCY requests."""
    gc.collect()  # every round starts from the same collector state
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = await defer.gatherResults(
        [defer.Deferred.fromCoroutine(run_one()) for _ in range(CONCURRENCY)],
        consumeErrors=True,
    )
    cpu1, wall1 = time.process_time(), time.perf_counter()
    if kind == "ours":
        assert all(r == TEXT for r in results), "our client returned a wrong text"
    else:
        assert all(r > len(TEXT) for r in results), "bare loop read a short body"
    return (cpu1 - cpu0) * 1000 / CONCURRENCY, wall1 - wall0


async def _measure(reactor: Any, url: str) -> dict[str, list[float]]:
    from ai_tools.testing import TestServer  # noqa: F401 - the server module is importable

    profile_values: dict[str, Any] = {
        "base_url": url,
        "model": "bench",
        "max_concurrency": CONCURRENCY,
        "stream": STREAM,
    }
    from ai_tools.llm.profile import ModelProfile

    ours = OpenAIChatClient(
        ModelProfile(**profile_values), reactor=reactor, retry_policy=RetryPolicy(max_attempts=1)
    )
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = CONCURRENCY
    agent = Agent(reactor, pool=pool)
    chat_url = (url + "/chat/completions").encode()
    bare_body = json.dumps(
        {"model": "bench", "messages": MESSAGES, "stream": STREAM},
        separators=(",", ":"),
    ).encode()

    async def run_ours() -> str:
        deltas = 0

        def on_event(event: Any) -> None:
            nonlocal deltas
            if type(event) is TextDelta:
                deltas += 1

        response = await ours.complete(MESSAGES, on_event=on_event)
        return response.content

    async def run_bare() -> int:
        return await _bare_one(agent, chat_url, bare_body)

    figures: dict[str, list[float]] = {"ours": [], "bare": [], "ours_wall": [], "bare_wall": []}
    try:
        # Warm-up: open the connections of both pools, import everything.
        await _round("ours", run_ours)
        await _round("bare", run_bare)
        for n in range(ROUNDS):
            order = [("ours", run_ours), ("bare", run_bare)]
            if n % 2:
                order.reverse()
            for kind, fn in order:
                cpu_ms, wall = await _round(kind, fn)
                figures[kind].append(cpu_ms)
                figures[kind + "_wall"].append(wall)
    finally:
        await ours.close()
        await pool.closeCachedConnections()
    return figures


async def _bench(reactor: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = ScriptedServerProcess(reactor, Path(tmp), {
            "text": TEXT, "latency": 0.05, "chunk_chars": CHUNK_CHARS, "chunk_latency": 0.002})
        try:
            figures = await _measure(reactor, await server.start())
        finally:
            await server.stop()
    ours = statistics.median(figures["ours"])
    bare = statistics.median(figures["bare"])
    pairs = [o / b for o, b in zip(figures["ours"], figures["bare"], strict=True)]
    ratio = statistics.median(pairs)
    if STREAM:
        shape = (
            f"streaming requests x {ROUNDS} rounds, 50 ms server latency, {CHUNK_CHARS}-character "
            f"text deltas (~{len(TEXT) // CHUNK_CHARS + 4} SSE chunks each)"
        )
    else:
        shape = f"plain (non-streamed) requests x {ROUNDS} rounds, 50 ms server latency"
    print(f"{CONCURRENCY} concurrent {shape}; server in a subprocess")
    print(f"  bare Agent loop    : {bare:.3f} ms CPU/request (median)")
    print(f"                       rounds {_fmt(figures['bare'])}")
    print(f"  OpenAIChatClient   : {ours:.3f} ms CPU/request (median)")
    print(f"                       rounds {_fmt(figures['ours'])}")
    print(
        f"  wall per round     : bare {statistics.median(figures['bare_wall']):.2f}s, "
        f"ours {statistics.median(figures['ours_wall']):.2f}s"
    )
    verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
    print(
        f"  ratio ours/bare    : {ratio:.2f}x, median of pairs {_fmt(pairs, 2)} "
        f"({verdict} the target <= {TARGET_RATIO}x)"
    )


def _fmt(values: list[float], digits: int = 3) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def run_here() -> None:
    """Run the benchmark on this process's global reactor (which it stops afterwards)."""
    from twisted.internet import reactor

    failures: list[Any] = []
    d = defer.Deferred.fromCoroutine(_bench(reactor))
    d.addErrback(failures.append)
    d.addBoth(lambda _: reactor.stop())
    reactor.run()
    if failures:
        failures[0].raiseException()


def main() -> None:
    """Run in a child process (see :func:`benchmarks.processes.run_in_child`)."""
    run_in_child("benchmarks.bench_llm", "run_here")


if __name__ == "__main__":
    run_here()
