"""Hybrid recall on PostgreSQL runs its two sides beside each other (the keyword search waits on the server while
the vector query does), and ranks exactly as the one-after-the-other path does: the same hits, scores and order as
on SQLite, an embedder outage answered by words, a failure of either side raised as itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

try:
    import asyncpg
except ImportError:  # the pg_cluster fixture skips these tests (fails them in CI) with the install hint
    asyncpg = None

from threadmind import Memory
from threadmind.agent import Agent
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import StorageError
from threadmind.models import ScriptedModel
from threadmind.search._searcher import KeywordSearchBeside, Searcher
from threadmind.stores import (
    KeywordCandidate,
    KeywordMatches,
    Neighbours,
    PgVectorStore,
    PostgresStore,
    SQLiteStore,
    VectorHit,
)
from threadmind.ui import messages_from_ui

from .test_hybrid_recall import conversation, filled

_OPTIONS = {"lastMessages": False, "semanticRecall": {"topK": 3, "messageRange": 1, "scope": "resource"}}
QUERIES = ["the view from the summit", "what did you cook on Sunday", "puppy chewed shoes", "printer ink",
           "hiking Rainier weekend curry"]


class _Embedder:
    """HashEmbedder that can be made to fail."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=32)
        self.broken = False

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return 32

    async def embed(self, texts: list[str]) -> Embeddings:
        if self.broken:
            raise RuntimeError("embedding service unavailable")
        return await self.inner.embed(texts)


async def _ranked(memory: Memory, query: str, thread_id: str | None) -> list[tuple[str, float, float | None]]:
    hits = await memory.search(query, resource_id="r1", thread_id=thread_id, top_k=6)
    return [(h.message.id, round(h.score, 4), h.keyword_score) for h in hits]  # (float32 sums differ in the 7th digit)


async def test_postgres_ranks_as_sqlite_does(pg_dsn: str, tmp_path: Path) -> None:
    from tests._factories import semantic_memory

    on_sqlite = semantic_memory(SQLiteStore(tmp_path / "m.db"), tmp_path / "v", _OPTIONS,
                                embedder=HashEmbedder(dim=32))
    on_postgres = Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn), embedder=HashEmbedder(dim=32),
                         options=_OPTIONS)
    async with on_sqlite, on_postgres:
        for memory in (on_sqlite, on_postgres):
            await filled(memory)
        # the capability that picks the path: PostgreSQL's keyword search runs beside the vector query, SQLite's after
        assert isinstance(on_postgres.storage, KeywordSearchBeside)
        assert not isinstance(on_sqlite.storage, KeywordSearchBeside)
        for query in QUERIES:
            for thread_id in (None, "t1"):
                assert await _ranked(on_postgres, query, thread_id) == await _ranked(on_sqlite, query, thread_id), query
            a = await on_postgres.recall("t1", resource_id="r1", vector_search_string=query)
            b = await on_sqlite.recall("t1", resource_id="r1", vector_search_string=query)
            assert [m.id for m in a.messages] == [m.id for m in b.messages]


async def test_an_embedder_outage_answers_by_words_on_postgres(pg_dsn: str) -> None:
    embedder = _Embedder()
    async with Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn), embedder=embedder,
                      options=_OPTIONS) as memory:
        await filled(memory)
        embedder.broken = True
        result = await memory.recall("t2", resource_id="r1", vector_search_string="summit view sunrise")
        assert result.degraded and "t1-1" in [m.id for m in result.messages]


# -- the searcher's two paths, over a keyword index and a vector query written for the test -----------------------

_IDS = [m.id for m in conversation()]
_NEIGHBOURS = {mid: (_IDS[i - 1] if i else None, _IDS[i + 1] if i + 1 < len(_IDS) else None)
               for i, mid in enumerate(_IDS)}


