"""Semantic saves embed while their messages commit, and stage vectors only for what committed.

``Memory.save_messages`` queues each thread's upsert with the index actor as the save starts (the thread actor's
save, or the one transaction of a batch across threads), so the embedding overlaps the commit; the vectors become
searchable only after the commit succeeded. Every
test runs over HnswVectorStore and over PgVectorStore (the messages and their pending marks in SQLite, the vectors
in PostgreSQL).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from threadmind import Memory, Message
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import EmbedderError, ValidationError
from threadmind.stores import SQLiteStore
from threadmind.testing import actor_system

from ..stores.vectors._support import VectorFactory, vector_count, vector_rows
from ._support import BASE, PLAIN_LOOP, msg

_OPTIONS = {"semanticRecall": {"topK": 3, "messageRange": 0, "scope": "resource"}, "lastMessages": 2}


class _HeldStore(SQLiteStore):
    """SQLiteStore whose message saves wait for ``release`` while ``hold`` is set (a slow disk, on demand)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold = False
        self.release = anyio.Event()
        self.saves_done = 0

    async def save_messages(self, thread_id: str, messages: Sequence[Message], **kw: Any) -> list[Message]:
        if self.hold:
            await self.release.wait()
        saved = await super().save_messages(thread_id, messages, **kw)
        self.saves_done += 1
        return saved


class _WatchedEmbedder:
    """HashEmbedder that reports when it sees a text containing ``watch`` (and can be made to fail)."""

    def __init__(self, watch: str) -> None:
        self.inner = HashEmbedder(dim=64)
        self.watch = watch
        self.seen = anyio.Event()
        self.broken = False

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return 64

    async def embed(self, texts: list[str]) -> Embeddings:
        if any(self.watch in t for t in texts):
            self.seen.set()
        if self.broken:
            raise RuntimeError("embedding service unavailable")
        return await self.inner.embed(texts)


def _memory(store: SQLiteStore, make_vector: VectorFactory, tmp_path: Path, embedder: Any) -> Memory:
    return Memory(storage=store, vector=make_vector(tmp_path / "vec"), embedder=embedder, options=_OPTIONS)


async def _rows(memory: Memory, columns: str = "message_id, thread_id") -> list[tuple[Any, ...]]:
    """The stored vector rows (written behind for hnswlib: made durable first)."""
    index = actor_system(memory).index
    assert index is not None
    await index.flush()
    return await vector_rows(index.vector_store, memory.storage, columns)


async def _count(memory: Memory) -> int:
    index = actor_system(memory).index
    assert index is not None
    return await vector_count(index.vector_store, index.statistics().store)


async def _hit_ids(memory: Memory, text: str) -> list[str]:
    index = actor_system(memory).index  # the index itself: what is searchable right now, without waiting on the thread
    assert index is not None
    return [h.message_id for h in await index.query(text, top_k=5, resource_id="r1")]


@asynccontextmanager
async def _held(tmp_path: Path, make_vector: VectorFactory,
                watch: str) -> AsyncIterator[tuple[Memory, _HeldStore, _WatchedEmbedder]]:
    """A running Memory with thread t1 whose next message saves wait for ``store.release``."""
    store = _HeldStore(tmp_path / "m.db")
    embedder = _WatchedEmbedder(watch)
    async with _memory(store, make_vector, tmp_path, embedder) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        store.hold = True
        yield memory, store, embedder


