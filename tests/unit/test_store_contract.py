"""The IStore / IWorldStore contract, one set of tests for every store.

:class:`StoreContract` holds the tests; a subclass supplies a ``store``
fixture.  Here it runs against :class:`MemoryStore`;
tests/integration/test_sqlite_store_contract.py runs the very same tests
against :class:`SQLiteStore` (on a file and in memory), which needs the real
reactor for its thread.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import task
from zope.interface.verify import verifyObject

from ai_tools.errors import NotFound
from ai_tools.interfaces import IAssistantStates, ICacheStore, IRecordStore, IStore, IWorldStore
from ai_tools.store.history_repair import INTERRUPTED_ERROR, unanswered_tool_calls
from ai_tools.store.memory import MemoryStore

START = 1000.0


def make_clock() -> task.Clock:
    """A clock at :data:`START` seconds."""
    clock = task.Clock()
    clock.advance(START)
    return clock


def tool_call(call_id: str, name: str = "inspect_location") -> dict[str, Any]:
    """A native tool call."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


class StoreContract:
    """Behaviour every IStore + IWorldStore must have.  Subclasses define ``store``."""

    # -- interfaces -----------------------------------------------------------

    def test_provides_interfaces(self, store: Any) -> None:
        """The store provides IStore and IWorldStore."""
        assert verifyObject(IStore, store)
        assert verifyObject(IWorldStore, store)

    def test_provides_each_concern_of_istore(self, store: Any) -> None:
        """IStore is the union of its concerns: a store provides each of them too."""
        assert IStore.extends(IAssistantStates) and IStore.extends(ICacheStore)
        assert IStore.extends(IRecordStore)
        for concern in (IAssistantStates, ICacheStore, IRecordStore):
            assert concern.providedBy(store)
            assert verifyObject(concern, store)

    # -- assistant state ------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_unknown_assistant_loads_none(self, store: Any) -> None:
        """Loading an assistant never saved gives None."""
        assert await store.load_assistant("nobody") is None

    @pytest_twisted.ensureDeferred
    async def test_state_round_trip_and_overwrite(self, store: Any) -> None:
        """A saved state comes back equal; a second save replaces it entirely."""
        state = {
            "mode": "awake",
            "history": [{"role": "user", "content": 'héllo ✨ \x00 "quoted"'}],
            "pending_events": [{"type": "say", "text": "hi"}],
            "counters": {"ticks": 3, "ratio": 0.5},
            "config": {"nested": {"list": [1, None, True]}},
        }
        await store.save_assistant("ada", state)
        assert await store.load_assistant("ada") == state
        await store.save_assistant("ada", {"mode": "sleep"})
        assert await store.load_assistant("ada") == {"mode": "sleep"}

    @pytest_twisted.ensureDeferred
    async def test_lone_surrogates_are_storable(self, store: Any) -> None:
        """Model text with a lone surrogate is saved (state exactly, record content replaced)."""
        await store.save_assistant("ada", {"text": "a\ud800b"})
        assert await store.load_assistant("ada") == {"text": "a\ud800b"}
        record = await store.add_record("ada", "memory", "x\udfffy")
        assert record["content"] == "x\ufffdy"

    @pytest_twisted.ensureDeferred
    async def test_list_and_delete(self, store: Any) -> None:
        """list_assistants is sorted; delete reports whether something was deleted."""
        await store.save_assistant("zed", {})
        await store.save_assistant("ada", {})
        assert await store.list_assistants() == ["ada", "zed"]
        assert await store.delete_assistant("zed") is True
        assert await store.delete_assistant("zed") is False
        assert await store.list_assistants() == ["ada"]
        assert await store.load_assistant("zed") is None

    @pytest_twisted.ensureDeferred
    async def test_save_many_writes_all(self, store: Any) -> None:
        """save_many writes every state; an empty batch is fine."""
        await store.save_many({"a": {"v": 1}, "b": {"v": 2}})
        await store.save_many({})
        assert await store.load_assistant("a") == {"v": 1}
        assert await store.load_assistant("b") == {"v": 2}

    @pytest_twisted.ensureDeferred
    async def test_save_many_is_all_or_nothing(self, store: Any) -> None:
        """One bad state in a batch leaves every state of the batch unwritten."""
        await store.save_assistant("a", {"v": 1})
        with pytest.raises(TypeError, match="JSON"):
            await store.save_many({"a": {"v": 2}, "b": {"x": {1, 2}}})
        assert await store.load_assistant("a") == {"v": 1}
        assert await store.load_assistant("b") is None

    @pytest_twisted.ensureDeferred
    async def test_bad_state_and_name_refused(self, store: Any) -> None:
        """A non-dict state, NaN, and an empty or non-string name are refused."""
        with pytest.raises(TypeError):
            await store.save_assistant("a", ["not", "a", "dict"])
        with pytest.raises(ValueError):
            await store.save_assistant("a", {"x": float("nan")})
        with pytest.raises(ValueError):
            await store.save_assistant("", {})
        with pytest.raises(TypeError):
            await store.save_assistant(3, {})
        assert await store.list_assistants() == []

    @pytest_twisted.ensureDeferred
    async def test_load_repairs_unanswered_native_calls(self, store: Any) -> None:
        """Tool calls saved without answers come back answered with 'interrupted'."""
        history = [
            {"role": "user", "content": "what is here?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call("c1"), tool_call("c2")],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"success": true}'},
        ]
        await store.save_assistant("ada", {"history": history, "mode": "awake"})
        loaded = await store.load_assistant("ada")
        assert unanswered_tool_calls(loaded["history"]) == []
        synthetic = loaded["history"][-1]
        assert synthetic["role"] == "tool"
        assert synthetic["tool_call_id"] == "c2"
        assert json.loads(synthetic["content"]) == {"success": False, "error": INTERRUPTED_ERROR}
        assert loaded["mode"] == "awake"

    @pytest_twisted.ensureDeferred
    async def test_load_repairs_unanswered_fallback_call(self, store: Any) -> None:
        """A fallback JSON call without a [TOOL RESULT] message gets one on load."""
        history = [{"role": "assistant", "content": '{"tool": "say", "parameters": {"text": "x"}}'}]
        await store.save_assistant("bob", {"history": history})
        loaded = await store.load_assistant("bob")
        assert loaded["history"][-1]["content"].startswith("[TOOL RESULT: say]")
        assert unanswered_tool_calls(loaded["history"]) == []

    # -- cache ----------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_cache_round_trip_and_expiry(self, store: Any) -> None:
        """Values come back until expires_at; expires_at <= now is a miss; None never expires."""
        assert await store.cache_get("ns", "k", 0) is None
        await store.cache_put("ns", "k", {"rows": [1, 2]}, 100.0)
        assert await store.cache_get("ns", "k", 99.9) == {"rows": [1, 2]}
        assert await store.cache_get("ns", "k", 100.0) is None
        await store.cache_put("ns", "forever", [1], None)
        assert await store.cache_get("ns", "forever", 1e12) == [1]
        await store.cache_put("ns", "forever", "replaced", None)
        assert await store.cache_get("ns", "forever", 0) == "replaced"

    @pytest_twisted.ensureDeferred
    async def test_cache_invalidate_and_purge(self, store: Any) -> None:
        """Invalidation drops one namespace only; purge drops expired entries only."""
        await store.cache_put("a", "1", 1, None)
        await store.cache_put("a", "2", 2, 5.0)
        await store.cache_put("b", "1", 3, 5.0)
        assert await store.cache_invalidate("a") == 2
        assert await store.cache_get("a", "1", 0) is None
        assert await store.cache_get("b", "1", 0) == 3
        await store.cache_put("b", "2", 4, None)
        assert await store.cache_purge_expired(10.0) == 1
        assert await store.cache_get("b", "2", 10.0) == 4

    @pytest_twisted.ensureDeferred
    async def test_cache_refuses_bad_values(self, store: Any) -> None:
        """Unserialisable values and non-numeric expiry are refused; nothing is stored."""
        with pytest.raises(TypeError):
            await store.cache_put("ns", "k", object(), None)
        with pytest.raises(TypeError):
            await store.cache_put("ns", "k", 1, "soon")
        with pytest.raises(ValueError):
            await store.cache_put("ns", "k", 1, float("inf"))
        assert await store.cache_get("ns", "k", 0) is None

    # -- records --------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_add_and_get_record(self, store: Any) -> None:
        """A new record has every field; metadata defaults to {}."""
        record = await store.add_record("ada", "memory", "The lighthouse keeper is Marta.")
        assert set(record) == {
            "id",
            "owner",
            "collection",
            "content",
            "metadata",
            "parent_id",
            "created_at",
            "updated_at",
        }
        assert record["metadata"] == {}
        assert record["parent_id"] is None
        assert record["created_at"] == record["updated_at"] == START
        assert await store.get_record(record["id"]) == record
        assert await store.get_record(987654) is None

    @pytest_twisted.ensureDeferred
    async def test_record_parent_must_exist(self, store: Any) -> None:
        """An unknown parent_id is NotFound; a known one is kept."""
        with pytest.raises(NotFound):
            await store.add_record("ada", "goals", "sub", parent_id=424242)
        parent = await store.add_record("ada", "goals", "build a pier")
        child = await store.add_record("ada", "goals", "get planks", parent_id=parent["id"])
        assert child["parent_id"] == parent["id"]
        children = await store.list_records("ada", "goals", parent_id=parent["id"])
        assert [c["id"] for c in children] == [child["id"]]

    @pytest_twisted.ensureDeferred
    async def test_ids_beyond_64_bits_are_unknown(self, store: Any) -> None:
        """An id no database column can hold is a record that does not exist."""
        for huge in (2**63, -(2**63) - 1, 10**30):
            assert await store.get_record(huge) is None
            assert await store.delete_record(huge) is False
            assert await store.update_record(huge, content="x") is None
            with pytest.raises(NotFound):
                await store.add_record("ada", "goals", "sub", parent_id=huge)

    @pytest_twisted.ensureDeferred
    async def test_record_bad_arguments(self, store: Any) -> None:
        """Non-string content, non-dict metadata, empty owner are refused."""
        with pytest.raises(TypeError):
            await store.add_record("ada", "memory", None)
        with pytest.raises(TypeError):
            await store.add_record("ada", "memory", "x", metadata=["a"])
        with pytest.raises(ValueError):
            await store.add_record("", "memory", "x")
        with pytest.raises(ValueError):
            await store.list_records("ada", "memory", limit=0)
        with pytest.raises(ValueError):
            await store.search_records("ada", "memory", "x", limit=-1)

    @pytest_twisted.ensureDeferred
    async def test_update_record(self, store: Any, clock: task.Clock) -> None:
        """Update replaces content and/or metadata and bumps updated_at; unknown id is None."""
        record = await store.add_record("ada", "journal", "day one", {"mood": "calm"})
        clock.advance(10)
        updated = await store.update_record(record["id"], metadata={"mood": "busy"})
        assert updated["content"] == "day one"
        assert updated["metadata"] == {"mood": "busy"}
        assert updated["updated_at"] == START + 10
        assert updated["created_at"] == START
        updated = await store.update_record(record["id"], content="day two")
        assert updated["content"] == "day two"
        assert updated["metadata"] == {"mood": "busy"}
        assert await store.update_record(99999, content="x") is None

    @pytest_twisted.ensureDeferred
    async def test_list_records_order_limit_and_isolation(
        self, store: Any, clock: task.Clock
    ) -> None:
        """Newest first by default, oldest first on request; limit; owners and collections apart."""
        ids = []
        for n in range(4):
            ids.append((await store.add_record("ada", "journal", f"entry {n}"))["id"])
            clock.advance(1)
        await store.add_record("bob", "journal", "not ada's")
        await store.add_record("ada", "memory", "other collection")
        newest = await store.list_records("ada", "journal", limit=3)
        assert [r["id"] for r in newest] == ids[::-1][:3]
        oldest = await store.list_records("ada", "journal", newest_first=False)
        assert [r["id"] for r in oldest] == ids
        everything = await store.list_records("ada", None, limit=50)
        assert len(everything) == 5
        assert await store.list_records("nobody", "journal") == []

    @pytest_twisted.ensureDeferred
    async def test_delete_record_detaches_children(self, store: Any) -> None:
        """Deleting a parent leaves its children without a parent."""
        parent = await store.add_record("ada", "goals", "parent")
        child = await store.add_record("ada", "goals", "child", parent_id=parent["id"])
        assert await store.delete_record(parent["id"]) is True
        assert await store.delete_record(parent["id"]) is False
        assert (await store.get_record(child["id"]))["parent_id"] is None

    # -- search ---------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_search_ranks_and_carries_ids_scores_timestamps(
        self, store: Any, clock: task.Clock
    ) -> None:
        """Records matching more query words rank higher; results carry id, score, times."""
        both = await store.add_record("ada", "memory", "Marta keeps the lighthouse by the harbour")
        await store.add_record("ada", "memory", "the harbour market opens at dawn")
        await store.add_record("ada", "memory", "nothing relevant here at all")
        clock.advance(1)
        results = await store.search_records("ada", "memory", "lighthouse harbour")
        assert results[0]["id"] == both["id"]
        assert len(results) == 2
        for result in results:
            assert isinstance(result["score"], float)
            assert result["score"] > 0
            assert result["created_at"] == START
            assert "updated_at" in result
        assert results[0]["score"] > results[1]["score"]

    @pytest_twisted.ensureDeferred
    async def test_search_respects_owner_collection_and_limit(self, store: Any) -> None:
        """Search only sees the owner's records of the collection (None: all collections)."""
        await store.add_record("ada", "memory", "apple pie recipe")
        await store.add_record("ada", "journal", "baked an apple pie")
        await store.add_record("bob", "memory", "apple orchard")
        assert len(await store.search_records("ada", "memory", "apple")) == 1
        assert len(await store.search_records("ada", None, "apple")) == 2
        assert len(await store.search_records("ada", None, "apple", limit=1)) == 1
        assert await store.search_records("carol", "memory", "apple") == []

    @pytest_twisted.ensureDeferred
    async def test_search_follows_updates_and_deletes(self, store: Any) -> None:
        """The index follows content updates and deletions."""
        record = await store.add_record("ada", "memory", "the red door")
        await store.update_record(record["id"], content="the blue gate")
        assert await store.search_records("ada", "memory", "red") == []
        assert [r["id"] for r in await store.search_records("ada", "memory", "blue")] == [
            record["id"]
        ]
        await store.delete_record(record["id"])
        assert await store.search_records("ada", "memory", "blue") == []

    @pytest_twisted.ensureDeferred
    @pytest.mark.parametrize(
        "query",
        [
            "",
            "   ",
            "!!! ??? ...",
            '"unbalanced',
            "AND OR NOT",
            "NEAR(door gate, 3)",
            "content: door",
            "records_fts:gate",
            "door*",
            "-door ^gate",
            "(((",
            "'; DROP TABLE records; --",
            "\x00\x01",
        ],
    )
    async def test_search_never_raises_on_odd_queries(self, store: Any, query: str) -> None:
        """Operators, quotes and punctuation are plain text; only-punctuation finds nothing."""
        await store.add_record("ada", "memory", "the door and the gate")
        results = await store.search_records("ada", "memory", query)
        assert isinstance(results, list)
        if "door" in query:
            assert len(results) == 1

    # -- world ----------------------------------------------------------------

    @pytest_twisted.ensureDeferred
    async def test_world_empty_is_none(self, store: Any) -> None:
        """A store without a world says so with None."""
        assert await store.load_world() is None

    @pytest_twisted.ensureDeferred
    async def test_world_round_trip_order_and_delete(self, store: Any) -> None:
        """Rows come back in insertion order (an update keeps its place); deletes apply."""
        await store.write_world(
            put={
                "objects": [
                    {"id": "room:b", "key": "B"},
                    {"id": "room:a", "key": "A"},
                    {"id": "obj:x", "key": "x", "location": "room:a"},
                ],
                "channels": [{"key": "public", "subscribers": ["char:ada"]}],
                "prototypes": [{"key": "lamp"}],
                "help": [{"key": "building", "text": "dig rooms"}],
                "meta": {"name": "Test", "counter": 3},
            }
        )
        await store.write_world(
            put={"objects": [{"id": "room:b", "key": "B2"}]}, delete={"objects": ["obj:x"]}
        )
        world = await store.load_world()
        assert [o["id"] for o in world["objects"]] == ["room:b", "room:a"]
        assert world["objects"][0]["key"] == "B2"
        assert world["channels"] == [{"key": "public", "subscribers": ["char:ada"]}]
        assert world["prototypes"] == [{"key": "lamp"}]
        assert world["help"] == [{"key": "building", "text": "dig rooms"}]
        assert world["meta"] == {"name": "Test", "counter": 3}
        await store.write_world(delete={"meta": ["counter"]})
        assert (await store.load_world())["meta"] == {"name": "Test"}

    @pytest_twisted.ensureDeferred
    async def test_world_write_is_all_or_nothing(self, store: Any) -> None:
        """A bad section or row fails the whole write."""
        with pytest.raises(ValueError):
            await store.write_world(put={"objects": [{"id": "a"}], "rooms": [{"id": "b"}]})
        with pytest.raises(ValueError):
            await store.write_world(put={"objects": [{"id": "a"}, {"key": "no id"}]})
        with pytest.raises(TypeError):
            await store.write_world(put={"objects": [{"id": "a", "x": object()}]})
        assert await store.load_world() is None


