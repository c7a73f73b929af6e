"""Stored loop traces in PostgreSQL (the rules and the row: :mod:`ai_tools.store.traces`)."""

from __future__ import annotations

from typing import Any

from ai_tools.store.traces import TraceFilter, TraceRow, full, summary

__all__ = ["POSTGRES_TABLE", "get_trace", "list_traces", "save_trace"]

POSTGRES_TABLE = (
    """CREATE TABLE loop_traces (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        assistant text NOT NULL,
        started_at double precision NOT NULL,
        ended_at double precision NOT NULL,
        reason text NOT NULL,
        failed boolean NOT NULL,
        tools text NOT NULL,                   -- |look|say|
        input_tokens bigint NOT NULL,
        output_tokens bigint NOT NULL,
        data text NOT NULL                     -- the trace's JSON
    )""",
    "CREATE INDEX loop_traces_by_assistant ON loop_traces (assistant, id)",
)


def save_trace(cursor: Any, row: TraceRow, keep: int) -> int:
    """Insert ``row``, keep the newest ``keep`` of its assistant; the new id."""
    cursor.execute(
        "INSERT INTO loop_traces (assistant, started_at, ended_at, reason, failed, tools,"
        " input_tokens, output_tokens, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " RETURNING id",
        (row.assistant, row.started_at, row.ended_at, row.reason, row.failed, row.tools,
         row.input_tokens, row.output_tokens, row.data))
    new_id = int(cursor.fetchone()[0])
    cursor.execute(
        "DELETE FROM loop_traces WHERE assistant = %s AND id NOT IN (SELECT id FROM"
        " loop_traces WHERE assistant = %s ORDER BY id DESC LIMIT %s)",
        (row.assistant, row.assistant, max(keep, 0)))
    return new_id


def list_traces(cursor: Any, search: TraceFilter) -> list[dict[str, Any]]:
    """The summaries of the newest traces ``search`` asks for, newest first."""
    where, params = search.where("%s")
    cursor.execute(
        "SELECT id, assistant, started_at, ended_at, reason, failed, tools, input_tokens,"
        f" output_tokens FROM loop_traces{where} ORDER BY id DESC LIMIT %s",
        (*params, search.bounded_limit))
    return [summary(int(r[0]), TraceRow(r[1], r[2], r[3], r[4], bool(r[5]), r[6], int(r[7]),
                                        int(r[8]), ""))
            for r in cursor.fetchall()]


def get_trace(cursor: Any, trace_id: int) -> dict[str, Any] | None:
    """One stored trace, whole (None: not kept)."""
    cursor.execute("SELECT id, data FROM loop_traces WHERE id = %s", (trace_id,))
    found = cursor.fetchone()
    return None if found is None else full(int(found[0]), found[1])
