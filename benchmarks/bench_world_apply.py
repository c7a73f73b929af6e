"""How long ``POST /world/apply`` holds the reactor: the longest stall while a large world
file is applied, with the file parsed, checked and built into objects in the reactor's
thread pool (as the service does) and, side by side in the same run, all of it on the
reactor (as before issue 22: a clock without a thread pool takes that path).

``make bench BENCH=world_apply`` (``BENCH_WORLD_ROOMS``: rooms in the generated file,
20,000 by default, the size of the field report of issue 22).  A timer asks to run
every 10 ms; the stall is the longest gap between two of its runs, minus those 10 ms.
The figures scatter with the machine's load; the ratio is what to read.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from twisted.internet import defer, task

from ai_tools.store.memory import MemoryStore
from ai_tools.world.sandbox import SandboxWorld
from benchmarks.processes import run_in_child

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "world.toml"
TICK = 0.01


def world_file(directory: Path, rooms: int) -> Path:
    """The example world and ``rooms`` more rooms in a line, each with its exits."""
    parts = [EXAMPLE.read_text(), "\n"]
    for i in range(rooms):
        parts.append(f'[[rooms]]\nid = "room:gen{i}"\nkey = "Generated room {i}"\n'
                     f'description = "A room of a large world file, number {i}."\n'
                     'tags = ["generated"]\n\n')
        if i:
            parts.append(f'[[exits]]\nkey = "next"\nfrom = "room:gen{i - 1}"\n'
                         f'to = "room:gen{i}"\nback = "back"\n\n')
    path = directory / "big-world.toml"
    path.write_text("".join(parts))
    return path


class ClockOnly:
    """The reactor's time and timers, without its thread pool (the parse runs inline)."""

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor

    def seconds(self) -> float:
        return float(self._reactor.seconds())

    def callLater(self, delay: float, f: Any, *args: Any, **kw: Any) -> Any:
        return self._reactor.callLater(delay, f, *args, **kw)


async def longest_stall(reactor: Any, clock: Any, seed: Path, big: Path) -> tuple[float, float]:
    """Apply ``big`` to a world seeded from ``seed``: (longest stall, whole apply) seconds."""
    store = MemoryStore(clock=reactor)
    world = await SandboxWorld.load(store, seed=seed, clock=clock)
    world.seed_file = big
    gaps: list[float] = []
    last = [time.perf_counter()]

    def beat() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0] - TICK)
        last[0] = now

    timer = task.LoopingCall(beat)
    timer.clock = reactor
    timer.start(TICK, now=False)
    started = time.perf_counter()
    await world.apply_seed("merge")
    took = time.perf_counter() - started
    await task.deferLater(reactor, 2 * TICK, lambda: None)
    timer.stop()
    return max(gaps, default=0.0), took


async def run(reactor: Any) -> None:
    rooms = int(os.environ.get("BENCH_WORLD_ROOMS", "20000"))
    with tempfile.TemporaryDirectory() as directory:
        big = world_file(Path(directory), rooms)
        print(f"world file: {rooms} rooms, {big.stat().st_size / 1e6:.1f} MB")
        threaded = await longest_stall(reactor, reactor, EXAMPLE, big)
        inline = await longest_stall(reactor, ClockOnly(reactor), EXAMPLE, big)
    print(f"parsed on the reactor (before): longest stall {inline[0] * 1000:7.0f} ms, "
          f"apply {inline[1]:.2f} s")
    print(f"parsed in the thread pool (now): longest stall {threaded[0] * 1000:7.0f} ms, "
          f"apply {threaded[1]:.2f} s")
    print(f"stall ratio now/before: {threaded[0] / max(inline[0], 1e-9):.2f}")


def run_here() -> None:
    """Measure and report on this process's global reactor (which it runs and stops)."""
    task.react(lambda reactor: defer.ensureDeferred(run(reactor)))


def main() -> None:
    """Run in a child process (see :func:`benchmarks.processes.run_in_child`)."""
    run_in_child("benchmarks.bench_world_apply", "run_here")


if __name__ == "__main__":
    run_here()
