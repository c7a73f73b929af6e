"""The ISharedWorldStore contract, one set of tests for every store that offers it.

:class:`SharedWorldStoreContract` holds the tests; a subclass supplies a
``store`` fixture.  Here it runs against the memory store;
tests/integration/test_postgres_world.py runs the very same tests on
PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from zope.interface.verify import verifyObject

from ai_tools.errors import WorldConflict
from ai_tools.interfaces import ISharedWorldStore
from ai_tools.store.memory import MemoryStore
from tests.unit.test_store_contract import make_clock

ROOM = {"id": "room:a", "key": "A", "location": None}
BOX = {"id": "obj:box", "key": "box", "location": "room:a"}


def message(text: str, *receivers: str, dedupe_key: str | None = None) -> dict[str, Any]:
    """A message to store, as the shared world hands it over."""
    return {"data": {"kind": "say", "text": text, "sender_id": "char:ada", "sender_key": "Ada",
                     "location_id": "room:a", "target_id": None, "channel": None,
                     "timestamp": 1.0},
            "receivers": list(receivers), "dedupe_key": dedupe_key}


class SharedWorldStoreContract:
    """Behaviour every ISharedWorldStore must have.  Subclasses define ``store``."""

    def test_provides_interface(self, store: Any) -> None:
        """The store provides ISharedWorldStore."""
        assert verifyObject(ISharedWorldStore, store)

    @pytest_twisted.ensureDeferred
    async def test_versions_follow_the_clock(self, store: Any) -> None:
        """Each change raises the clock; its rows carry the new value; other rows keep theirs."""
        assert await store.load_shared_world(10) is None
        first = await store.change_world({"objects": [ROOM], "meta": {"name": "W"}})
        second = await store.change_world({"objects": [BOX]})
        assert second["clock"] > first["clock"] > 0
        world = await store.load_shared_world(10)
        assert world["clock"] == second["clock"]
        assert world["objects"] == [(ROOM, first["clock"]), (BOX, second["clock"])]
        assert world["meta"] == {"name": ("W", first["clock"])}

    @pytest_twisted.ensureDeferred
    async def test_expectations_guard_the_whole_change(self, store: Any) -> None:
        """A wrong expected version (or an existing row expected absent) applies nothing."""
        first = await store.change_world({"objects": [ROOM]})
        clock = first["clock"]
        with pytest.raises(WorldConflict):
            await store.change_world({"objects": [BOX]},
                                     expect={("objects", "room:a"): clock - 1},
                                     messages=[message("hi", "char:bob")])
        with pytest.raises(WorldConflict):
            await store.change_world({"objects": [ROOM]}, expect={("objects", "room:a"): None})
        with pytest.raises(WorldConflict):
            await store.change_world(expect={("objects", "nowhere"): 3},
                                     messages=[message("hi")])
        after = await store.world_since(0)
        assert after["clock"] == clock
        assert [row["id"] for row, _ in after["rows"]["objects"]] == ["room:a"]
        assert after["messages"] == []
        ok = await store.change_world({"objects": [BOX]}, expect={
            ("objects", "room:a"): clock, ("objects", "obj:box"): None})
        assert ok["clock"] > clock

    @pytest_twisted.ensureDeferred
    async def test_touch_and_delete(self, store: Any) -> None:
        """A touched row gets the new version without new data; a deletion is reported."""
        first = await store.change_world({"objects": [ROOM, BOX]})
        touched = await store.change_world(touch=[("objects", "room:a")],
                                           delete={"objects": ["obj:box"]})
        since = await store.world_since(first["clock"])
        assert since["rows"]["objects"] == [(ROOM, touched["clock"])]
        assert since["deleted"] == [("objects", "obj:box")]
        gone = await store.world_since(0, dirty=[("objects", "obj:box"), ("objects", "room:a")])
        assert gone["dirty_rows"] == {("objects", "obj:box"): None,
                                      ("objects", "room:a"): (ROOM, touched["clock"])}

    @pytest_twisted.ensureDeferred
    async def test_messages_are_numbered_in_order(self, store: Any) -> None:
        """Messages get consecutive numbers below the change's clock, in the order given."""
        await store.change_world({"objects": [ROOM]})
        done = await store.change_world(messages=[message("one", "char:bob"),
                                                  message("two", "char:bob", "char:cy")])
        assert done["seqs"] == [done["clock"] - 2, done["clock"] - 1]
        since = await store.world_since(0)
        assert [(seq, data["text"], receivers) for seq, data, receivers in since["messages"]] == [
            (done["seqs"][0], "one", ["char:bob"]),
            (done["seqs"][1], "two", ["char:bob", "char:cy"])]

    @pytest_twisted.ensureDeferred
    async def test_a_dedupe_key_delivers_once(self, store: Any) -> None:
        """The same dedupe key (a tool call's id) stores its message once."""
        await store.change_world({"objects": [ROOM]})
        await store.change_world(messages=[message("hi", "char:bob", dedupe_key="call_1")])
        await store.change_world(messages=[message("hi", "char:bob", dedupe_key="call_1")])
        since = await store.world_since(0)
        assert [data["text"] for _, data, _ in since["messages"]] == ["hi"]

    @pytest_twisted.ensureDeferred
    async def test_a_dedupe_key_delivers_once_within_one_change_too(self, store: Any) -> None:
        """Two messages of one change under one key: the first is stored; unkeyed ones and
        other keys are all stored, and so is who heard them."""
        await store.change_world({"objects": [ROOM]})
        await store.change_world(messages=[
            message("hi", "char:bob", dedupe_key="pip:call_1:ab"),
            message("hi again", "char:bob", dedupe_key="pip:call_1:ab"),
            message("hi", "char:bob", dedupe_key="pip:call_2:ab"),
            message("hi", "char:bob"), message("hi", "char:bob")])
        since = await store.world_since(0)
        assert [data["text"] for _, data, _ in since["messages"]] == ["hi"] * 4
        world = await store.load_shared_world(10)
        assert len(world["messages"]) == 4

    @pytest_twisted.ensureDeferred
    async def test_a_backlog_comes_in_batches(self, store: Any) -> None:
        """With more messages than ``limit``, the answer stops at the last one it carries."""
        await store.change_world({"objects": [ROOM]})
        for n in range(5):
            await store.change_world(messages=[message(f"m{n}", "char:bob")])
        batch = await store.world_since(0, limit=2)
        assert [data["text"] for _, data, _ in batch["messages"]] == ["m0", "m1"]
        assert batch["clock"] == batch["messages"][-1][0]
        rest = await store.world_since(batch["clock"], limit=100)
        assert [data["text"] for _, data, _ in rest["messages"]] == ["m2", "m3", "m4"]

    @pytest_twisted.ensureDeferred
    async def test_heard_history_and_pruning(self, store: Any) -> None:
        """A load carries what each character heard last; pruning keeps the newest."""
        await store.change_world({"objects": [ROOM]})
        for n in range(4):
            await store.change_world(messages=[message(f"b{n}", "char:bob")])
        await store.change_world(messages=[message("c0", "char:cy")])
        world = await store.load_shared_world(2)
        assert [data["text"] for _, data, _ in world["messages"]] == ["b2", "b3", "c0"]
        assert await store.prune_world_messages(2) == 3
        since = await store.world_since(0)
        assert [data["text"] for _, data, _ in since["messages"]] == ["b3", "c0"]

    @pytest_twisted.ensureDeferred
    async def test_bad_values_are_refused(self, store: Any) -> None:
        """Unknown sections, rows without keys and unserialisable messages change nothing."""
        with pytest.raises(ValueError):
            await store.change_world({"rooms": [ROOM]})
        with pytest.raises(TypeError):
            await store.change_world(messages=[{"data": {"x": object()}, "receivers": []}])
        assert await store.load_shared_world(1) is None


class TestMemorySharedWorldStore(SharedWorldStoreContract):
    """The contract on the memory store."""

    @pytest.fixture
    def store(self) -> MemoryStore:
        """An open memory store."""
        store = MemoryStore(clock=make_clock())
        store.open()
        return store
