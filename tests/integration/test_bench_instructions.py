"""The benchmarks' instruction counts and their deployed log, so they cannot rot.

``make bench`` prints instructions per iteration counted by cachegrind
(``benchmarks/instructions.py``) next to its CPU ratios, with the process
logging through the service's own chain (``benchmarks/deployed_log.py``).
Here: one real count of the bare loop (two valgrind runs, about half a
minute), the service's log chain as the benchmarks install it, and the
service benchmark's report of loops that ended early.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_count_is_instructions_per_iteration() -> None:
    """The bare loop's count is of the order the docs give (141 k per iteration)."""
    if shutil.which("valgrind") is None:
        pytest.fail("valgrind is missing: `make bench` installs it (apt-get install valgrind)")
    from benchmarks.instructions import per_iteration

    count = per_iteration("loop", "bare", blocks=2)
    assert count is not None and 50_000 < count < 400_000, count


def test_the_benchmarks_log_as_the_service_does(tmp_path: Path) -> None:
    """In a fresh process: the gate is armed at the service's default level, a debug event
    is not built, the loop's info line reaches the log file as twistd would write it."""
    script = (
        "from benchmarks import deployed_log\n"
        "from ai_tools import log_gate\n"
        "from twisted.logger import LogLevel\n"
        "level = deployed_log.begin()\n"
        "gate = log_gate.armed()\n"
        "assert level == 'info' and gate is not None\n"
        "assert not gate.keeps(LogLevel.debug, 'ai_tools.execution.engine')\n"
        "from ai_tools.loop.run import log\n"
        "log.info('ReAct loop of {assistant} ended', assistant='pip')\n"
        "log.debug('never {x}', x=1)\n"
        "text = open(deployed_log.log_file()).read()\n"
        "print('[ai_tools.loop.run#info] ReAct loop of pip ended' in text\n"
        "      and 'never' not in text)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True", done.stdout + done.stderr


def test_the_service_benchmark_says_why_loops_ended_early(
        capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.bench_service import _report_early_ends

    _report_early_ends("direct loop", 1000, [])
    assert capsys.readouterr().out == ""
    _report_early_ends("direct loop", 1000, ["llm_error after 2 iteration(s): HTTP 503"] * 3
                       + ["critical_tokens after 4 iteration(s): full"])
    out = capsys.readouterr().out
    assert "4 of 1000 loops ended before iteration 5" in out
    assert "3 x llm_error after 2 iteration(s): HTTP 503" in out
    assert "1 x critical_tokens" in out


def test_the_hearing_count_answers_every_message_with_its_own_tick() -> None:
    """``benchmarks/hearing_instructions.py`` (docs/service.md) counts what it says: each
    heard message is queued, wakes its assistant and is answered by a tick of its own."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.hearing_instructions", "1"],
                          cwd=ROOT, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
