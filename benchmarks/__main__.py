"""Run the benchmarks: ``python -m benchmarks [name ...]`` (``make bench BENCH=validation``).

Each ``benchmarks/bench_<name>.py`` exposes ``main() -> None`` that prints its
figures: our code and its bare baseline measured side by side in the same run,
and the ratio against the target.  Benchmarks never fail on a timing.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(
        m.name[len("bench_"):] for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_")
    )
    wanted = argv or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}")
        return 2
    for name in wanted:
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        module = importlib.import_module(f"benchmarks.bench_{name}")
        module.main()
        print(f"({name}: {time.perf_counter() - started:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
