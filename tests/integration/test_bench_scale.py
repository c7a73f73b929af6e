"""``make bench BENCH=scale`` at a tiny size, so the benchmark cannot rot: 10 assistants x
2 iterations, one round, on one worker then two (real twistd workers, a throwaway
PostgreSQL, the scripted model server; about 15 s).  The figures are not checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ("from benchmarks.bench_scale import Size, run; "
         "run(Size(assistants=10, iterations=2, rounds=1, stats_flush=0.5))")


def test_the_scale_benchmark_runs_at_a_tiny_size() -> None:
    """Both configurations run their round (every loop ends by its iteration cap) and the
    report, with the N-machine model, is printed."""
    done = subprocess.run([sys.executable, "-c", SMOKE], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("10 assistants x 2 iterations"), done.stdout
    rows = [line.split() for line in lines[1:] if line.strip()[:1].isdigit()]
    assert [row[0] for row in rows] == ["1", "2"], done.stdout
    assert any(line.startswith("model: ") for line in lines), done.stdout
