"""Stored loop traces: one contract for every store (memory here; SQLite and PostgreSQL in
tests/integration/test_sqlite_store_contract.py and test_postgres_store_contract.py)."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import task
from zope.interface.verify import verifyObject

from ai_tools.interfaces import ITraceStore
from ai_tools.store.memory import MemoryStore
from ai_tools.store.traces import TRACE_BYTES, TraceFilter, trace_row


def trace(assistant: str = "pip", start: float = 100.0, *, reason: str = "completed",
          failed: bool = False, tools: tuple[str, ...] = ("look",), spans: int = 2,
          span_text: str = "") -> dict[str, Any]:
    return {"assistant": assistant, "started_at": start, "ended_at": start + 2.5,
            "reason": reason, "failed": failed, "tools": list(tools), "iterations": 1,
            "input_tokens": 30, "output_tokens": 7,
            "spans": [{"kind": "tool", "name": f"t{i}", "start_ms": float(i),
                       "duration_ms": 1.0, "error": span_text} for i in range(spans)]}


class TraceLogContract:
    """What every store does with loop traces (a subclass supplies ``store``)."""

    @pytest_twisted.ensureDeferred
    async def test_round_trip_and_the_newest_n_per_assistant(self, store: Any) -> None:
        ids = [await store.save_trace(trace("pip", 100.0 + i), 3) for i in range(5)]
        other = await store.save_trace(trace("ada", 50.0), 3)
        listed = await store.list_traces(TraceFilter(assistant="pip"))
        assert [t["id"] for t in listed] == ids[:1:-1]  # the newest three, newest first
        assert listed[0] == {"id": ids[-1], "assistant": "pip", "started_at": 104.0,
                             "ended_at": 106.5, "reason": "completed", "failed": False,
                             "tools": ["look"], "input_tokens": 30, "output_tokens": 7}
        assert await store.get_trace(ids[0]) is None  # gone: only the newest 3 kept
        whole = await store.get_trace(ids[-1])
        assert whole["id"] == ids[-1] and len(whole["spans"]) == 2
        assert (await store.get_trace(other))["assistant"] == "ada"

    @pytest_twisted.ensureDeferred
    async def test_search_by_reason_tool_failure_and_time(self, store: Any) -> None:
        await store.save_trace(trace("pip", 10.0, tools=("look", "say")), 10)
        await store.save_trace(trace("pip", 20.0, reason="llm_error", failed=True, tools=()),
                               10)
        await store.save_trace(trace("ada", 30.0, tools=("say",)), 10)
        found = await store.list_traces(TraceFilter(tool="say"))
        assert [(t["assistant"], t["started_at"]) for t in found] == [("ada", 30.0),
                                                                       ("pip", 10.0)]
        assert [t["started_at"] for t in await store.list_traces(TraceFilter(tool="lo"))] \
            == []  # a whole tool name, not a part of one
        failed = await store.list_traces(TraceFilter(failed=True))
        assert [t["reason"] for t in failed] == ["llm_error"]
        assert [t["started_at"] for t in await store.list_traces(
            TraceFilter(reason="completed", since=12.6))] == [30.0]
        assert [t["started_at"] for t in await store.list_traces(
            TraceFilter(until=20.0, limit=1))] == [20.0]

    @pytest_twisted.ensureDeferred
    async def test_a_huge_trace_is_cut_to_the_byte_bound(self, store: Any) -> None:
        big = trace(spans=400, span_text="x" * 1000)
        saved = await store.get_trace(await store.save_trace(big, 5))
        assert saved["truncated"] is True and 0 < len(saved["spans"]) < 400
        assert saved["spans"][0]["name"] == "t0"
        with pytest.raises(KeyError):
            await store.save_trace({"spans": []}, 5)

    @pytest_twisted.ensureDeferred
    async def test_a_malformed_trace_is_refused_and_nothing_kept(self, store: Any) -> None:
        """Fields of the wrong type fail the save with TypeError; the log stays as it was."""
        assert verifyObject(ITraceStore, store)
        for bad in ({"started_at": [1]}, {"input_tokens": {"n": 3}}, {"spans": "x"},
                    {"tools": {"look": 1}}):
            with pytest.raises(TypeError):
                await store.save_trace({**trace("pip"), **bad}, 5)
        assert await store.list_traces(TraceFilter()) == []


def test_a_row_is_within_the_bound() -> None:
    row = trace_row(trace(spans=1000, span_text="é" * 500))
    assert len(row.data.encode("utf-8")) <= TRACE_BYTES
    assert row.tools == "|look|"


class TestMemoryTraceLog(TraceLogContract):
    @pytest.fixture
    def store(self) -> MemoryStore:
        store = MemoryStore(clock=task.Clock())
        store.open()
        return store