class HeardLogContract:
    """IHeardLog: what a single-process world's characters heard, kept in order, bounded.
    (Mixed into the memory and SQLite contracts; PostgreSQL keeps a shared world's
    messages through ISharedWorldStore instead.)"""

    @pytest_twisted.ensureDeferred
    async def test_heard_messages_are_kept_in_order_and_bounded(self, store: Any) -> None:
        from ai_tools.interfaces import IHeardLog

        assert IHeardLog.providedBy(store)
        assert await store.load_heard(10) == []
        rows = [(seq, f'{{"text": "m{seq}"}}', '["char:bob"]') for seq in range(1, 6)]
        await store.append_heard(rows[:3], 4)
        await store.append_heard(rows[3:], 4)
        assert await store.load_heard(10) == rows[1:]  # the newest 4
        assert await store.load_heard(2) == rows[3:]
        assert await store.load_heard(0) == []
        await store.append_heard([(5, '{"text": "again"}', "[]")], 4)  # a number again
        assert (await store.load_heard(1)) == [(5, '{"text": "again"}', "[]")]


class TestMemoryStoreContract(StoreContract, HeardLogContract):
    """The contract on :class:`MemoryStore`."""

    @pytest.fixture
    def clock(self) -> task.Clock:
        """The store's clock."""
        return make_clock()

    @pytest.fixture
    def store(self, clock: task.Clock) -> MemoryStore:
        """An open memory store."""
        store = MemoryStore(clock=clock)
        store.open()
        return store
