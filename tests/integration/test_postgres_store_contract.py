"""The store contract (tests/unit/test_store_contract.py) on PostgreSQLStore.

The very tests the memory and SQLite stores pass, on a real PostgreSQL
database (a throwaway cluster on 127.0.0.1), through the real reactor and
the store's threads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_twisted
from twisted.internet import task

from ai_tools.store.postgres import PostgreSQLStore
from tests.integration.conftest import PostgresDatabase
from tests.unit.test_store_contract import StoreContract, make_clock
from tests.unit.test_store_traces import TraceLogContract


class TestPostgreSQLStoreContract(StoreContract, TraceLogContract):
    """The contract on :class:`PostgreSQLStore`."""

    @pytest.fixture
    def clock(self) -> task.Clock:
        """The store's clock (stamps only; the threads run on the real reactor)."""
        return make_clock()

    @pytest_twisted.async_yield_fixture
    async def store(
        self, postgres_db: PostgresDatabase, clock: task.Clock
    ) -> AsyncIterator[PostgreSQLStore]:
        """An open PostgreSQL store on a fresh database, closed after the test."""
        store = PostgreSQLStore(postgres_db.dsn, password=postgres_db.password, clock=clock)
        await store.open()
        yield store
        await store.close()
