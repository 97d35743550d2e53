"""``Memory.recall``: history windows, paging, include windows, date ranges, ownership and token budgets."""

from __future__ import annotations

from datetime import timedelta

import pytest

from threadmind import Memory
from threadmind.errors import ResourceMismatch, ThreadNotFound, ValidationError
from threadmind.stores import InMemoryStore
from threadmind.tokens import DefaultTokenCounter

from ._support import BASE, StoreFactory, msg


async def _thread_of(memory: Memory, n: int, thread_id: str = "t1") -> list[str]:
    await memory.create_thread(resource_id="r1", thread_id=thread_id)
    ids = [f"{thread_id}-{i:02d}" for i in range(n)]
    await memory.save_messages([msg(mid, thread_id, ms=i, role="assistant" if i % 2 else "user")
                                for i, mid in enumerate(ids)])
    return ids


class _CountingStore(InMemoryStore):
    """An in-memory store that counts message reads (to prove a path never touches storage)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def list_messages(self, query):  # type: ignore[no-untyped-def]
        self.reads += 1
        return await super().list_messages(query)

    async def get_thread(self, thread_id):  # type: ignore[no-untyped-def]
        self.reads += 1
        return await super().get_thread(thread_id)


class TestWindows:
    async def test_default_window_is_last_10_chronological(self, memory: Memory) -> None:
        ids = await _thread_of(memory, 25)
        result = await memory.recall("t1")
        assert [m.id for m in result.messages] == ids[-10:]
        assert (result.total, result.per_page, result.has_more, result.degraded) == (25, 10, True, False)

    async def test_last_messages_option(self, make_store: StoreFactory) -> None:
        async with Memory(storage=make_store(), options={"lastMessages": 3}) as memory:
            ids = await _thread_of(memory, 8)
            assert [m.id for m in (await memory.recall("t1")).messages] == ids[-3:]
            override = await memory.recall("t1", thread_config={"lastMessages": 5})
            assert [m.id for m in override.messages] == ids[-5:]

    async def test_paging_and_direction(self, memory: Memory) -> None:
        ids = await _thread_of(memory, 12)
        asc = await memory.recall("t1", per_page=5, page=1, direction="ASC")
        assert [m.id for m in asc.messages] == ids[5:10] and asc.has_more and asc.page == 1
        desc = await memory.recall("t1", per_page=5, page=0, direction="DESC")
        assert [m.id for m in desc.messages] == ids[::-1][:5]
        last = await memory.recall("t1", per_page=5, page=2, direction="ASC")
        assert [m.id for m in last.messages] == ids[10:] and not last.has_more
        newest = await memory.recall("t1", per_page=4)  # no direction: newest page, chronological
        assert [m.id for m in newest.messages] == ids[-4:]
        everything = await memory.recall("t1", per_page=False)
        assert [m.id for m in everything.messages] == ids and not everything.has_more
        backwards = await memory.recall("t1", per_page=False, direction="DESC")
        assert [m.id for m in backwards.messages] == ids[::-1]

    async def test_include_windows(self, memory: Memory) -> None:
        ids = await _thread_of(memory, 20)
        await _thread_of(memory, 5, "t2")
        result = await memory.recall("t1", per_page=0, include=[
            {"id": ids[5], "with_previous_messages": 2, "with_next_messages": 1},
            {"id": "t2-02", "withPreviousMessages": 1},
            {"id": "unknown", "with_next_messages": 3},
        ])
        assert [m.id for m in result.messages] == ["t2-01", "t2-02", *ids[3:7]] or \
            [m.id for m in result.messages] == [*ids[3:7], "t2-01", "t2-02"]
        assert set(m.id for m in result.messages) == {*ids[3:7], "t2-01", "t2-02"}
        merged = await memory.recall("t1", per_page=3, include=[{"id": ids[0], "with_next_messages": 1}])
        assert [m.id for m in merged.messages] == [ids[0], ids[1], *ids[-3:]]
        with pytest.raises(ValidationError, match=r"include\[0\]"):
            await memory.recall("t1", include=[{"with_next_messages": 1}])
        with pytest.raises(ValidationError, match="with_next_messages"):
            await memory.recall("t1", include=[{"id": ids[0], "with_next_messages": -1}])

    async def test_date_range(self, memory: Memory) -> None:
        ids = await _thread_of(memory, 10)
        start, end = BASE + timedelta(milliseconds=2), BASE + timedelta(milliseconds=6)
        inclusive = await memory.recall("t1", per_page=False, date_range={"start": start, "end": end})
        assert [m.id for m in inclusive.messages] == ids[2:7]
        exclusive = await memory.recall("t1", per_page=False, date_range={
            "start": start, "end": end, "start_exclusive": True, "end_exclusive": True})
        assert [m.id for m in exclusive.messages] == ids[3:6]
        open_end = await memory.recall("t1", per_page=False, date_range={"start": end, "end": None})
        assert [m.id for m in open_end.messages] == ids[6:]
        with pytest.raises(ValidationError, match="date_range"):
            await memory.recall("t1", date_range={"from": start})
        with pytest.raises(ValidationError, match="date_range.start"):
            await memory.recall("t1", date_range={"start": "2025-01-01"})

    async def test_last_messages_false_is_empty_without_storage(self) -> None:
        store = _CountingStore()
        async with Memory(storage=store, options={"lastMessages": False}) as memory:
            result = await memory.recall("never-created", resource_id="someone")
            assert result.messages == [] and result.total == 0 and result.per_page == 0 and not result.has_more
            assert store.reads == 0
        async with Memory(storage=_CountingStore(), options={"messageHistory": {"maxTokens": 0}}) as memory:
            assert (await memory.recall("never-created")).messages == []

    async def test_system_messages_hidden(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        reminder = msg("rem", ms=1, text="<system-reminder>be nice</system-reminder>")
        await memory.save_messages([msg("a", ms=0), reminder, msg("b", ms=2)])
        assert [m.id for m in (await memory.recall("t1")).messages] == ["a", "b"]


class TestOwnership:
    async def test_missing_thread_with_resource(self, memory: Memory) -> None:
        with pytest.raises(ThreadNotFound, match="^No thread found with id nope$"):
            await memory.recall("nope", resource_id="r1")

    async def test_other_resource(self, memory: Memory) -> None:
        await _thread_of(memory, 3)
        with pytest.raises(ResourceMismatch) as info:
            await memory.recall("t1", resource_id="r2")
        assert info.value.message == "Thread with id t1 is for resource with id r1 but resource r2 was queried."
        assert [m.id for m in (await memory.recall("t1", resource_id="r1")).messages] == ["t1-00", "t1-01", "t1-02"]

    async def test_the_owner_check_follows_moves_and_deletes_at_once(self, memory: Memory) -> None:
        """The check uses the thread actor's row; a move or delete through Memory must never leave it stale."""
        await _thread_of(memory, 3)
        assert len((await memory.recall("t1", resource_id="r1", per_page=False)).messages) == 3  # row cached
        await memory.update_thread_resource_id("t1", resource_id="r2")
        with pytest.raises(ResourceMismatch):
            await memory.recall("t1", resource_id="r1", per_page=False)
        assert len((await memory.recall("t1", resource_id="r2", per_page=False)).messages) == 3
        await memory.delete_thread("t1")
        with pytest.raises(ThreadNotFound):
            await memory.recall("t1", resource_id="r2", per_page=False)
        await memory.create_thread(resource_id="r3", thread_id="t1")
        assert (await memory.recall("t1", resource_id="r3", per_page=False)).messages == []

    async def test_missing_thread_without_resource_is_empty(self, memory: Memory) -> None:
        result = await memory.recall("nope")
        assert result.messages == [] and result.total == 0

    @pytest.mark.parametrize(
        ("kwargs", "code"),
        [
            pytest.param({"thread_id": ""}, "MASTRA_STORAGE_LIBSQL_LIST_MESSAGES_INVALID_THREAD_ID", id="thread"),
            pytest.param({"page": -1}, "MASTRA_STORAGE_LIBSQL_LIST_MESSAGES_INVALID_PAGE", id="page"),
            pytest.param({"per_page": -2}, None, id="per-page"),
            pytest.param({"per_page": True}, None, id="per-page-true"),
            pytest.param({"direction": "UP"}, None, id="direction"),
            pytest.param({"resource_id": ""}, None, id="resource"),
        ],
    )
    async def test_bad_arguments(self, memory: Memory, kwargs: dict[str, object], code: str | None) -> None:
        args: dict[str, object] = {"thread_id": "t1", **kwargs}
        thread_id = args.pop("thread_id")
        with pytest.raises(ValidationError) as info:
            await memory.recall(thread_id, **args)  # type: ignore[arg-type]
        if code is not None:
            assert info.value.code == code


