"""The store contract (tests/unit/test_store_contract.py) on SQLiteStore.

The same tests as the memory store, on a database file and on ``:memory:``,
through the real reactor and the store's thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import task

from ai_tools.store.sqlite import SQLiteStore
from tests.unit.test_store_contract import HeardLogContract, StoreContract, make_clock
from tests.unit.test_store_traces import TraceLogContract


class TestSQLiteStoreContract(StoreContract, HeardLogContract, TraceLogContract):
    """The contract on :class:`SQLiteStore`."""

    @pytest.fixture
    def clock(self) -> task.Clock:
        """The store's clock (stamps only; the store thread runs on the real reactor)."""
        return make_clock()

    @pytest_twisted.async_yield_fixture(params=["file", "memory"])
    async def store(
        self, request: pytest.FixtureRequest, tmp_path: Path, clock: task.Clock
    ) -> AsyncIterator[SQLiteStore]:
        """An open SQLite store, closed after the test."""
        path = str(tmp_path / "state.sqlite") if request.param == "file" else ":memory:"
        store = SQLiteStore(path, clock=clock)
        await store.open()
        yield store
        await store.close()
