"""A test run killed from outside leaves no throwaway PostgreSQL cluster behind.

The cluster's watchdog (``tests/postgres_cluster.py``) stops the server and
removes its directory once the process that started it has ended, however it
ended: here a process starts a cluster and is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.postgres_cluster import find_bindir

_STARTER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.postgres_cluster import ThrowawayCluster
cluster = ThrowawayCluster().start()
print(cluster.root, flush=True)
time.sleep(300)
"""

_DEADLINE = 60.0


def _postmaster(root: Path) -> int:
    """The server's process id, from the first line of its ``postmaster.pid``."""
    return int((root / "data" / "postmaster.pid").read_text().split("\n", 1)[0])


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:  # a zombie (ended, not yet reaped by its parent) counts as ended
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_killed_test_process_leaves_no_cluster() -> None:
    find_bindir()  # fails, never skips, without the server binaries
    repo = str(Path(__file__).resolve().parents[2])
    starter = subprocess.Popen([sys.executable, "-c", _STARTER, repo],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        root = Path(starter.stdout.readline().strip())
        assert root.name.startswith("ai_tools_pg_")
        server = _postmaster(root)
        assert _alive(server)
    finally:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(timeout=30)
    deadline = time.monotonic() + _DEADLINE
    while (root.exists() or _alive(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server), "the server outlived the process that started it"
    assert not root.exists(), "the cluster's directory was left behind"
