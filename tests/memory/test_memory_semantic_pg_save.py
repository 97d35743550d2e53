"""With ``PostgresStore`` and ``PgVectorStore`` on one database, ``Memory.save_messages`` writes the vectors in the
save's own statement: embedded first, committed with the messages or not at all, searchable in every process when
the save returns, with no batch write after it and no pending mark. Where that cannot hold (an upsert of the same
message still queued, an embedder failure), the save falls back to the commit-gated batch path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import pytest

try:
    import asyncpg
except ImportError:  # the pg_cluster fixture skips these tests (fails them in CI) with the install hint
    asyncpg = None

from threadmind import Memory
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import EmbedderError, MessageIdTaken, ThreadNotFound
from threadmind.stores import PgVectorStore, PostgresStore
from threadmind.testing import actor_system

from ._support import BASE, msg

DIM = 32
_OPTIONS = {"semanticRecall": {"topK": 3, "messageRange": 0, "scope": "resource"}, "lastMessages": 2}


class _Embedder:
    """HashEmbedder that can be made to fail, counting its calls."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=DIM)
        self.broken = False
        self.calls = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return DIM

    async def embed(self, texts: list[str]) -> Embeddings:
        self.calls += 1
        if self.broken:
            raise RuntimeError("embedding service unavailable")
        return await self.inner.embed(texts)


@pytest.fixture
def embedder() -> _Embedder:
    return _Embedder()


@pytest.fixture
async def memory(pg_dsn: str, embedder: _Embedder) -> AsyncIterator[Memory]:
    async with Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn), embedder=embedder,
                      options=_OPTIONS) as memory:
        for thread_id in ("t1", "t2", "t3"):
            await memory.create_thread(thread_id=thread_id, resource_id="r1")
        yield memory


