"""Memory's public methods (SPEC §3): happy paths, documented errors and codes, options as dicts."""

from __future__ import annotations

from datetime import UTC, timedelta

import anyio
import pytest

from threadmind import CloneResult, Memory, MemoryConfig, Message, Thread
from threadmind.codecs._time import utc_now
from threadmind.errors import ConfigError, ResourceMismatch, ThreadmindError, ThreadNotFound, ValidationError
from threadmind.stores import InMemoryStore

from ._support import BASE, StoreFactory, all_ids, msg


def _aware_ms(value: object) -> bool:
    from datetime import datetime

    return isinstance(value, datetime) and value.tzinfo is not None and value.utcoffset() == timedelta(0) \
        and value.microsecond % 1000 == 0


class TestConstruction:
    async def test_no_storage_raises_config_error_on_use(self) -> None:
        memory = Memory()
        with pytest.raises(ConfigError, match=r"^Memory requires a storage provider to function"):
            await memory.start()
        with pytest.raises(ConfigError, match=r"^Memory requires a storage provider to function"):
            await memory.recall("t1")
        with pytest.raises(ConfigError, match=r"^Memory requires a storage provider to function"):
            await memory.create_thread(resource_id="r1")
        with pytest.raises(ConfigError, match=r"^Memory requires a storage provider to function"):
            _ = memory.storage
        for nothing_to_do in (memory.update_messages([]), memory.delete_messages([])):  # still "any operation"
            with pytest.raises(ConfigError, match=r"^Memory requires a storage provider to function"):
                await nothing_to_do

    def test_options_dict_camel_case(self) -> None:
        memory = Memory(storage=InMemoryStore(), options={"lastMessages": 5, "readOnly": True})
        assert memory.options.last_messages == 5
        assert memory.options.read_only is True

    def test_options_typo_names_the_field(self) -> None:
        with pytest.raises(ConfigError, match="topk"):
            Memory(storage=InMemoryStore(), options={"semanticRecall": {"topk": 3}})
        with pytest.raises(ConfigError, match="lastMesages"):
            Memory(storage=InMemoryStore(), options={"lastMesages": 3})

    def test_invalid_option_values(self) -> None:
        with pytest.raises(ConfigError):
            Memory(storage=InMemoryStore(), options={"lastMessages": -1})
        with pytest.raises(ConfigError):
            Memory(storage=InMemoryStore(), options={"messageHistory": {"maxTokens": 10, "atMaxRemoveTokens": 20}})
        with pytest.raises(ConfigError):
            Memory(storage=InMemoryStore(), options="lastMessages=3")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="vector store"):
            Memory(storage=InMemoryStore(), options={"semanticRecall": True})

    def test_message_history_without_last_messages_drops_default(self) -> None:
        memory = Memory(storage=InMemoryStore(), options={"messageHistory": {"maxTokens": 100}})
        assert memory.options.max_messages is None
        assert memory.options.message_history is not None
        assert memory.options.message_history.remove_tokens == 25
        both = Memory(storage=InMemoryStore(), options={"lastMessages": 4, "messageHistory": {"maxTokens": 100}})
        assert both.options.max_messages == 4
        assert Memory(storage=InMemoryStore()).options.max_messages == 10
        assert Memory(storage=InMemoryStore(), options=MemoryConfig(last_messages=3)).options.max_messages == 3

    async def test_per_call_configs_follow_their_content(self) -> None:
        """Per-call dicts are merged once and remembered by their content: a changed dict is a new config."""
        async with Memory(storage=InMemoryStore()) as memory:
            await memory.create_thread(thread_id="t1", resource_id="r1")
            await memory.save_messages([msg(f"m{i}", ms=i) for i in range(8)])
            options = {"lastMessages": 3}
            assert len((await memory.recall("t1", thread_config=options)).messages) == 3
            options["lastMessages"] = 5  # the caller reuses and changes its dict
            assert len((await memory.recall("t1", thread_config=options)).messages) == 5
            assert len((await memory.recall("t1", thread_config={"lastMessages": 3})).messages) == 3
            for _ in range(2):  # an invalid config is refused every time, never remembered
                with pytest.raises(ConfigError, match="lastMesages"):
                    await memory.recall("t1", thread_config={"lastMesages": 3})

    def test_remembered_configs_equal_a_fresh_merge(self) -> None:
        from threadmind._config import merge_config

        memory = Memory(storage=InMemoryStore(), options={"lastMessages": 7, "workingMemory": {"enabled": True}})
        overrides: list[dict[str, object]] = [
            {"lastMessages": 2}, {"readOnly": True}, {"workingMemory": {"scope": "thread"}},
            {"messageHistory": {"maxTokens": 500}}, {"lastMessages": None}, {"lastMessages": False},
        ]
        for override in overrides * 2:
            assert memory.effective_options(override) == merge_config(memory.options, override), override
        assert memory.effective_options({"readOnly": True}) is memory.effective_options({"readOnly": True})
        assert memory.effective_options({"lastMessages": 2}).last_messages == 2
        assert memory.effective_options({"readOnly": False}).read_only is False

    async def test_not_started_raises(self) -> None:
        memory = Memory(storage=InMemoryStore())
        with pytest.raises(ThreadmindError) as info:
            await memory.recall("t1")
        assert info.value.code == "THREADMIND_NOT_STARTED"