class _Keywords:
    """Two keyword candidates; the neighbours of whatever is asked for; every call recorded."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def _matches(self, named: Sequence[str]) -> KeywordMatches:
        candidates = [KeywordCandidate("t1-2", "t1", "r1", 8, {"cook": 1}, 2.0),
                      KeywordCandidate("t1-4", "t1", "r1", 6, {"puppi": 1}, 1.0)]
        ids = list(dict.fromkeys([c.message_id for c in candidates] + list(named)))
        self.asked.append(ids)
        return KeywordMatches(6, 7.0, {"cook": 1, "puppi": 1}, candidates,
                              {mid: _NEIGHBOURS[mid] for mid in ids if mid in _NEIGHBOURS})

    async def keyword_search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                             limit: int, neighbours_of: Sequence[str] | None = None,
                             counts: bool = True) -> KeywordMatches:
        await anyio.lowlevel.checkpoint()
        return self._matches(neighbours_of or [])

    async def neighbours(self, message_ids: Sequence[str]) -> Neighbours:
        return {mid: _NEIGHBOURS[mid] for mid in message_ids}

    async def keyword_backlog(self) -> int:
        return 0

    async def build_keyword_index(self, progress: Callable[[int, int], object] | None = None) -> int:
        return 0


class _KeywordsBeside(_Keywords):
    async def keyword_search_beside(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                                    limit: int,
                                    neighbours_of: Callable[[], Awaitable[Sequence[str]]]) -> KeywordMatches:
        await anyio.lowlevel.checkpoint()
        return self._matches(await neighbours_of())


class _Vectors:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    async def query(self, text: str, *, top_k: int, resource_id: str | None = None, thread_id: str | None = None,
                    threshold: float | None = None) -> list[VectorHit]:
        await anyio.sleep(0.01)  # the keyword side is waiting meanwhile
        if self.fail is not None:
            raise self.fail
        return [VectorHit("t1-1", "t1", "r1", 0.9), VectorHit("t1-5", "t1", "r1", 0.5)]


async def test_beside_and_after_rank_the_same_and_read_every_neighbour() -> None:
    after, beside = _Keywords(), _KeywordsBeside()
    one = await Searcher(after, _Vectors()).search("q", top_k=3, resource_id="r1", thread_id=None)
    two = await Searcher(beside, _Vectors()).search("q", top_k=3, resource_id="r1", thread_id=None)
    assert [(r.message_id, r.score) for r in one.ranked] == [(r.message_id, r.score) for r in two.ranked]
    assert after.asked == beside.asked == [["t1-2", "t1-4", "t1-1", "t1-5"]]  # one read, the vector hits' included


async def test_a_failure_of_either_side_is_raised_as_itself() -> None:
    with pytest.raises(StorageError, match="vector store down"):
        await Searcher(_KeywordsBeside(), _Vectors(StorageError("vector store down"))).search(
            "q", top_k=3, resource_id="r1", thread_id=None)

    class _Broken(_KeywordsBeside):
        async def keyword_search_beside(self, *args: Any, **kwargs: Any) -> KeywordMatches:
            raise StorageError("keyword index down")

    with pytest.raises(StorageError, match="keyword index down"):
        await Searcher(_Broken(), _Vectors()).search("q", top_k=3, resource_id="r1", thread_id=None)



# -- the chat server's door on PostgreSQL --------------------------------------------------------------------------


def _body(chat: str, message_id: str, text: str) -> dict[str, Any]:
    return {"id": chat, "trigger": "submit-message",
            "messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}]}


async def test_overlapping_chat_turns_recall_by_words_and_vectors_on_postgres(pg_dsn: str) -> None:
    """``messages_from_ui`` + ``Agent.stream``, two requests on one chat at once: each turn's model sees what hybrid
    recall (keyword side beside the vector side) found in another thread of the resource, both turns persist, and
    once settled their vectors are stored with nothing owed."""
    options = {"lastMessages": 4, "semanticRecall": {"topK": 2, "messageRange": 0, "scope": "resource"}}
    async with Memory(storage=PostgresStore(pg_dsn), vector=PgVectorStore(pg_dsn), embedder=HashEmbedder(dim=32),
                      options=options) as memory:
        await filled(memory)  # thread t1: the hiking trip, the curry, the puppy (saved with their vectors)
        model = ScriptedModel(["It was a vegetable curry.", "She is adorable."])
        agent = Agent("a", "Be brief.", model, memory=memory)

        async def turn(message_id: str, text: str) -> None:
            async with agent.stream(messages_from_ui(_body("chat", message_id, text)), thread_id="chat",
                                    resource_id="r1") as stream:
                async for _ in stream:
                    pass

        await memory.create_thread(thread_id="chat", resource_id="r1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn, "u-1", "what did you cook for the party on Sunday?")
            tg.start_soon(turn, "u-2", "how is the new puppy doing?")
        seen = [" ".join([*request.system, *(m.text for m in request.messages)]) for request in model.requests]
        assert any("vegetable curry with rice" in prompt for prompt in seen)  # t1-3, found for the cooking question
        assert any("chewed through two shoes" in prompt for prompt in seen)  # t1-5, for the puppy question
        stored = [m.id for m in (await memory.recall("chat", resource_id="r1", per_page=False)).messages]
        assert len(stored) == 4 and {"u-1", "u-2"} <= set(stored)
        await memory.settled()
        hits = {h.message_id for h in await memory.search_vectors("puppy", top_k=50, resource_id="r1")}
        assert set(stored) <= hits
        conn = await asyncpg.connect(pg_dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM threadmind_vector_pending") == 0
        finally:
            await conn.close()
