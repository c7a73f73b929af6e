"""Repairing a saved history when a store loads it: the log line, and the rule's public names.

The rule itself (what an entry looks like, how a history is repaired) lives in
:mod:`ai_tools.history_format`; the stores call it on load and log here what it
changed.  The names below stay importable from this module for code written
against it.
"""

from __future__ import annotations

from twisted.logger import Logger

from ai_tools.history_format import (
    FALLBACK_RESULT_PREFIX,
    INTERRUPTED_CONTENT,
    INTERRUPTED_ERROR,
    RepairReport,
    fallback_tool_calls,
    interrupted_fallback_message,
    interrupted_tool_message,
    repair_history,
    repair_state,
    unanswered_tool_calls,
)

__all__ = [
    "FALLBACK_RESULT_PREFIX",
    "INTERRUPTED_CONTENT",
    "INTERRUPTED_ERROR",
    "RepairReport",
    "fallback_tool_calls",
    "interrupted_fallback_message",
    "interrupted_tool_message",
    "log_repair",
    "repair_history",
    "repair_state",
    "unanswered_tool_calls",
]

_log = Logger()


def log_repair(name: str, report: RepairReport) -> None:
    """Log, once per load, what repairing ``name``'s saved history changed (nothing if clean)."""
    if report.changed:
        _log.info(
            "Repaired history of {name}: {added} interrupted tool calls answered,"
            " {dropped} orphan results dropped",
            name=name,
            added=report.added,
            dropped=report.dropped,
        )

