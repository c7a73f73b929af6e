"""Machine instructions per iteration of a benchmark side, counted by cachegrind.

CPU-time ratios scatter with the load of a shared machine; instruction counts
do not.  A benchmark module names the sides it can count in ``COUNTED``: a
function returning ``(run, iterations)``, where one ``run()`` makes
``iterations`` iterations of that side.  :func:`per_iteration` runs this module
under ``valgrind --tool=cachegrind --cache-sim=no`` twice — ``run()`` once to
warm up then 0 times, and once to warm up then ``blocks`` times (what the
warm-up left alive frozen out of the collector's way, ``gc.freeze``) — and divides
the difference of the two ``I refs`` totals by the iterations made, so the
interpreter's start-up, the imports and the warm-up cancel out.

Run one count by hand: ``python -m benchmarks.instructions loop ours 10``
under valgrind (that is what :func:`per_iteration` does).
"""

from __future__ import annotations

import gc
import importlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable

__all__ = ["Counted", "per_iteration", "report"]

Counted = Callable[[], tuple[Callable[[], None], int]]
"""Sets a side up; returns ``run`` and how many iterations one ``run()`` makes."""

_I_REFS = re.compile(rb"I\s+refs:\s+([\d,]+)")


def _count(bench: str, side: str, blocks: int) -> int:
    """Instructions of one process: warm up, then ``blocks`` runs of ``side``."""
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
               "--cachegrind-out-file=/dev/null", sys.executable, "-m",
               "benchmarks.instructions", bench, side, str(blocks)]
    env = dict(os.environ, PYTHONHASHSEED="0")  # the same dict layouts in both runs
    done = subprocess.run(command, capture_output=True, env=env, timeout=1800, check=False)
    found = _I_REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"cachegrind of {bench}/{side} failed ({done.returncode}): {tail}")
    return int(found.group(1).replace(b",", b""))


def per_iteration(bench: str, side: str, blocks: int = 10) -> float | None:
    """Instructions per iteration of ``side`` of ``benchmarks/bench_<bench>.py``.

    None when valgrind is not installed (``make bench`` installs it).
    """
    if shutil.which("valgrind") is None:
        return None
    module = importlib.import_module(f"benchmarks.bench_{bench}")
    _, iterations = module.COUNTED[side]()
    return (_count(bench, side, blocks) - _count(bench, side, 0)) / (blocks * iterations)


def report(bench: str, sides: list[tuple[str, str]], baseline: str, blocks: int = 10
           ) -> dict[str, float]:
    """Print instructions per iteration of each ``(side, label)``, and ratio to the baseline."""
    counts: dict[str, float] = {}
    for side, _ in sides:
        count = per_iteration(bench, side, blocks)
        if count is None:
            print("instructions: valgrind is missing (make bench installs it)", flush=True)
            return counts
        counts[side] = count
    base = counts[baseline]
    print(f"instructions per iteration (valgrind --tool=cachegrind --cache-sim=no, "
          f"{blocks} - 0 blocks after a warm-up):", flush=True)
    for side, label in sides:
        print(f"  {label:52s} {counts[side] / 1000:8.1f} k  {counts[side] / base:5.2f}x",
              flush=True)
    return counts


def _main(bench: str, side: str, blocks: int) -> None:
    module = importlib.import_module(f"benchmarks.bench_{bench}")
    run, _ = module.COUNTED[side]()
    run()
    # A full collection of everything imported would land in one run but not the
    # other: what was alive after the warm-up is left out of the collector's work.
    gc.collect()
    gc.freeze()
    for _ in range(blocks):
        run()


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