class TestTokenBudget:
    async def test_keeps_newest_that_fit(self, make_store: StoreFactory) -> None:
        async with Memory(storage=make_store(), options={"messageHistory": {"maxTokens": 200}}) as memory:
            await memory.create_thread(resource_id="r1", thread_id="t1")
            words = " ".join(["lorem"] * 30)
            ids = [f"m{i:02d}" for i in range(30)]
            await memory.save_messages([msg(mid, ms=i, text=f"{i} {words}") for i, mid in enumerate(ids)])
            result = await memory.recall("t1")
            got = [m.id for m in result.messages]
            assert 0 < len(got) < 30
            assert got == ids[-len(got):]  # a suffix: the newest ones, chronological
            # reference §3.4: 24 + kept tokens <= maxTokens - atMaxRemoveTokens (200 - 25 %)
            counter = DefaultTokenCounter()
            kept = sum(counter.count_message(m) for m in result.messages)
            older = counter.count_message(next(m for m in await memory.list_messages_by_id([ids[-len(got) - 1]])))
            assert 24 + kept <= 150 < 24 + kept + older
            # the default count cap of 10 was dropped by the token budget
            small = " ".join(["a"] * 2)
            await memory.create_thread(resource_id="r1", thread_id="t2")
            await memory.save_messages([msg(f"s{i:02d}", "t2", ms=i, text=small) for i in range(12)])
            assert len((await memory.recall("t2")).messages) == 12

    async def test_explicit_count_cap_still_applies(self, make_store: StoreFactory) -> None:
        options = {"lastMessages": 4, "messageHistory": {"maxTokens": 10_000}}
        async with Memory(storage=make_store(), options=options) as memory:
            ids = await _thread_of(memory, 12)
            assert [m.id for m in (await memory.recall("t1")).messages] == ids[-4:]