async def test_embedding_overlaps_the_commit_and_vectors_appear_only_after_it(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    async with _held(tmp_path, make_vector, "volcano") as (memory, store, embedder):
        async with anyio.create_task_group() as tg:
            tg.start_soon(memory.save_messages, [msg("m1", text="the volcano erupted at dawn")])
            try:
                with anyio.fail_after(5):
                    await embedder.seen.wait()  # embedded while the commit is still held
                assert store.saves_done == 0
                await anyio.sleep(0.05)  # the batch has embedded and waits: give it every chance to stage early
                assert "m1" not in await _hit_ids(memory, "the volcano erupted at dawn")
            finally:
                store.release.set()
        assert store.saves_done == 1
        assert await _hit_ids(memory, "the volcano erupted at dawn") == ["m1"]  # read-your-writes on return


async def test_a_failed_save_leaves_no_vector_and_the_index_keeps_working(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    async with _memory(SQLiteStore(tmp_path / "m.db"), make_vector, tmp_path, HashEmbedder(dim=64)) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.create_thread(thread_id="t2", resource_id="r1")
        await memory.save_messages([msg("m1", "t1", text="alpine lakes in the summer")])
        # m1 belongs to t1: this t2 batch fails whole, after its texts were already queued for embedding
        with pytest.raises(ValidationError, match="already belongs"):
            await memory.save_messages([msg("m2", "t2", text="glacier crevasse rescue training"),
                                        msg("m1", "t2", text="moved text that must not be indexed")])
        assert "m2" not in await _hit_ids(memory, "glacier crevasse rescue training")
        hits = await actor_system(memory).index.query("moved text that must not be indexed", top_k=5,  # type: ignore[union-attr]
                                         resource_id="r1")
        assert [(h.message_id, h.thread_id) for h in hits] == [("m1", "t1")]
        stats = actor_system(memory).index.statistics()  # type: ignore[union-attr]
        assert await _count(memory) == 1 and stats.pending == 0
        await memory.save_messages([msg("m3", "t2", text="glacier crevasse rescue training")])
        assert (await _hit_ids(memory, "glacier crevasse rescue training"))[0] == "m3"
        assert await _rows(memory) == [("m1", "t1"), ("m3", "t2")]


class _HeldManyStore(SQLiteStore):
    """SQLiteStore whose saves across threads wait for ``release`` while ``hold`` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold = False
        self.release = anyio.Event()
        self.saves_done = 0

    async def save_messages_many(self, by_thread: Any, **kw: Any) -> dict[str, list[Message]]:
        if self.hold:
            await self.release.wait()
        saved = await super().save_messages_many(by_thread, **kw)
        self.saves_done += 1
        return saved


async def test_a_batch_across_threads_embeds_while_it_commits_and_is_searchable_on_return(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    """As a single thread's save: every part is embedded while the one transaction commits, nothing is
    searchable before it has, and everything is on return."""
    store = _HeldManyStore(tmp_path / "m.db")
    embedder = _WatchedEmbedder("volcano")
    async with _memory(store, make_vector, tmp_path, embedder) as memory:
        for thread_id in ("t1", "t2"):
            await memory.create_thread(thread_id=thread_id, resource_id="r1")
        store.hold = True
        batch = [msg("m1", "t1", text="the volcano erupted at dawn"), msg("m2", "t2", text="lava reached the sea")]
        async with anyio.create_task_group() as tg:
            tg.start_soon(memory.save_messages, batch)
            try:
                with anyio.fail_after(5):
                    await embedder.seen.wait()  # embedded while the commit is still held
                assert store.saves_done == 0
                await anyio.sleep(0.05)
                assert await _hit_ids(memory, "the volcano erupted at dawn") == []
            finally:
                store.release.set()
        assert store.saves_done == 1
        assert (await _hit_ids(memory, "the volcano erupted at dawn"))[0] == "m1"
        assert (await _hit_ids(memory, "lava reached the sea"))[0] == "m2"
        assert sorted(await _rows(memory)) == [("m1", "t1"), ("m2", "t2")]


async def test_a_failed_batch_across_threads_leaves_no_vector_of_any_part(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    async with _memory(SQLiteStore(tmp_path / "m.db"), make_vector, tmp_path, HashEmbedder(dim=64)) as memory:
        for thread_id in ("t1", "t2", "t3"):
            await memory.create_thread(thread_id=thread_id, resource_id="r1")
        await memory.save_messages([msg("m1", "t1", text="alpine lakes in the summer")])
        # m1 belongs to t1: the batch fails whole, after every part's texts were queued for embedding
        with pytest.raises(ValidationError, match="already belongs"):
            await memory.save_messages([msg("m2", "t2", text="glacier crevasse rescue training"),
                                        msg("m1", "t3", text="moved text that must not be indexed")])
        assert "m2" not in await _hit_ids(memory, "glacier crevasse rescue training")
        assert [h for h in await _hit_ids(memory, "moved text that must not be indexed") if h != "m1"] == []
        stats = actor_system(memory).index.statistics()  # type: ignore[union-attr]
        assert await _count(memory) == 1 and stats.pending == 0
        await memory.save_messages([msg("m2", "t2", text="glacier crevasse rescue training"),
                                    msg("m4", "t3", text="a quiet harbour at night")])
        assert (await _hit_ids(memory, "glacier crevasse rescue training"))[0] == "m2"
        assert sorted(await _rows(memory)) == [("m1", "t1"), ("m2", "t2"), ("m4", "t3")]


async def test_a_resaved_message_keeps_its_stored_created_at_in_the_vector_row(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    async with _memory(SQLiteStore(tmp_path / "m.db"), make_vector, tmp_path, HashEmbedder(dim=64)) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        await memory.save_messages([msg("m1", text="first words", ms=0)])
        result = await memory.save_messages([msg("m1", text="second words", created_at=BASE + timedelta(days=1))])
        assert result.messages[0].created_at == BASE  # the store keeps the first createdAt
        assert await _hit_ids(memory, "second words") == ["m1"]
        assert await _rows(memory, "message_id, created_at") == [("m1", "2025-03-01T09:00:00.000Z")]


async def test_an_embedder_failure_still_raises_after_the_messages_are_saved(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    embedder = _WatchedEmbedder("never")
    async with _memory(SQLiteStore(tmp_path / "m.db"), make_vector, tmp_path, embedder) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        embedder.broken = True
        with pytest.raises(EmbedderError):
            await memory.save_messages([msg("m1", text="saved even though the embedder is down")])
        assert [m.id for m in (await memory.recall("t1")).messages] == ["m1"]
        assert actor_system(memory).index.statistics().pending == 1  # type: ignore[union-attr]
        embedder.broken = False
        assert await memory.reindex() == 1
        assert await _hit_ids(memory, "saved even though the embedder is down") == ["m1"]


@PLAIN_LOOP
async def test_concurrent_resaves_of_one_message_index_the_text_stored_last(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    async with _memory(SQLiteStore(tmp_path / "m.db"), make_vector, tmp_path, HashEmbedder(dim=64)) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        texts = [f"version {i} of the travel plan with {i * 7919 % 1000} unique words" for i in range(100)]
        async with anyio.create_task_group() as tg:
            for text in texts:
                tg.start_soon(memory.save_messages, [msg("m1", text=text)])
        stored = (await memory.recall("t1")).messages[0].content.parts[0].text  # type: ignore[union-attr]
        index = actor_system(memory).index
        assert index is not None
        hits = await index.query(stored, top_k=1, resource_id="r1")
        assert hits[0].message_id == "m1" and hits[0].score > 0.999  # the vector is the stored text's
        assert await _count(memory) == 1


async def test_a_caller_cancelled_mid_commit_leaves_the_save_whole_and_indexed(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    async with _held(tmp_path, make_vector, "harbour") as (memory, store, embedder):
        async with anyio.create_task_group() as tg:
            tg.start_soon(memory.save_messages, [msg("m1", text="the harbour lights at night"),
                                                 msg("m2", text="fishing boats return to the harbour", ms=1)])
            try:
                with anyio.fail_after(5):
                    await embedder.seen.wait()
                tg.cancel_scope.cancel()  # the caller goes away while its save is committing
            finally:
                store.release.set()
        store.hold = False
        # The started save ran to completion in the thread actor, whole, and its vectors were staged.
        assert [m.id for m in (await memory.recall("t1")).messages] == ["m1", "m2"]
        await memory.save_messages([msg("m3", text="a lighthouse keeper's diary", ms=2)])
        assert (await _hit_ids(memory, "fishing boats return to the harbour"))[0] == "m2"
        assert (await _hit_ids(memory, "a lighthouse keeper's diary"))[0] == "m3"
        index = actor_system(memory).index
        assert index is not None
        await index.flush()
        assert await _count(memory) == 3 and index.statistics().pending == 0


async def test_a_batch_across_threads_is_indexed_whole_and_marked_pending_in_its_transaction(
        tmp_path: Path, make_vector: VectorFactory) -> None:
    async with _memory(SQLiteStore(tmp_path / "m.db"), make_vector, tmp_path, HashEmbedder(dim=64)) as memory:
        for tid in ("t1", "t2"):
            await memory.create_thread(thread_id=tid, resource_id="r1")
        await memory.save_messages([msg("a", "t1", text="alpine lakes in the summer"),
                                    msg("b", "t2", text="glacier crevasse rescue training")])
        assert (await _hit_ids(memory, "alpine lakes in the summer"))[0] == "a"
        assert (await _hit_ids(memory, "glacier crevasse rescue training"))[0] == "b"
        stats = actor_system(memory).index.statistics()  # type: ignore[union-attr]
        assert await _count(memory) == 2 and stats.pending == 0
        assert await _rows(memory) == [("a", "t1"), ("b", "t2")]
    with sqlite3.connect(tmp_path / "m.db") as conn:  # the marks the save made with its messages are cleared
        marks = conn.execute("SELECT count(*) FROM threadmind_vector_pending").fetchone()[0]
    assert marks == 0