async def _sql(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


async def _vector_rows(dsn: str) -> list[tuple[Any, ...]]:
    return await _sql(dsn, "SELECT vector_id, metadata->>'message_id', metadata->>'thread_id', "
                           "metadata->>'created_at', metadata->>'role' FROM memory_messages_32 ORDER BY 1")


async def _marks(dsn: str) -> int:
    return int((await _sql(dsn, "SELECT count(*) FROM threadmind_vector_pending"))[0][0])


async def _hit_ids(memory: Memory, text: str) -> list[str]:
    index = actor_system(memory).index
    assert index is not None
    return [h.message_id for h in await index.query(text, top_k=5, resource_id="r1")]


def _batches(memory: Memory) -> int:
    index = actor_system(memory).index
    assert index is not None
    return index.statistics().batches


async def test_a_save_commits_its_vectors_in_its_own_statement(memory: Memory, pg_dsn: str) -> None:
    await memory.save_messages([msg("m1", text="booking a flight to tokyo in spring"),
                                msg("m2", text="my grandmother's lasagna recipe", ms=1, role="assistant")])
    # Searchable when the save returns, by this process and by a connection of its own (another process's view).
    assert (await _hit_ids(memory, "booking a flight to tokyo in spring"))[0] == "m1"
    assert await _vector_rows(pg_dsn) == [
        ("m1", "m1", "t1", "2025-03-01T09:00:00.000Z", "user"),
        ("m2", "m2", "t1", "2025-03-01T09:00:00.001Z", "assistant")]
    assert _batches(memory) == 0 and await _marks(pg_dsn) == 0  # no write after the commit, nothing owed
    # The same bytes as the batch path writes: the embedder's values.
    stored = await _sql(pg_dsn, "SELECT embedding::text FROM memory_messages_32 WHERE vector_id = 'm1'")
    expected = (await HashEmbedder(dim=DIM).embed(["booking a flight to tokyo in spring"])).vectors[0]
    assert [float(x) for x in stored[0][0].strip("[]").split(",")] == pytest.approx(expected.tolist(), abs=1e-6)


async def test_a_resave_replaces_the_vectors_and_keeps_the_stored_created_at(memory: Memory, pg_dsn: str) -> None:
    await memory.save_messages([msg("m1", text="first words", ms=0)])
    long_text = " ".join(f"word{i}" for i in range(4000))  # over 16 384 characters: three chunks
    result = await memory.save_messages([msg("m1", text=long_text, created_at=BASE + timedelta(days=1))])
    assert result.messages[0].created_at == BASE  # the store keeps the first createdAt, and so does each row
    assert await _vector_rows(pg_dsn) == [(f"m1#{i}", "m1", "t1", "2025-03-01T09:00:00.000Z", "user")
                                          for i in range(3)]
    await memory.save_messages([msg("m1", text="short again")])
    assert [row[0] for row in await _vector_rows(pg_dsn)] == ["m1"]
    assert await _hit_ids(memory, "short again") == ["m1"]
    assert _batches(memory) == 0


async def test_a_refused_save_leaves_no_vector(memory: Memory, pg_dsn: str) -> None:
    await memory.save_messages([msg("m1", "t1", text="alpine lakes in the summer")])
    with pytest.raises(MessageIdTaken):  # m1 is t1's: the batch fails whole
        await memory.save_messages([msg("m2", "t2", text="glacier crevasse rescue training"),
                                    msg("m1", "t3", text="moved text that must not be indexed")])
    with pytest.raises(ThreadNotFound):
        await memory.save_messages([msg("m3", "nope", text="a thread that does not exist")])
    assert [row[1] for row in await _vector_rows(pg_dsn)] == ["m1"]
    assert await _marks(pg_dsn) == 0
    await memory.save_messages([msg("m2", "t2", text="glacier crevasse rescue training"),
                                msg("m4", "t3", text="a quiet harbour at night")])
    assert sorted((row[1], row[2]) for row in await _vector_rows(pg_dsn)) == [("m1", "t1"), ("m2", "t2"),
                                                                                ("m4", "t3")]
    assert (await _hit_ids(memory, "glacier crevasse rescue training"))[0] == "m2"
    assert _batches(memory) == 0


async def test_an_embedder_outage_saves_the_messages_and_leaves_them_pending(memory: Memory, pg_dsn: str,
                                                                            embedder: _Embedder) -> None:
    await memory.save_messages([msg("m0", text="the index is selected by a first save")])
    embedder.broken = True
    with pytest.raises(EmbedderError):
        await memory.save_messages([msg("m1", text="saved even though the embedder is down", ms=1)])
    assert [m.id for m in (await memory.recall("t1")).messages] == ["m0", "m1"]
    assert await _marks(pg_dsn) == 1 and [row[1] for row in await _vector_rows(pg_dsn)] == ["m0"]
    embedder.broken = False
    assert await memory.reindex() == 1
    assert (await _hit_ids(memory, "saved even though the embedder is down"))[0] == "m1"
    assert await _marks(pg_dsn) == 0


async def test_concurrent_resaves_of_one_message_index_the_text_stored_last(memory: Memory) -> None:
    texts = [f"version {i} of the travel plan with {i * 7919 % 1000} unique words" for i in range(40)]
    async with anyio.create_task_group() as tg:
        for text in texts:
            tg.start_soon(memory.save_messages, [msg("m1", text=text)])
    stored = (await memory.recall("t1")).messages[0].content.parts[0].text  # type: ignore[union-attr]
    index = actor_system(memory).index
    assert index is not None
    hits = await index.query(stored, top_k=1, resource_id="r1")
    assert hits[0].message_id == "m1" and hits[0].score > 0.999  # the vector is the stored text's


async def test_a_message_whose_upsert_is_still_queued_goes_the_batch_path(memory: Memory, pg_dsn: str) -> None:
    index = actor_system(memory).index
    assert index is not None
    first = index.upsert_on_commit([msg("m1", text="an agent turn's reply, still committing")])
    assert await first.started() is None  # queued (an agent turn's save does not embed first)
    second = index.upsert_on_commit([msg("m1", text="the same message saved again")])
    await second.prepare()
    assert await second.started() is None  # m1 is queued: its vectors must follow the queued write
    other = index.upsert_on_commit([msg("m2", text="another message")])
    await other.prepare()
    assert await other.started() is not None  # nothing of m2 is queued: the save may write its rows
    other.finished(None)  # (that save failed: nothing to wait for)
    async with PostgresStore(pg_dsn) as store:  # the two saves commit (a committed save's message is stored)
        await store.save_messages("t1", [msg("m1", text="the same message saved again")])
    first.finished([msg("m1", text="an agent turn's reply, still committing")])
    second.finished([msg("m1", text="the same message saved again")])
    await first.result()
    await second.result()
    hits = await index.query("the same message saved again", top_k=1, resource_id="r1")
    assert hits[0].message_id == "m1" and hits[0].score > 0.999  # the later save's text won
    third = index.upsert_on_commit([msg("m1", text="m1 once nothing of it is queued")])
    await third.prepare()
    assert await third.started() is not None
    third.finished(None)


async def test_a_batch_across_threads_writes_some_parts_itself_and_queues_the_others(memory: Memory,
                                                                                     pg_dsn: str) -> None:
    index = actor_system(memory).index
    assert index is not None
    await memory.save_messages([msg("m0", "t3", text="the index is selected by a first save")])
    queued = index.upsert_on_commit([msg("m1", "t1", text="an agent turn's reply, still committing")])
    assert await queued.started() is None
    told = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(memory.save_messages, [msg("m1", "t1", text="the reply as saved again"),
                                                 msg("m2", "t2", text="a part nothing of which is queued")])
            with anyio.fail_after(10):  # t2's part commits with its vectors; t1's waits for the queued write
                while sorted(row[1] for row in await _vector_rows(pg_dsn)) != ["m0", "m2"]:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert await _marks(pg_dsn) == 1  # t1's part is owed its vectors, t2's is not
            queued.finished([msg("m1", "t1", text="an agent turn's reply, still committing")])
            told = True
    finally:
        if not told:  # a failed assertion must not leave the index waiting on it
            queued.finished(None)
    assert sorted(row[1] for row in await _vector_rows(pg_dsn)) == ["m0", "m1", "m2"]
    hits = await index.query("the reply as saved again", top_k=1, resource_id="r1")
    assert hits[0].message_id == "m1" and hits[0].score > 0.999
    assert await _marks(pg_dsn) == 0


_SAVER = """
import sys, anyio
from datetime import UTC, datetime, timedelta
from threadmind import Memory, Message
from threadmind.embedders import HashEmbedder
from threadmind.stores import PgVectorStore, PostgresStore

async def main() -> None:
    dsn = sys.argv[1]
    base = datetime(2025, 1, 1, tzinfo=UTC)
    async with Memory(storage=PostgresStore(dsn), vector=PgVectorStore(dsn), embedder=HashEmbedder(dim=32),
                      options={"semanticRecall": {"topK": 2, "scope": "resource"}}) as memory:
        await memory.create_thread(thread_id="t1", resource_id="r1")
        batch = 0
        while True:
            await memory.save_messages([Message.user(f"note {batch} part {j} about harbour {batch * 7 + j}",
                                                     id=f"b{batch:06d}-{j}", thread_id="t1", resource_id="r1",
                                                     created_at=base + timedelta(milliseconds=batch))
                                        for j in range(2)])
            print(f"ack {batch}", flush=True)
            batch += 1

anyio.run(main)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
async def test_sigkill_leaves_every_acknowledged_save_with_its_vectors_and_none_half_written(pg_dsn: str) -> None:
    acked: set[int] = set()
    async with await anyio.open_process([sys.executable, "-c", _SAVER, pg_dsn], stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        buffer = b""
        with anyio.fail_after(60):
            while len(acked) < 60:
                buffer += await proc.stdout.receive()
                *lines, buffer = buffer.split(b"\n")
                acked.update(int(line.split()[1]) for line in lines if line.startswith(b"ack "))
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: the next save is in flight
        await proc.wait()
        async for chunk in proc.stdout:  # acknowledgements already in the pipe count too
            buffer += chunk
        acked.update(int(line.split()[1]) for line in buffer.split(b"\n") if line.startswith(b"ack "))
    assert proc.returncode == -signal.SIGKILL
    # One statement, one snapshot: the killed client's statement in flight may still commit on the server meanwhile.
    (ids, vector_ids, marks), = await _sql(pg_dsn, "SELECT ARRAY(SELECT id FROM mastra_messages), "
                                                   "ARRAY(SELECT vector_id FROM memory_messages_32), "
                                                   "(SELECT count(*) FROM threadmind_vector_pending)")
    messages, vectors = set(ids), set(vector_ids)
    assert marks == 0  # nothing owed: every stored message has its vectors
    assert vectors == messages  # a save's messages and vectors commit together or not at all
    for batch in acked:
        assert {f"b{batch:06d}-0", f"b{batch:06d}-1"} <= messages, f"acknowledged save {batch} lost"
    assert max(int(mid[1:7]) for mid in messages) <= max(acked) + 1  # at most the save in flight beyond