class TestReferenceRecallRules:
    """Reference §1.1 steps 2 and 3, §6.2 for the query, and §1's save result order."""

    async def test_history_disabled_without_per_page_returns_nothing_even_with_include(
        self, make_store: StoreFactory
    ) -> None:
        for options in ({"lastMessages": False}, {"lastMessages": 0}, {"messageHistory": {"maxTokens": 0}}):
            async with Memory(storage=make_store(), options=options) as memory:
                await memory.create_thread(resource_id="r1", thread_id="t1")
                await memory.save_messages([msg("m1", ms=1), msg("m2", ms=2)])
                result = await memory.recall("t1", include=[{"id": "m1"}])
                assert (result.messages, result.total, result.per_page) == ([], 0, 0)
                paged = await memory.recall("t1", per_page=0, include=[{"id": "m1"}])  # asked for: served
                assert [m.id for m in paged.messages] == ["m1"]

    async def test_resource_scoped_semantic_recall_tolerates_a_missing_thread(self, make_store: StoreFactory) -> None:
        from threadmind.embedders import HashEmbedder
        from threadmind.errors import ThreadNotFound
        from threadmind.stores import HnswVectorStore

        async with Memory(storage=make_store(), vector=HnswVectorStore(), embedder=HashEmbedder(dim=32),
                          options={"semanticRecall": True}) as memory:
            for kwargs in ({}, {"per_page": 5}, {"vector_search_string": "hello"}):
                result = await memory.recall("not-yet", resource_id="r1", **kwargs)
                assert result.messages == [] and result.total == 0
        async with Memory(storage=make_store(), vector=HnswVectorStore(), embedder=HashEmbedder(dim=32),
                          options={"semanticRecall": {"scope": "thread"}}) as memory:
            with pytest.raises(ThreadNotFound, match="No thread found with id not-yet"):
                await memory.recall("not-yet", resource_id="r1")

    async def test_the_query_is_normalised_like_stored_text(self, make_store: StoreFactory) -> None:
        from threadmind.embedders import HashEmbedder
        from threadmind.stores import HnswVectorStore

        options = {"lastMessages": 1, "semanticRecall": {"topK": 1, "messageRange": 0, "threshold": 0.9}}
        async with Memory(storage=make_store(), vector=HnswVectorStore(), embedder=HashEmbedder(dim=64),
                          options=options) as memory:
            await memory.create_thread(resource_id="r1", thread_id="t1")
            await memory.save_messages([msg("a", ms=1, text="zebra crossing stripes"), msg("b", ms=2, text="x")])
            for query in ("zebra crossing stripes", "  zebra   crossing\nstripes"):
                result = await memory.recall("t1", resource_id="r1", vector_search_string=query)
                assert "a" in [m.id for m in result.messages], query

    async def test_save_returns_messages_in_created_at_order(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        result = await memory.save_messages([msg("late", ms=10_000), msg("early", ms=1_000), msg("tie", ms=1_000)])
        assert [m.id for m in result.messages] == ["early", "tie", "late"]

    async def test_a_reminder_is_hidden_by_its_first_text_part(self, memory: Memory) -> None:
        from threadmind import FilePart, Message, MessageContent, TextPart

        await memory.create_thread(resource_id="r1", thread_id="t1")
        content = MessageContent(parts=[FilePart(data="aGk=", mime_type="text/plain"),
                                        TextPart(text="<system-reminder>be brief</system-reminder>")])
        reminder = Message("rem", "user", content, BASE, thread_id="t1", resource_id="r1")
        await memory.save_messages([reminder, msg("m1", ms=5)])
        assert [m.id for m in (await memory.recall("t1")).messages] == ["m1"]