class TestThreads:
    async def test_create_and_get(self, memory: Memory) -> None:
        thread = await memory.create_thread(resource_id="r1", thread_id="t1", title="Trip", metadata={"a": 1})
        assert (thread.id, thread.resource_id, thread.title, thread.metadata) == ("t1", "r1", "Trip", {"a": 1})
        assert _aware_ms(thread.created_at) and _aware_ms(thread.updated_at)
        assert await memory.get_thread_by_id("t1") == thread
        assert await memory.get_thread_by_id("t1", resource_id="r1") == thread
        assert await memory.get_thread_by_id("t1", resource_id="other") is None
        assert await memory.get_thread_by_id("missing") is None

    async def test_create_generates_id_and_empty_title(self, memory: Memory) -> None:
        thread = await memory.create_thread(resource_id="r1")
        assert thread.id and thread.title == "" and thread.metadata is None
        assert (await memory.get_thread_by_id(thread.id)) is not None

    async def test_create_existing_id_is_validation_error(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1", title="first")
        with pytest.raises(ValidationError, match="t1"):
            await memory.create_thread(resource_id="r2", thread_id="t1", title="second")
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.title == "first" and thread.resource_id == "r1"

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            pytest.param({"resource_id": ""}, "resource_id", id="empty-resource"),
            pytest.param({"resource_id": None}, "resource_id", id="none-resource"),
            pytest.param({"resource_id": "r1", "thread_id": "  "}, "thread_id", id="blank-thread"),
            pytest.param({"resource_id": "r1", "title": 5}, "title", id="title-type"),
            pytest.param({"resource_id": "r1", "metadata": [1]}, "metadata", id="metadata-type"),
        ],
    )
    async def test_create_bad_arguments(self, memory: Memory, kwargs: dict[str, object], field: str) -> None:
        with pytest.raises(ValidationError, match=field):
            await memory.create_thread(**kwargs)  # type: ignore[arg-type]
        assert (await memory.list_threads()).total == 0

    async def test_list_threads(self, memory: Memory) -> None:
        for i in range(5):
            await memory.create_thread(resource_id="r1" if i % 2 == 0 else "r2", thread_id=f"t{i}",
                                       metadata={"n": i, "kind": "even" if i % 2 == 0 else "odd"})
        page = await memory.list_threads(resource_id="r1")
        assert [t.id for t in page.threads] == ["t4", "t2", "t0"]
        assert (page.total, page.page, page.has_more) == (3, 0, False)
        asc = await memory.list_threads(direction="ASC", per_page=2, page=1)
        assert [t.id for t in asc.threads] == ["t2", "t3"] and asc.has_more and asc.total == 5
        assert [t.id for t in (await memory.list_threads(metadata={"kind": "odd"})).threads] == ["t3", "t1"]
        assert len((await memory.list_threads(per_page=False)).threads) == 5
        newest = max(t.updated_at for t in (await memory.list_threads(per_page=False)).threads)
        while utc_now() <= newest:  # times are kept to the millisecond: let the clock pass the last write
            await anyio.lowlevel.checkpoint()
        await memory.update_thread("t0", title="bumped")
        by_updated = await memory.list_threads(order_by="updated_at")
        assert by_updated.threads[0].id == "t0"
        with pytest.raises(ValidationError):
            await memory.list_threads(direction="UP")  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            await memory.list_threads(order_by="title")  # type: ignore[arg-type]
        with pytest.raises(ValidationError) as info:
            await memory.list_threads(metadata={"bad-key": 1})
        assert info.value.code == "MASTRA_STORAGE_LIBSQL_LIST_THREADS_INVALID_METADATA_KEY"
        with pytest.raises(ValidationError) as info:
            await memory.list_threads(per_page=False, page=1)
        assert info.value.code == "MASTRA_STORAGE_LIBSQL_LIST_THREADS_INVALID_PAGE"

    async def test_update_thread_merges_metadata(self, memory: Memory) -> None:
        created = await memory.create_thread(resource_id="r1", thread_id="t1", title="a", metadata={"x": 1, "y": 2})
        await anyio.sleep(0.002)  # let the ms clock move so updated_at is observably bumped
        updated = await memory.update_thread("t1", metadata={"y": 3, "z": 4})
        assert updated.title == "a" and updated.metadata == {"x": 1, "y": 3, "z": 4}
        assert updated.updated_at > created.updated_at and updated.created_at == created.created_at
        retitled = await memory.update_thread("t1", title="b")
        assert retitled.title == "b" and retitled.metadata == {"x": 1, "y": 3, "z": 4}
        assert await memory.get_thread_by_id("t1") == retitled

    async def test_update_missing_thread(self, memory: Memory) -> None:
        with pytest.raises(ThreadNotFound) as info:
            await memory.update_thread("nope", title="x")
        assert info.value.code == "MASTRA_STORAGE_LIBSQL_UPDATE_THREAD_NOT_FOUND"
        assert "nope" in info.value.message
        with pytest.raises(ValidationError, match="title"):
            await memory.update_thread("nope", title=3)  # type: ignore[arg-type]

    async def test_delete_thread_removes_messages(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.create_thread(resource_id="r1", thread_id="t2")
        await memory.save_messages([msg("a", ms=1), msg("b", ms=2), msg("c", "t2", ms=3)])
        await memory.delete_thread("t1")
        assert await memory.get_thread_by_id("t1") is None
        assert [m.id for m in await memory.list_messages_by_id(["a", "b", "c"])] == ["c"]
        assert await all_ids(memory, "t2") == ["c"]
        await memory.delete_thread("t1")  # deleting again is a no-op
        # the id is free again, and the old messages do not come back
        await memory.create_thread(resource_id="r1", thread_id="t1")
        assert await all_ids(memory, "t1") == []

    async def test_update_thread_resource_id_moves_messages(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a", ms=1), msg("b", ms=2)])
        moved = await memory.update_thread_resource_id("t1", resource_id="r2")
        assert moved.resource_id == "r2"
        assert (await memory.get_thread_by_id("t1", resource_id="r2")) is not None
        assert {m.resource_id for m in await memory.list_messages_by_id(["a", "b"])} == {"r2"}
        result = await memory.recall("t1", resource_id="r2", per_page=False)
        assert [m.id for m in result.messages] == ["a", "b"]
        with pytest.raises(ResourceMismatch):
            await memory.recall("t1", resource_id="r1")
        # new saves must now carry the new owner
        with pytest.raises(ResourceMismatch):
            await memory.save_messages([msg("c", ms=3)])
        await memory.save_messages([msg("c", resource_id="r2", ms=3)])
        with pytest.raises(ThreadNotFound):
            await memory.update_thread_resource_id("missing", resource_id="r2")
        with pytest.raises(ValidationError, match="resource_id"):
            await memory.update_thread_resource_id("t1", resource_id="")


class TestMessages:
    async def test_save_returns_stored_messages(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        result = await memory.save_messages([msg("a", ms=1), msg("b", ms=2, role="assistant")])
        assert [m.id for m in result.messages] == ["a", "b"]
        assert result.usage is None
        stored = await memory.list_messages_by_id(["b", "a", "unknown"])
        assert [(m.id, m.role, m.text) for m in stored] == [("a", "user", "text of a"), ("b", "assistant", "text of b")]
        assert all(_aware_ms(m.created_at) for m in stored)

    async def test_save_accepts_dicts(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([{
            "id": "d1", "role": "user", "threadId": "t1", "resourceId": "r1", "createdAt": "2025-03-01T09:00:00.123Z",
            "content": {"format": 2, "parts": [{"type": "text", "text": "from a dict"}]},
        }])
        (stored,) = await memory.list_messages_by_id(["d1"])
        assert stored.text == "from a dict"
        assert stored.created_at == BASE + timedelta(milliseconds=123)

    async def test_save_drops_system_and_strips_working_memory(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        system = Message(id="s", role="system", content=msg("x").content, created_at=BASE, thread_id="t1",
                         resource_id="r1")
        tagged = msg("w", ms=1, text="hello <working_memory># Name: Ada</working_memory> there")
        result = await memory.save_messages([system, tagged])
        assert [m.id for m in result.messages] == ["w"]
        (stored,) = await memory.list_messages_by_id(["w", "s"])
        assert "working_memory" not in stored.text and "Ada" not in stored.text
        assert stored.text.startswith("hello") and stored.text.endswith("there")

    async def test_resave_keeps_created_at_and_replaces_content(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a", ms=1), msg("b", ms=2)])
        later = BASE + timedelta(hours=1)
        result = await memory.save_messages([msg("a", text="edited", created_at=later)])
        assert result.messages[0].created_at == BASE + timedelta(milliseconds=1)
        (stored,) = await memory.list_messages_by_id(["a"])
        assert stored.text == "edited" and stored.created_at == BASE + timedelta(milliseconds=1)
        assert await all_ids(memory, "t1") == ["a", "b"]  # position kept too

    async def test_save_bumps_updated_at(self, memory: Memory) -> None:
        created = await memory.create_thread(resource_id="r1", thread_id="t1")
        await anyio.sleep(0.002)
        await memory.save_messages([msg("a")])
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.updated_at > created.updated_at

    async def test_save_errors(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        with pytest.raises(ThreadNotFound):
            await memory.save_messages([msg("a", "nope")])
        with pytest.raises(ResourceMismatch):
            await memory.save_messages([msg("a", "t1", "r2")])
        with pytest.raises(ValidationError, match="thread_id"):
            await memory.save_messages([msg("a", thread_id=None)])  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="resource_id"):
            await memory.save_messages([msg("a", resource_id=None)])  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match=r"`messages\[1\]\.thread_id` must be a non-empty string, got '  '"):
            await memory.save_messages([msg("a"), msg("b", thread_id="  ")])
        with pytest.raises(ValidationError, match=r"`messages\[0\]\.resource_id` must be a non-empty string, got 7"):
            await memory.save_messages([msg("a", resource_id=7)])  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="messages"):
            await memory.save_messages("hello")  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="messages"):
            await memory.save_messages(iter([msg("a")]))  # type: ignore[arg-type]
        assert await memory.list_messages_by_id(["a"]) == []
        assert (await memory.save_messages([])).messages == []

    async def test_update_messages(self, memory: Memory) -> None:
        created = await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a", ms=1), msg("b", ms=2)])
        before = await memory.get_thread_by_id("t1")
        assert before is not None
        await anyio.sleep(0.002)
        updated = await memory.update_messages([{"id": "a", "content": {"content": "new text",
                                                                        "metadata": {"k": "v"}}}])
        assert [m.id for m in updated] == ["a"]
        (stored,) = await memory.list_messages_by_id(["a"])
        assert stored.content.content == "new text" and stored.content.metadata == {"k": "v"}
        after = await memory.get_thread_by_id("t1")
        assert after is not None and after.updated_at > before.updated_at >= created.updated_at
        with pytest.raises(ValidationError, match="missing"):
            await memory.update_messages([{"id": "missing", "content": {"content": "x"}}])
        with pytest.raises(ValidationError, match="id"):
            await memory.update_messages([{"content": {"content": "x"}}])
        with pytest.raises(ValidationError):
            await memory.update_messages({"id": "a"})  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="role"):
            await memory.update_messages([{"id": "a", "role": "wizard"}])
        assert (await memory.list_messages_by_id(["a"]))[0].role == "user"
        assert await memory.update_messages([]) == []

    async def test_delete_messages(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        saved = await memory.save_messages([msg("a", ms=1), msg("b", ms=2), msg("c", ms=3), msg("d", ms=4)])
        before = await memory.get_thread_by_id("t1")
        assert before is not None
        await anyio.sleep(0.002)
        await memory.delete_messages(["a", saved.messages[1], {"id": "c"}, "unknown"])
        assert await all_ids(memory, "t1") == ["d"]
        after = await memory.get_thread_by_id("t1")
        assert after is not None and after.updated_at > before.updated_at
        await memory.delete_messages([])
        with pytest.raises(ValidationError, match="^Invalid input: must be an array"):
            await memory.delete_messages("d")
        with pytest.raises(ValidationError, match="^Invalid input: array items"):
            await memory.delete_messages([3])  # type: ignore[list-item]
        with pytest.raises(ValidationError, match="^All message IDs must be non-empty strings"):
            await memory.delete_messages([""])
        assert await all_ids(memory, "t1") == ["d"]

    async def test_list_messages_by_id_validation(self, memory: Memory) -> None:
        with pytest.raises(ValidationError):
            await memory.list_messages_by_id("abc")
        with pytest.raises(ValidationError, match=r"ids\[1\]"):
            await memory.list_messages_by_id(["a", ""])
        assert await memory.list_messages_by_id([]) == []


class TestClone:
    async def _source(self, memory: Memory) -> Thread:
        thread = await memory.create_thread(resource_id="r1", thread_id="src", title="Plans", metadata={"k": 1})
        await memory.save_messages([msg(f"m{i}", "src", ms=i) for i in range(5)])
        return thread

    async def test_clone_per_reference(self, memory: Memory) -> None:
        await self._source(memory)
        result = await memory.clone_thread("src", new_thread_id="dst")
        assert isinstance(result, CloneResult)
        thread = result.thread
        assert (thread.id, thread.resource_id, thread.title) == ("dst", "r1", "Clone of Plans")
        assert thread.metadata is not None
        clone = thread.metadata["clone"]
        assert clone["sourceThreadId"] == "src" and clone["lastMessageId"] == "m4"
        assert isinstance(clone["clonedAt"], str) and clone["clonedAt"].endswith("Z")
        assert "k" not in thread.metadata  # given metadata (none) plus clone, not the source's
        assert list(result.id_map) == [f"m{i}" for i in range(5)]
        assert [m.id for m in result.messages] == list(result.id_map.values())
        assert [m.created_at for m in result.messages] == [BASE + timedelta(milliseconds=i) for i in range(5)]
        assert all(m.thread_id == "dst" and m.resource_id == "r1" for m in result.messages)
        assert await all_ids(memory, "dst") == list(result.id_map.values())
        assert await all_ids(memory, "src") == [f"m{i}" for i in range(5)]  # source untouched

    async def test_clone_limit_title_metadata_resource(self, memory: Memory) -> None:
        await self._source(memory)
        result = await memory.clone_thread("src", resource_id="r2", title="Mine", metadata={"x": True},
                                           message_limit=2)
        assert result.thread.title == "Mine" and result.thread.resource_id == "r2"
        assert result.thread.metadata is not None and result.thread.metadata["x"] is True
        assert list(result.id_map) == ["m3", "m4"]
        assert [m.text for m in result.messages] == ["text of m3", "text of m4"]
        assert await memory.get_thread_by_id(result.thread.id, resource_id="r2") is not None
        empty = await memory.clone_thread("src", message_limit=0)
        assert empty.messages == [] and empty.id_map == {}
        assert empty.thread.metadata is not None and "lastMessageId" not in empty.thread.metadata["clone"]

    async def test_clone_untitled_and_errors(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="plain")
        assert (await memory.clone_thread("plain")).thread.title == ""
        with pytest.raises(ThreadNotFound) as info:
            await memory.clone_thread("missing")
        assert info.value.code == "MASTRA_STORAGE_LIBSQL_CLONE_THREAD_SOURCE_NOT_FOUND"
        assert info.value.message == "Source thread with id missing not found"
        with pytest.raises(ValidationError) as exists:
            await memory.clone_thread("plain", new_thread_id="plain")
        assert exists.value.code == "MASTRA_STORAGE_LIBSQL_CLONE_THREAD_THREAD_EXISTS"
        with pytest.raises(ValidationError, match="message_limit"):
            await memory.clone_thread("plain", message_limit=-1)


async def test_datetimes_come_back_aware_utc_ms(make_store: StoreFactory) -> None:
    from datetime import datetime, timezone

    plus2 = timezone(timedelta(hours=2))
    odd = datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=plus2)
    async with Memory(storage=make_store()) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        result = await memory.save_messages([msg("a", created_at=odd)])
        (stored,) = await memory.list_messages_by_id(["a"])
        for value in (result.messages[0].created_at, stored.created_at):
            assert value == datetime(2025, 6, 1, 10, 0, 0, 123000, tzinfo=UTC)
            assert value.utcoffset() == timedelta(0)
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and _aware_ms(thread.created_at) and _aware_ms(thread.updated_at)
