"""IndexActor with real SQLite and real hnswlib (or a real PostgreSQL with pgvector): scope isolation, batching,
failures, deletes, restarts. Tests taking ``make_vector`` run over both vector stores."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from threadmind.actors._index_actor import IndexActor, VectorHit
from threadmind.codecs import Message
from threadmind.errors import ConfigError, EmbedderError, EmbeddingDimensionMismatch, ValidationError
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._protocol import Store
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vectors import _hnsw_index, _hnsw_session, _hnsw_snapshot
from threadmind.stores._vectors._contract import VectorStore
from threadmind.stores._vectors._hnsw import HnswVectorStore

from ._support import FlakyEmbedder, VectorFactory, exact_top_k, make_message, persist, random_text, vector_count


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "memory.db", synchronous="NORMAL")
    await store.open()
    yield store
    await store.aclose()


@asynccontextmanager
async def running(
    store: Store, embedder: FlakyEmbedder, vector: VectorStore, **kwargs: Any
) -> AsyncIterator[IndexActor]:
    actor = IndexActor(store=store, vector=vector, embedder=embedder, retry_interval=None, **kwargs)
    async with actor:
        yield actor


async def _count(actor: IndexActor) -> int:
    return await vector_count(actor.vector_store, actor.statistics().store)


def _corpus(rng: random.Random, resources: int, threads: int, per_thread: tuple[int, int]) -> list[Message]:
    messages: list[Message] = []
    for r in range(resources):
        for t in range(threads):
            for _ in range(rng.randint(*per_thread)):
                n = len(messages)
                messages.append(make_message(f"m{n}", f"t{r}-{t}", f"r{r}", random_text(rng), n))
    return messages


class TestScopeIsolation:
    @pytest.mark.parametrize("brute_force_limit", [pytest.param(4096, id="exact"), pytest.param(0, id="hnsw")])
    async def test_random_queries_never_leave_their_scope(
        self, store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, brute_force_limit: int,
        make_vector: VectorFactory, vector_kind: str,
    ) -> None:
        """``hnsw``: resource scopes up to the limit scored exactly (0: always by the ANN structure)."""
        monkeypatch.setattr(_hnsw_index, "BRUTE_FORCE_LIMIT", brute_force_limit)
        rng = random.Random(7)
        messages = _corpus(rng, resources=30, threads=5, per_thread=(1, 6))
        embedder = FlakyEmbedder(dim=64)
        vectors = embedder.vectors([m.text for m in messages])
        async with running(store, embedder, make_vector(tmp_path / "vec", exact_limit=brute_force_limit)) as actor:
            half = len(messages) // 2
            await actor.upsert_messages(messages[:half])
            if vector_kind == "hnsw":
                assert await actor.flush() == half  # one half in HNSW, the other staged: both searched together
            await actor.upsert_messages(messages[half:])
            for q in range(200):
                target = rng.choice(messages)
                scope = "thread" if q % 2 else "resource"
                text = random_text(rng, 6)
                k = rng.randint(1, 8)
                hits = await actor.query(
                    text,
                    top_k=k,
                    thread_id=target.thread_id if scope == "thread" else None,
                    resource_id=target.resource_id if scope == "resource" else None,
                )
                key = "thread_id" if scope == "thread" else "resource_id"
                members = [i for i, m in enumerate(messages) if getattr(m, key) == getattr(target, key)]
                assert all(getattr(h, key) == getattr(target, key) for h in hits)
                assert len({h.message_id for h in hits}) == len(hits) == min(k, len(members))
                expected = exact_top_k(
                    embedder.vectors([text])[0], vectors[members], [messages[i].id for i in members], k
                )
                exact = brute_force_limit or scope == "thread" and vector_kind == "pgvector"
                if exact and vector_kind == "hnsw":  # exact path: identical ids and scores
                    assert [h.message_id for h in hits] == [e[0] for e in expected]
                    assert [h.score for h in hits] == pytest.approx([e[1] for e in expected], abs=1e-5)
                elif exact:  # the same scores; pgvector sums in float64, so messages tied in float32 may swap
                    assert [h.score for h in hits] == pytest.approx([e[1] for e in expected], abs=1e-5)
                    true = dict(exact_top_k(embedder.vectors([text])[0], vectors[members],
                                            [messages[i].id for i in members], len(members)))
                    assert [h.score for h in hits] == pytest.approx([true[h.message_id] for h in hits], abs=1e-5)
                else:  # HNSW path: the scores it reports are the true ones, best first
                    true = dict(exact_top_k(embedder.vectors([text])[0], vectors[members],
                                            [messages[i].id for i in members], len(members)))
                    assert [h.score for h in hits] == pytest.approx([true[h.message_id] for h in hits], abs=1e-4)
                    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            stats = actor.statistics()
            assert stats.queries == 200
            assert (stats.ann_queries > 0) == (brute_force_limit == 0)
            if vector_kind == "pgvector":  # threads are always exact; resources by HNSW when the limit is 0
                assert stats.brute_force_queries == 100 + (100 if brute_force_limit else 0)

    async def test_threshold_and_both_scopes(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        embedder = FlakyEmbedder()
        messages = [
            make_message("a", "t1", "r1", "paris hotel booking"),
            make_message("b", "t2", "r1", "paris hotel booking friday"),
            make_message("c", "t3", "r2", "paris hotel booking"),
        ]
        async with running(store, embedder, make_vector()) as actor:
            await actor.upsert_messages(messages)
            hits = await actor.query("paris hotel booking", top_k=5, resource_id="r1")
            assert [h.message_id for h in hits] == ["a", "b"] and hits[0].score == pytest.approx(1.0, abs=1e-5)
            assert [h.message_id for h in await actor.query("paris hotel booking", top_k=5, threshold=0.999)] in (
                ["a", "c"], ["c", "a"]
            )
            assert await actor.query("paris", top_k=5, resource_id="r1", thread_id="t3") == []
            assert await actor.query("paris", top_k=5, resource_id="nobody") == []
            assert await actor.query("   ", top_k=5) == []
            with pytest.raises(ValidationError, match="top_k"):
                await actor.query("paris", top_k=0)


class TestBatching:
    @pytest.mark.slow_variants("pgvector")  # the hnswlib variant stays in the default run
    async def test_600_concurrent_upserts_are_coalesced(self, store: SQLiteStore, tmp_path: Path,
                                                        make_vector: VectorFactory, vector_kind: str) -> None:
        """600 callers at once share at most one batch (and one embedder call) per 20 of them."""
        rng = random.Random(3)
        embedder = FlakyEmbedder(dim=32)
        messages = [
            make_message(f"m{t}-{k}", f"t{t}", f"r{t % 20}", random_text(rng), k) for t in range(60) for k in range(10)
        ]
        async with running(store, embedder, make_vector(tmp_path / "vec")) as actor:
            async with anyio.create_task_group() as tg:
                for message in messages:
                    tg.start_soon(actor.upsert_messages, [message])
            stats = actor.statistics()
            assert await _count(actor) == 600
            assert stats.add_items_calls <= 30 and stats.batches <= 30
            assert stats.embed_calls == stats.batches  # the dimension is known: no probe
        assert len(embedder.calls) < 30
        async with running(store, embedder, make_vector(tmp_path / "vec")) as actor:
            for message in rng.sample(messages, 50):
                hits = await actor.query(message.text, top_k=1, resource_id=message.resource_id)
                assert [h.message_id for h in hits] == [message.id]
            assert await _count(actor) == 600

    async def test_a_lone_caller_never_waits_for_the_linger(self, store: SQLiteStore,
                                                           make_vector: VectorFactory) -> None:
        """The linger only pays when several callers are in flight; one at a time, batches start at once."""
        embedder = FlakyEmbedder()
        async with running(store, embedder, make_vector(), linger=4.0) as actor:
            with anyio.fail_after(3):  # the first call alone would wait 4 s if a lone batch lingered
                for k in range(5):
                    await actor.upsert_messages([make_message(f"m{k}", "t1", "r1", f"text number {k}", k)])
            assert await _count(actor) == 5

    async def test_lone_writes_behind_share_the_next_commit(self, store: SQLiteStore) -> None:
        """Each upsert's write-behind rows ride in the next write's group: about one commit per upsert."""
        embedder = FlakyEmbedder()
        async with running(store, embedder, HnswVectorStore()) as actor:
            await persist(store, [make_message("m0", "t1", "r1", "warm up", 0)])
            await actor.upsert_messages([make_message("m0", "t1", "r1", "warm up", 0)])
            before = store.statistics().commits
            for k in range(1, 21):  # save, then index: what Memory does for a batch spanning threads
                message = make_message(f"m{k}", "t1", "r1", f"text number {k}", k)
                await store.save_messages("t1", [message])
                await actor.upsert_messages([message])
            commits = store.statistics().commits - before
        assert commits <= 30  # one per save plus a few deferrals that ran out; was one more per upsert (40)

    async def test_statistics_show_staged_vectors_and_memory(self, store: SQLiteStore) -> None:
        embedder = FlakyEmbedder()
        async with running(store, embedder, HnswVectorStore()) as actor:
            empty = actor.statistics()
            assert (empty.staged, empty.memory_bytes) == (0, 0)  # no index yet
            await actor.upsert_messages([make_message(f"m{k}", "t1", "r1", f"text {k}", k) for k in range(40)])
            staged = actor.statistics()
            assert staged.vectors == 40 and staged.staged == 40  # searchable, not yet in HNSW (index not quiet)
            assert staged.memory_bytes > 40 * 32 * 4
            assert await actor.flush() == 40
            flushed = actor.statistics()
            assert flushed.staged == 0 and flushed.add_items_calls >= 1
            # hnswlib holds them now, and the staged copies are gone: no vector is held twice
            assert flushed.store.ann_bytes > staged.store.ann_bytes
            assert flushed.memory_bytes < staged.memory_bytes

    async def test_read_your_writes_and_usage(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        embedder = FlakyEmbedder()
        async with running(store, embedder, make_vector()) as actor:
            message = make_message("m1", "t1", "r1", "x" * 40)
            assert await actor.upsert_messages([message]) == 10  # ceil(40 / 4) tokens
            assert [h.message_id for h in await actor.query("x" * 40, top_k=3)] == ["m1"]
            assert await actor.upsert_messages([message]) == 0  # cached text costs nothing
            assert await actor.upsert_messages([make_message("m2", "t1", "r1", "y" * 8)], wait=False) == 0
        async with running(store, embedder, make_vector()) as actor:
            assert actor.statistics().vectors == 0  # not loaded yet (not counted: pgvector)
            assert {h.message_id for h in await actor.query("y" * 8, top_k=3)} == {"m1", "m2"}


class TestFailures:
    async def test_outage_records_pending_and_retry_completes(self, store: SQLiteStore, tmp_path: Path,
                                                              make_vector: VectorFactory) -> None:
        rng = random.Random(5)
        embedder = FlakyEmbedder()
        messages = [make_message(f"m{i}", "t1", "r1", random_text(rng), i) for i in range(20)]
        await persist(store, messages)
        async with running(store, embedder, make_vector(tmp_path / "vec")) as actor:
            await actor.upsert_messages(messages[:5])
            embedder.fail = True
            with pytest.raises(EmbedderError) as info:
                await actor.upsert_messages(messages[5:])
            assert isinstance(info.value.__cause__, RuntimeError)
            assert actor.statistics().pending == 15
            assert await actor.retry_pending() == 0  # still down: nothing lost, nothing made
            assert actor.statistics().pending == 15
            embedder.fail = False
            assert await actor.retry_pending() == 15
            assert actor.statistics().pending == 0 and await _count(actor) == 20
            for message in messages:
                assert [h.message_id for h in await actor.query(message.text, top_k=1)] == [message.id]

    async def test_poisoned_text_fails_only_its_caller(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        embedder = FlakyEmbedder()
        messages = [make_message(f"m{i}", f"t{i}", "r1", f"message number {i}", i) for i in range(8)]
        embedder.poison = {messages[3].text}
        outcome: dict[str, str] = {}

        async def save(message: Message) -> None:
            try:
                await actor.upsert_messages([message])
                outcome[message.id] = "ok"
            except EmbedderError:
                outcome[message.id] = "error"

        async with running(store, embedder, make_vector(), linger=0) as actor:
            await actor.dimension()
            embedder.gate = anyio.Event()
            gate = embedder.gate
            async with anyio.create_task_group() as tg:
                tg.start_soon(actor.upsert_messages, [make_message("warm", "t0", "r1", "warm up")])
                await embedder.entered.wait()  # the writer is busy; the next callers queue into one batch
                for message in messages:
                    tg.start_soon(save, message)
                await wait_all_tasks_blocked()
                gate.set()
            assert outcome == {m.id: ("error" if m.id == "m3" else "ok") for m in messages}
            batch_call = next(c for c in embedder.calls if len(c) == 8)
            retries = embedder.calls[embedder.calls.index(batch_call) + 1 :]
            assert sorted(batch_call) == sorted(r[0] for r in retries)  # per-text retry of that batch
            assert actor.statistics().pending == 1 and await _count(actor) == 8

    async def test_failed_dimension_probe_is_retried(self, store: SQLiteStore, tmp_path: Path) -> None:
        embedder = FlakyEmbedder(dim=24, known_dimension=False)
        async with running(store, embedder, HnswVectorStore(tmp_path / "vec")) as actor:
            embedder.fail = True
            with pytest.raises(EmbedderError) as info:
                await actor.dimension()
            assert info.value.code == "MASTRA_MEMORY_GET_EMBEDDING_DIMENSION_FAILED"
            assert "Failed to determine the embedder's output dimension" in info.value.message
            assert isinstance(info.value.__cause__, RuntimeError)
            embedder.fail, embedder.empty = False, True
            with pytest.raises(EmbedderError) as info:
                await actor.dimension()
            assert str(info.value.__cause__) == "Embedder returned no usable embedding for the dimension probe."
            embedder.empty = False
            assert await actor.dimension() == 24
            assert await actor.index_name() == "memory_messages_24"
            assert embedder.calls == [["a"], ["a"], ["a"]]

    async def test_dimension_mismatch_before_any_file(self, store: SQLiteStore, tmp_path: Path) -> None:
        for known in (True, False):
            embedder = FlakyEmbedder(dim=32, known_dimension=known)
            async with running(store, embedder, HnswVectorStore(tmp_path / "vec"), embedding_dimension=16) as actor:
                with pytest.raises(EmbeddingDimensionMismatch) as info:
                    await actor.upsert_messages([make_message("m", "t", "r", "hello")])
                assert (info.value.expected, info.value.actual) == (16, 32)
                with pytest.raises(EmbeddingDimensionMismatch):
                    await actor.query("hello", top_k=1)
        assert not (tmp_path / "vec").exists()

    async def test_1536_dimensions_use_the_plain_index_name(self, store: SQLiteStore) -> None:
        async with running(store, FlakyEmbedder(dim=1536), HnswVectorStore()) as actor:
            assert await actor.index_name() == "memory_messages"

    async def test_closed_actor_fails_fast(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        actor = IndexActor(store=store, vector=make_vector(), embedder=FlakyEmbedder())
        with pytest.raises(ConfigError, match="new"):
            await actor.query("x", top_k=1)
        async with actor:
            pass
        with pytest.raises(ConfigError, match="closed"):
            await actor.upsert_messages([make_message("m", "t", "r", "x")])

    async def test_one_vector_store_has_one_owner(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        vector = make_vector()
        async with running(store, FlakyEmbedder(), vector):
            with pytest.raises(ConfigError, match="already used"):
                async with running(store, FlakyEmbedder(), vector):
                    pass


class TestChunksAndCopies:
    async def test_reupsert_replaces_chunks_and_textless_clears(self, store: SQLiteStore,
                                                                make_vector: VectorFactory) -> None:
        embedder = FlakyEmbedder()
        async with running(store, embedder, make_vector(), max_chunk_chars=20) as actor:
            long = make_message("m1", "t1", "r1", "alpha bravo charlie delta echo foxtrot golf india")
            await actor.upsert_messages([long])
            assert await _count(actor) == 3
            hits = await actor.query("echo foxtrot golf", top_k=5)
            assert [h.message_id for h in hits] == ["m1"]  # one hit per message
            await actor.upsert_messages([make_message("m1", "t1", "r1", "short")])
            assert await _count(actor) == 1
            await actor.upsert_messages([make_message("m1", "t1", "r1", "")])
            assert await _count(actor) == 0

    async def test_copy_messages_reuses_vectors(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        embedder = FlakyEmbedder()
        async with running(store, embedder, make_vector(), max_chunk_chars=20) as actor:
            await actor.upsert_messages([
                make_message("a", "t1", "r1", "alpha bravo charlie delta echo foxtrot"),
                make_message("b", "t1", "r1", "garden music"),
            ])
            calls = len(embedder.calls)
            await actor.copy_messages({"a": "a2", "b": "b2"}, thread_id="t9", resource_id="r9")
            assert len(embedder.calls) == calls
            hits = await actor.query("garden music", top_k=5, resource_id="r9")
            assert [h.message_id for h in hits][:1] == ["b2"] and {h.thread_id for h in hits} == {"t9"}
            assert await _count(actor) == 6

    async def test_reindex_makes_missing_vectors(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        rng = random.Random(9)
        messages = [make_message(f"m{i}", f"t{i % 3}", "r1", random_text(rng), i) for i in range(30)]
        await persist(store, messages)
        seen: list[tuple[int, int]] = []
        async with running(store, FlakyEmbedder(), make_vector(), batch_size=8) as actor:
            await actor.upsert_messages(messages[:10])
            assert await actor.reindex(lambda done, total: seen.append((done, total))) == 20
            assert await _count(actor) == 30
            assert seen[-1] == (20, 20) and len(seen) == 3
            assert await actor.reindex() == 0


class TestDeletes:
    async def test_delete_racing_upsert_ends_deleted(self, store: SQLiteStore, make_vector: VectorFactory) -> None:
        rng = random.Random(11)
        messages = [make_message(f"m{i}", f"t{i % 10}", "r1", random_text(rng), i) for i in range(100)]
        async with running(store, FlakyEmbedder(), make_vector()) as actor:

            async def upsert_then_delete(message: Message) -> None:
                await actor.upsert_messages([message], wait=False)
                await actor.delete_messages([message.id])

            async with anyio.create_task_group() as tg:
                for message in messages:
                    tg.start_soon(upsert_then_delete, message)
            assert await _count(actor) == 0
            assert await actor.query(messages[0].text, top_k=5) == []

    async def test_deletes_and_moves_survive_restart_without_snapshot(
        self, store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        embedder = FlakyEmbedder()
        messages = [
            make_message("a", "t1", "r1", "alpha message"),
            make_message("b", "t1", "r1", "bravo message"),
            make_message("c", "t2", "r1", "charlie message"),
            make_message("d", "t3", "r1", "delta message"),
        ]
        async with running(store, embedder, HnswVectorStore(tmp_path / "vec")) as actor:
            await actor.upsert_messages(messages)
        with monkeypatch.context() as patch:  # a crash: the second run never saves its snapshot
            patch.setattr(_hnsw_snapshot, "FORKED_SNAPSHOTS", False)
            patch.setattr(_hnsw_session, "save_snapshot", lambda index, view: False)
            async with running(store, embedder, HnswVectorStore(tmp_path / "vec")) as actor:
                await actor.delete_messages(["a"])  # before the index is loaded: SQL only
                assert len(await actor.query("message", top_k=10)) == 3  # loads the snapshot, replays the delete
                await actor.delete_thread("t2")  # after: SQL and the live index
                await actor.move_thread("t3", "r2")
                assert actor.statistics().snapshot_loads == 1
                assert [h.message_id for h in await actor.query("message", top_k=10, resource_id="r1")] == ["b"]
        async with running(store, embedder, HnswVectorStore(tmp_path / "vec")) as actor:
            hits = await actor.query("message", top_k=10, resource_id="r1")
            assert [h.message_id for h in hits] == ["b"]
            assert [h.message_id for h in await actor.query("message", top_k=10, resource_id="r2")] == ["d"]
            stats = actor.statistics()
            assert (stats.snapshot_loads, stats.rebuilds, stats.vectors) == (1, 0, 2)
        async with running(store, embedder, HnswVectorStore(tmp_path / "vec")) as actor:
            assert {h.message_id for h in await actor.query("message", top_k=10)} == {"b", "d"}


def _names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _remove_all(directory: Path) -> None:
    for path in directory.iterdir():
        path.unlink()


def _garbage_manifest(directory: Path) -> None:
    (directory / "memory_messages_32.manifest.json").write_bytes(b"{not json")


DAMAGE: dict[str, Callable[[Path], None] | None] = {
    "intact": None,
    "missing": _remove_all,
    "truncated": lambda d: _truncate(d / "memory_messages_32.hnsw"),
    "bit-flipped": lambda d: _flip_byte(d / "memory_messages_32.hnsw"),
    "entries-bit-flipped": lambda d: _flip_byte(d / "memory_messages_32.entries"),
    "manifest-garbage": _garbage_manifest,
}


class TestRestart:
    @pytest.mark.parametrize("damage", list(DAMAGE))
    async def test_recall_is_the_same_after_restart(self, store: SQLiteStore, tmp_path: Path, damage: str) -> None:
        rng = random.Random(13)
        messages = _corpus(rng, resources=4, threads=3, per_thread=(5, 10))
        queries = [(random_text(rng, 5), rng.choice(messages)) for _ in range(30)]
        embedder = FlakyEmbedder()
        vec = tmp_path / "vec"

        async def recall(actor: IndexActor) -> list[list[VectorHit]]:
            return [await actor.query(text, top_k=4, resource_id=m.resource_id) for text, m in queries]

        async with running(store, embedder, HnswVectorStore(vec)) as actor:
            await actor.upsert_messages(messages)
            await actor.delete_messages([messages[0].id])
            before = await recall(actor)
        # Everything the vector store writes stays below its path.
        assert _names(vec) == {f"memory_messages_32.{ext}" for ext in ("entries", "hnsw", "manifest.json", "lock")}
        sqlite_files = {"memory.db", "memory.db-wal", "memory.db-shm", "memory.db-threadmind.lock"}
        assert _names(tmp_path) - sqlite_files == {"vec"}
        action = DAMAGE[damage]
        if action is not None:
            action(vec)
        async with running(store, embedder, HnswVectorStore(vec)) as actor:
            after = await recall(actor)
            stats = actor.statistics()
            assert stats.vectors == len(messages) - 1
            assert (stats.snapshot_loads, stats.rebuilds) == ((1, 0) if damage == "intact" else (0, 1))
        assert [[h.message_id for h in hits] for hits in after] == [[h.message_id for h in hits] for hits in before]
        for hits_after, hits_before in zip(after, before, strict=True):
            assert [h.score for h in hits_after] == pytest.approx([h.score for h in hits_before], abs=1e-5)

    async def test_snapshot_newer_than_database_is_rebuilt(self, tmp_path: Path) -> None:
        embedder = FlakyEmbedder()
        vec = tmp_path / "vec"
        for name, text in (("one.db", "alpha"), ("two.db", None)):
            store = SQLiteStore(tmp_path / name)
            async with store, running(store, embedder, HnswVectorStore(vec)) as actor:
                if text is not None:
                    await actor.upsert_messages([make_message("a", "t", "r", text)])
                else:  # the other database knows nothing of the snapshot's vectors
                    assert await actor.query("alpha", top_k=3) == []
                    assert actor.statistics().rebuilds == 1


async def test_in_memory_store_gets_in_memory_records(make_vector: VectorFactory) -> None:
    """The pending marks live with the messages, wherever the vectors are."""
    embedder = FlakyEmbedder()
    messages = [make_message(f"m{i}", "t1", "r1", f"note {i} about paris", i) for i in range(4)]
    async with InMemoryStore() as store, running(store, embedder, make_vector()) as actor:
        await persist(store, messages)
        await actor.upsert_messages(messages[:2])
        embedder.fail = True
        with pytest.raises(EmbedderError):
            await actor.upsert_messages(messages[2:])
        embedder.fail = False
        assert await actor.retry_pending() == 2
        await actor.delete_messages(["m0"])
        hits = await actor.query("note about paris", top_k=10, thread_id="t1")
        assert sorted(h.message_id for h in hits) == ["m1", "m2", "m3"]
