"""Stored loop traces: what a store keeps of each loop's waterfall, and how it is searched.

A loop trace (built by :class:`~ai_tools.web.traces.TraceRecorder`) is a JSON object:
the assistant, when the loop started and ended, its termination reason, token totals,
the tools it called, and its spans (model requests and tool calls with their offsets
and durations).  Each store keeps the newest ``keep`` traces per assistant in a table
(``loop_traces``) with the fields a search filters on beside the JSON, each trace at
most :data:`TRACE_BYTES` (spans past that are dropped, the trace marked ``truncated``).

The row, the filter, the statements both SQL stores run (through their
:class:`~ai_tools.store.dialect.SQLDialect`) and the in-memory store's list are here;
the tables are SQLite's (here) and PostgreSQL's (:mod:`ai_tools.store.postgres_traces`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import attrs

from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.store.dbapi import DBCursor
from ai_tools.store.dialect import SQLDialect

__all__ = ["TRACE_BYTES", "MemoryTraces", "TraceFilter", "TraceRow", "get_trace", "list_traces",
           "save_trace", "trace_row"]

TRACE_BYTES = 64 * 1024
"""Largest stored trace (its JSON, in bytes)."""
MAX_LIST = 200
"""Most traces one search answers with."""
SUMMARY_FIELDS = ("id", "assistant", "started_at", "ended_at", "reason", "failed", "tools",
                  "input_tokens", "output_tokens")


@attrs.frozen
class TraceRow:
    """One trace as stored: the searched fields and the JSON."""

    assistant: str
    started_at: float
    ended_at: float
    reason: str
    failed: bool
    tools: str
    """The tools called, as ``|look|say|`` (a search for ``|look|`` finds it)."""
    input_tokens: int
    output_tokens: int
    data: str


@attrs.frozen
class TraceFilter:
    """What a search asks for (None: any); the newest ``limit`` match, newest first."""

    assistant: str | None = None
    reason: str | None = None
    tool: str | None = None
    failed: bool | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 50

    def where(self, dialect: SQLDialect) -> tuple[str, list[object]]:
        """The WHERE clause (``?`` placeholders, ``dialect``'s functions) and its parameters."""
        clauses: list[str] = []
        params: list[object] = []
        for column, op, value in (("assistant", "=", self.assistant),
                                  ("reason", "=", self.reason),
                                  ("failed", "=", self.failed),
                                  ("ended_at", ">=", self.since),
                                  ("started_at", "<=", self.until)):
            if value is not None:
                clauses.append(f"{column} {op} ?")
                params.append(value)
        if self.tool is not None:
            clauses.append(f"{dialect.contains}(tools, ?) > 0")
            params.append(f"|{self.tool}|")
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def matches(self, row: TraceRow) -> bool:
        """Whether ``row`` is one this filter asks for (the in-memory store's search)."""
        return ((self.assistant is None or row.assistant == self.assistant)
                and (self.reason is None or row.reason == self.reason)
                and (self.failed is None or row.failed == self.failed)
                and (self.since is None or row.ended_at >= self.since)
                and (self.until is None or row.started_at <= self.until)
                and (self.tool is None or f"|{self.tool}|" in row.tools))

    @property
    def bounded_limit(self) -> int:
        return max(0, min(self.limit, MAX_LIST))


def trace_row(trace: JSONMapping) -> TraceRow:
    """The stored row of ``trace`` (its JSON within :data:`TRACE_BYTES`)."""
    data = dict(trace)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    spans = _items(data.get("spans"), "spans")
    while len(text.encode("utf-8")) > TRACE_BYTES and spans:
        del spans[len(spans) // 2:]  # halve until it fits; the first spans stay
        data["spans"], data["truncated"] = spans, True
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if len(text.encode("utf-8")) > TRACE_BYTES:
        raise ValueError(f"a loop trace without spans is over {TRACE_BYTES} bytes")
    tools = sorted({str(t) for t in _items(data.get("tools"), "tools")})
    return TraceRow(
        assistant=str(data["assistant"]), started_at=_number(data["started_at"]),
        ended_at=_number(data["ended_at"]), reason=str(data.get("reason") or ""),
        failed=bool(data.get("failed")), tools="|" + "|".join(tools) + "|" if tools else "",
        input_tokens=_count(data.get("input_tokens") or 0),
        output_tokens=_count(data.get("output_tokens") or 0), data=text)


def _number(value: object) -> float:
    """``float(value)`` for what can be one (a number or its text); else TypeError."""
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError(f"a loop trace's times are numbers, not {value!r}")


def _count(value: object) -> int:
    """``int(value)`` for what can be one (a number or its text); else TypeError."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"a loop trace's token counts are numbers, not {value!r}")


def _items(value: object, what: str) -> list[object]:
    """The items of a list field of a trace (None: none); TypeError if it is not a list."""
    if not value:
        return []
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping):
        return list(value)
    raise TypeError(f"a loop trace's {what} must be a list, not {type(value).__name__}")


def summary(row_id: int, row: TraceRow) -> JSONObject:
    """What a search answers for one trace (no spans)."""
    return {"id": row_id, "assistant": row.assistant, "started_at": row.started_at,
            "ended_at": row.ended_at, "reason": row.reason, "failed": row.failed,
            "tools": [t for t in row.tools.split("|") if t],
            "input_tokens": row.input_tokens, "output_tokens": row.output_tokens}


def full(row_id: int, data: str) -> JSONObject:
    """A stored trace, whole."""
    trace: JSONObject = json.loads(data)
    trace["id"] = row_id
    return trace


# -- SQLite ----------------------------------------------------------------------------------

SQLITE_TABLE = (
    """CREATE TABLE loop_traces (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        assistant TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL NOT NULL,
        reason TEXT NOT NULL,
        failed INTEGER NOT NULL,
        tools TEXT NOT NULL,              -- |look|say|
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        data TEXT NOT NULL                -- the trace's JSON
    )""",
    "CREATE INDEX loop_traces_by_assistant ON loop_traces (assistant, id)",
)


_INSERT = (
    "INSERT INTO loop_traces (assistant, started_at, ended_at, reason, failed, tools,"
    " input_tokens, output_tokens, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_KEEP_NEWEST = (
    "DELETE FROM loop_traces WHERE assistant = ? AND id NOT IN (SELECT id FROM loop_traces"
    " WHERE assistant = ? ORDER BY id DESC LIMIT ?)"
)


def save_trace(cursor: DBCursor, dialect: SQLDialect, row: TraceRow, keep: int) -> int:
    """Insert ``row``, keep the newest ``keep`` of its assistant; the new id."""
    new_id = dialect.insert_id(cursor, _INSERT, (
        row.assistant, row.started_at, row.ended_at, row.reason, row.failed, row.tools,
        row.input_tokens, row.output_tokens, row.data))
    cursor.execute(dialect.sql(_KEEP_NEWEST), (row.assistant, row.assistant, max(keep, 0)))
    return new_id


def list_traces(cursor: DBCursor, dialect: SQLDialect, search: TraceFilter) -> list[JSONObject]:
    """The summaries of the newest traces ``search`` asks for, newest first."""
    where, params = search.where(dialect)
    cursor.execute(dialect.sql(
        "SELECT id, assistant, started_at, ended_at, reason, failed, tools, input_tokens,"
        f" output_tokens FROM loop_traces{where} ORDER BY id DESC LIMIT ?"),
        (*params, search.bounded_limit))
    return [summary(int(r[0]), TraceRow(r[1], r[2], r[3], r[4], bool(r[5]), r[6], int(r[7]),
                                        int(r[8]), ""))
            for r in cursor.fetchall()]


def get_trace(cursor: DBCursor, dialect: SQLDialect, trace_id: int) -> JSONObject | None:
    """One stored trace, whole (None: not kept)."""
    cursor.execute(dialect.sql("SELECT id, data FROM loop_traces WHERE id = ?"), (trace_id,))
    found = cursor.fetchone()
    return None if found is None else full(int(found[0]), found[1])


# -- in memory -------------------------------------------------------------------------------


@attrs.define(eq=False)
class MemoryTraces:
    """The in-memory store's traces (the same rules as the tables)."""

    rows: dict[int, TraceRow] = attrs.field(factory=dict)
    next_id: int = 1

    def save(self, row: TraceRow, keep: int) -> int:
        new_id, self.next_id = self.next_id, self.next_id + 1
        self.rows[new_id] = row
        mine = [i for i, r in self.rows.items() if r.assistant == row.assistant]
        for old in mine[:max(len(mine) - max(keep, 0), 0)]:
            del self.rows[old]
        return new_id

    def search(self, search: TraceFilter) -> list[JSONObject]:
        found = [summary(i, r) for i, r in reversed(self.rows.items()) if search.matches(r)]
        return found[:search.bounded_limit]

    def get(self, trace_id: int) -> JSONObject | None:
        row = self.rows.get(trace_id)
        return None if row is None else full(trace_id, row.data)
