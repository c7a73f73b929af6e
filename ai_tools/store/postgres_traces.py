"""The table of loop traces in PostgreSQL (the rules, the row and the statements:
:mod:`ai_tools.store.traces`)."""

from __future__ import annotations

__all__ = ["POSTGRES_TABLE"]

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
