"""Semantic saves that write their vectors in the save's statement (``PgVectorStore`` beside ``PostgresStore``) embed
before they commit; concurrent ones share embedder calls (``actors/_shared_embeds``) instead of making one each,
and a text the embedder refuses still fails only its own save's vectors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from threadmind import Memory, Message
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import EmbedderError
from threadmind.stores import PgVectorStore, PostgresStore
from threadmind.stores._postgres._pool import import_asyncpg

BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


class SlowEmbedder:
    """A remote embedder's shape: each call takes 20 ms; calls holding a ``poison`` text fail; calls are counted."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=32)
        self.calls: list[list[str]] = []
        self.poison: set[str] = set()
        self.usage_per_call = 100

    @property
    def model_id(self) -> str:
        return "slow-hash"

    @property
    def dimension(self) -> int | None:
        return self.inner.dimension

    async def embed(self, texts: list[str]) -> Embeddings:
        self.calls.append(list(texts))
        await anyio.sleep(0.02)
        if self.poison.intersection(texts):
            raise RuntimeError("the service refuses this text")
        got = await self.inner.embed(texts)
        return Embeddings(vectors=got.vectors, usage_tokens=self.usage_per_call)


@pytest.fixture
async def setup(pg_dsn: str) -> AsyncIterator[tuple[Memory, SlowEmbedder, PgVectorStore]]:
    embedder = SlowEmbedder()
    vector = PgVectorStore(pg_dsn)
    options = {"lastMessages": 10, "semanticRecall": {"topK": 1, "messageRange": 0, "search": "vector"}}
    async with Memory(storage=PostgresStore(pg_dsn, max_size=8), vector=vector, embedder=embedder,
                      options=options) as memory:
        for t in range(24):
            await memory.create_thread(thread_id=f"s{t}", resource_id="u1")
        await memory.save_messages([say(0, "warm")])  # the index is selected; its embedder call is not counted
        embedder.calls.clear()
        yield memory, embedder, vector


def say(t: int, tag: str) -> Message:
    return Message.user(f"conversation {t} says {tag} topic{t}", id=f"s{t}-{tag}", thread_id=f"s{t}",
                        resource_id="u1", created_at=BASE + timedelta(seconds=t))


async def pending_ids(dsn: str) -> set[str]:
    conn = await import_asyncpg().connect(dsn)
    try:
        return {row[0] for row in await conn.fetch("SELECT message_id FROM threadmind_vector_pending")}
    finally:
        await conn.close()


async def test_concurrent_semantic_saves_share_embedder_calls(
        setup: tuple[Memory, SlowEmbedder, PgVectorStore]) -> None:
    memory, embedder, vector = setup
    async with anyio.create_task_group() as tg:
        for t in range(24):
            tg.start_soon(memory.save_messages, [say(t, "hello")])
    assert 2 <= len(embedder.calls) <= 6  # two at once, the others' texts together (24 calls before)
    assert sorted(text for call in embedder.calls for text in call) == sorted(
        say(t, "hello").text for t in range(24))  # each text embedded once
    stored = await vector.message_ids_with_vectors()
    assert {f"s{t}-hello" for t in range(24)} <= stored
    hits = await memory.search(say(17, "hello").text, resource_id="u1", top_k=1, search="vector")
    assert [hit.message.id for hit in hits] == ["s17-hello"]


async def test_a_refused_text_fails_only_its_own_saves_vectors(setup: tuple[Memory, SlowEmbedder, PgVectorStore],
                                                              pg_dsn: str) -> None:
    memory, embedder, vector = setup
    embedder.poison.add(say(5, "bad").text)
    saved: dict[int, object] = {}

    async def save(t: int) -> None:
        try:
            saved[t] = len((await memory.save_messages([say(t, "bad" if t == 5 else "fine")])).messages)
        except EmbedderError:
            saved[t] = "refused"

    async with anyio.create_task_group() as tg:
        for t in range(12):
            tg.start_soon(save, t)
    assert saved == {**dict.fromkeys(range(12), 1), 5: "refused"}  # the refused text's save says so, alone
    assert [m.id for m in (await memory.recall("s5", resource_id="u1")).messages] == ["s5-bad"]  # stored
    stored = await vector.message_ids_with_vectors()
    assert {f"s{t}-fine" for t in range(12) if t != 5} <= stored
    assert "s5-bad" not in stored
    assert "s5-bad" in await pending_ids(pg_dsn)  # owed its vectors, retried later
    # the shared call that held the refused text failed for all its callers, who then asked for their texts alone
    assert any(say(5, "bad").text in call and len(call) > 1 for call in embedder.calls)
