"""What a clone inherits besides its messages: working memory (reference §7.1) and observations (§1)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from threadmind import Memory
from threadmind.models import ScriptedModel
from threadmind.stores import SQLiteStore
from threadmind.stores._om import OMRecord

from ._support import StoreFactory, msg


async def test_thread_scoped_working_memory_is_copied(make_store: StoreFactory) -> None:
    options = {"workingMemory": {"enabled": True, "scope": "thread"}}
    async with Memory(storage=make_store(), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# Facts\n- likes tea")
        clone = (await memory.clone_thread("t1", new_thread_id="c1")).thread
        assert await memory.get_working_memory(thread_id="c1", resource_id="r1") == "# Facts\n- likes tea"
        assert clone.metadata is not None and clone.metadata["clone"]["sourceThreadId"] == "t1"
        # the copy is the clone's own: editing it leaves the source alone
        await memory.update_working_memory(thread_id="c1", resource_id="r1", working_memory="# Facts\n- coffee")
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Facts\n- likes tea"
        # metadata given to the clone wins over the inherited text
        await memory.clone_thread("t1", new_thread_id="c2", metadata={"workingMemory": "# Mine"})
        assert await memory.get_working_memory(thread_id="c2", resource_id="r1") == "# Mine"


async def test_resource_scoped_working_memory_follows_a_clone_to_a_resource_without_one(
    make_store: StoreFactory,
) -> None:
    options = {"workingMemory": {"enabled": True}}  # resource scope (the default)
    async with Memory(storage=make_store(), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# Profile\n- Ada")
        await memory.clone_thread("t1", new_thread_id="same")  # the same resource: nothing to copy
        assert await memory.get_working_memory(thread_id="same", resource_id="r1") == "# Profile\n- Ada"
        await memory.clone_thread("t1", new_thread_id="moved", resource_id="r2")
        assert await memory.get_working_memory(thread_id="moved", resource_id="r2") == "# Profile\n- Ada"
        # a resource with a profile of its own keeps it
        await memory.create_thread(resource_id="r3", thread_id="t3")
        await memory.update_working_memory(thread_id="t3", resource_id="r3", working_memory="# Profile\n- Bo")
        await memory.clone_thread("t1", new_thread_id="into-r3", resource_id="r3")
        assert await memory.get_working_memory(thread_id="into-r3", resource_id="r3") == "# Profile\n- Bo"
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Profile\n- Ada"


async def test_the_threads_observations_are_copied_with_mapped_ids(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    options = {"observationalMemory": {"model": ScriptedModel([]), "observation": {"messageTokens": 50}}}
    async with Memory(storage=store, options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a", ms=1), msg("b", ms=2), msg("c", ms=3)])
        now = datetime(2025, 3, 2, tzinfo=UTC)
        records = store.observational_records()
        await records.put(OMRecord(
            id="om-1", lookup_key="thread:t1", scope="thread", resource_id="r1", thread_id="t1",
            active_observations="* user greeted", generation_count=2, observed_message_ids=["a", "b"],
            last_observed_at=now, created_at=now, updated_at=now))
        result = await memory.clone_thread("t1", new_thread_id="c1", message_limit=2)  # copies b and c only
        copied = await records.current("thread:c1")
        assert copied is not None
        assert (copied.active_observations, copied.generation_count, copied.last_observed_at) == (
            "* user greeted", 2, now)
        assert (copied.thread_id, copied.resource_id, copied.scope) == ("c1", "r1", "thread")
        assert copied.observed_message_ids == [result.id_map["b"]]  # "a" was not cloned
        assert copied.id != "om-1"
        source = await records.current("thread:t1")
        assert source is not None and source.observed_message_ids == ["a", "b"]


async def test_working_memory_in_thread_metadata_also_sets_the_resources(make_store: StoreFactory) -> None:
    async with Memory(storage=make_store(), options={"workingMemory": {"enabled": True}}) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1", metadata={"workingMemory": "# From create"})
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# From create"
        await memory.update_thread("t1", metadata={"workingMemory": "# From update", "other": 1})
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# From update"
        await memory.update_thread("t1", title="renamed")  # no workingMemory key: the resource's stays
        assert await memory.get_working_memory(thread_id="t1", resource_id="r1") == "# From update"
    options = {"workingMemory": {"enabled": True, "scope": "thread"}}
    async with Memory(storage=make_store(), options=options) as memory:  # thread scope: the thread keeps it
        await memory.create_thread(resource_id="r1", thread_id="t1", metadata={"workingMemory": "# Mine"})
        resource = await memory.storage.get_resource("r1")
        assert resource is None or resource.working_memory is None
