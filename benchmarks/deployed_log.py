"""The log of a deployed service, for the benchmarks: the twistd plugin's observer chain.

A process that never begins logging keeps its events in twisted.logger's
start-up buffer, which costs a fraction of what the service pays: under
``twistd ai-assistant`` every event kept is formatted and written to the log
file.  :func:`begin` gives this process the service's own chain (the plugin's
level filter in front of twistd's text file observer, a file log like
``twistd --logfile``) at the service's default level, once per process, so
the benchmarks measure the loop as it runs where it is deployed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from twisted.logger import LogLevel, globalLogBeginner

from ai_tools.log_gate import LevelGate, arm
from ai_tools.standalone.config import ServiceSettings
from ai_tools.standalone.plugin import service_log_observer

__all__ = ["begin", "log_file"]

_begun: list[str] = []
_files: list[str] = []


def begin(level: str | None = None) -> str:
    """Log from now on as the service does (its default level unless ``level``); the level."""
    if _begun:
        return _begun[0]
    level = level or os.environ.get("AI_TOOLS_BENCH_LOG_LEVEL") or ServiceSettings().log_level
    folder = tempfile.mkdtemp(prefix="ai-tools-bench-log-")
    atexit.register(shutil.rmtree, folder, True)
    gate = LevelGate(LogLevel.levelWithName(level))
    path = os.path.join(folder, "twistd.log")
    observer = service_log_observer(level, {"logfile": path}, gate)
    globalLogBeginner.beginLoggingTo([observer], discardBuffer=True, redirectStandardIO=False)
    arm(gate)  # as the twistd plugin does once its observer is the process's log
    _begun.append(level)
    _files.append(path)
    return level


def log_file() -> str | None:
    """The log file this process writes since :func:`begin` (None before)."""
    return _files[0] if _files else None
