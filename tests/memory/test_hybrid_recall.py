"""Recall by words and vectors together (SPEC §12), through every door: ``Memory.recall``, the ``semantic-recall``
processor of an agent turn, ``Memory.search``; the three modes, the weight, the threshold, an embedder outage,
reply smoothing, and a database whose messages were written without the keyword index."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests._factories import semantic_memory

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.embedders import Embeddings, HashEmbedder
from threadmind.errors import ConfigError, EmbedderError, ResourceMismatch, ValidationError
from threadmind.models import ScriptedModel
from threadmind.stores import InMemoryStore, SQLiteStore
from threadmind.testing import actor_system
from threadmind.ui import messages_from_ui

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "mastra-1.71" / "memory.db"
T0 = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)
TRIP = [  # one conversation; the answers repeat few of the questions' words
    ("user", "Did you finally go hiking at Mount Rainier last weekend?"),
    ("assistant", "Yes! The view from the summit at sunrise was unforgettable."),
    ("user", "What did you cook for the party on Sunday?"),
    ("assistant", "A big pot of vegetable curry with rice and flatbread."),
    ("user", "How is the new puppy doing?"),
    ("assistant", "She chewed through two shoes already, but she is adorable."),
]


def conversation(thread: str = "t1", resource: str = "r1") -> list[Message]:
    return [Message(id=f"{thread}-{i}", role=role, content=Message.user(text).content,  # type: ignore[arg-type]
                    created_at=T0 + timedelta(minutes=i), thread_id=thread, resource_id=resource)
            for i, (role, text) in enumerate(TRIP)]


async def filled(memory: Memory) -> Memory:
    await memory.create_thread(thread_id="t1", resource_id="r1")
    await memory.create_thread(thread_id="t2", resource_id="r1")
    await memory.save_messages(conversation())
    await memory.save_messages([Message.user("Unrelated: my printer ran out of ink", id="t2-0", thread_id="t2",
                                             resource_id="r1", created_at=T0 + timedelta(hours=1))])
    return memory


def hybrid(tmp_path: Path, **recall: Any) -> Memory:
    return semantic_memory(SQLiteStore(tmp_path / "m.db", synchronous="NORMAL"), tmp_path / "v",
                           {"lastMessages": False, "semanticRecall": {"topK": 2, "messageRange": 0, **recall}})


async def test_keyword_recall_needs_neither_a_vector_store_nor_an_embedder(tmp_path: Path) -> None:
    memory = Memory(storage=SQLiteStore(tmp_path / "m.db"),
                    options={"lastMessages": False, "semanticRecall": {"search": "keyword", "topK": 1,
                                                                       "messageRange": 0}})
    async with memory:
        await filled(memory)
        found = await memory.recall("t1", resource_id="r1", vector_search_string="the puppy chewed shoes")
        assert [m.id for m in found.messages] == ["t1-5"]
        hits = await memory.search("printer ink", resource_id="r1")
        assert [h.message.id for h in hits] == ["t2-0"] and hits[0].vector_score is None
        with pytest.raises(ValidationError, match="vector"):
            await memory.search("printer", resource_id="r1", search="vector")


def test_every_option_is_checked() -> None:
    for bad in ({"search": "fuzzy"}, {"keywordWeight": 1.5}, {"keywordWeight": -0.1}, {"keywordWeight": True}):
        with pytest.raises(ConfigError):
            Memory(storage=InMemoryStore(), options={"semanticRecall": {"search": "keyword", **bad}})
    with pytest.raises(ConfigError, match="vector store"):
        Memory(storage=InMemoryStore(), options={"semanticRecall": {"search": "hybrid"}})


class _NoKeywords(InMemoryStore):
    """A third party's store: the whole Store contract, but no keyword index."""

    keyword_search = None  # type: ignore[assignment]


def test_keyword_recall_over_a_store_without_a_keyword_index_is_refused() -> None:
    with pytest.raises(ConfigError, match="keyword index") as info:
        Memory(storage=_NoKeywords(), options={"semanticRecall": {"search": "keyword"}})
    assert info.value.code == "THREADMIND_CONFIG_KEYWORDS"


async def test_the_processor_and_recall_hand_back_the_same_hits(tmp_path: Path) -> None:
    """An agent turn's semantic-recall processor (a text turn, and a chat turn from a browser's body streamed) and
    Memory.recall rank through one pipeline, and Memory.search's first hits are theirs."""
    async with hybrid(tmp_path, scope="resource") as memory:
        await filled(memory)
        await memory.create_thread(thread_id="t3", resource_id="r1")
        await memory.create_thread(thread_id="t4", resource_id="r1")
        question = "what curry did you cook for the party"
        recalled = await memory.recall("t3", resource_id="r1", vector_search_string=question, per_page=0)
        model = ScriptedModel(["noted"])
        await Agent("a", "i", model, memory=memory).generate(question, thread_id="t3", resource_id="r1")
        chat = ScriptedModel(["noted"])
        body = {"id": "t4", "trigger": "submit-message",
                "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": question}]}]}
        async with Agent("a", "i", chat, memory=memory).stream(messages_from_ui(body), thread_id="t4",
                                                                 resource_id="r1") as stream:
            async for _ in stream:
                pass
        for shown in ("\n".join(model.requests[0].system), "\n".join(chat.requests[0].system)):
            assert recalled.messages and all(m.text in shown for m in recalled.messages)
            assert "printer" not in shown  # t2's message is not among the two best
        searched = await memory.search(question, resource_id="r1", top_k=2)
        assert {h.message.id for h in searched} == {m.id for m in recalled.messages}


async def test_a_reply_is_found_through_the_question_it_answers(tmp_path: Path) -> None:
    """"Mount Rainier" is only in the question; the summit reply comes back by reply smoothing."""
    async with hybrid(tmp_path) as memory:
        await filled(memory)
        hits = await memory.search("Mount Rainier hiking trip", resource_id="r1", top_k=2, search="keyword")
        assert [h.message.id for h in hits] == ["t1-0", "t1-1"]
        assert hits[1].keyword_score is None and hits[1].score < hits[0].score


async def test_the_weight_ends_are_the_two_single_modes(tmp_path: Path) -> None:
    async with hybrid(tmp_path) as memory:
        await filled(memory)
        query = "new puppy shoes"
        vector = [h.message.id for h in await memory.search(query, resource_id="r1", top_k=4, search="vector")]
        keyword = [h.message.id for h in await memory.search(query, resource_id="r1", top_k=4, search="keyword")]
    for weight, expected in ((0.0, vector), (1.0, keyword)):
        (tmp_path / str(weight)).mkdir()
        async with hybrid(tmp_path / str(weight), keywordWeight=weight) as memory:
            await filled(memory)
            found = await memory.search(query, resource_id="r1", top_k=4)
            assert [h.message.id for h in found][:len(expected)] == expected


async def test_vector_mode_is_the_indexs_own_answer_hit_for_hit(tmp_path: Path) -> None:
    async with hybrid(tmp_path, search="vector", topK=3) as memory:
        await filled(memory)
        index = actor_system(memory).index
        assert index is not None
        for query in ("the summit at sunrise", "vegetable curry", "printer ink"):
            own = await index.query(query, top_k=3, resource_id="r1")
            hits = await memory.search(query, resource_id="r1", top_k=3)
            assert [(h.message.id, h.score) for h in hits] == [(h.message_id, h.score) for h in own]


async def test_a_threshold_drops_weak_vectors_never_a_keyword_hit(tmp_path: Path) -> None:
    async with hybrid(tmp_path) as memory:
        await filled(memory)
        hits = await memory.search("printer ink", resource_id="r1", top_k=5, threshold=0.999)
        assert [h.message.id for h in hits] == ["t2-0"] and hits[0].vector_score is None
        assert hits[0].keyword_score is not None and hits[0].keyword_score > 0
        vector = await memory.search("printer ink", resource_id="r1", top_k=5, threshold=0.999, search="vector")
        assert vector == []


class _Outage(HashEmbedder):
    down = False

    async def embed(self, texts: list[str]) -> Embeddings:
        if self.down:
            raise ConnectionError("embedding service down")
        return await super().embed(texts)


async def test_an_embedder_outage_still_answers_with_keyword_hits(tmp_path: Path) -> None:
    embedder = _Outage(dim=64)
    memory = semantic_memory(SQLiteStore(tmp_path / "m.db"), tmp_path / "v",
                             {"lastMessages": False, "semanticRecall": {"topK": 1, "messageRange": 0}},
                             embedder=embedder)
    async with memory:
        await filled(memory)
        embedder.down = True
        recalled = await memory.recall("t1", resource_id="r1", vector_search_string="printer ink", per_page=0)
        assert recalled.degraded and [m.id for m in recalled.messages] == ["t2-0"]
        assert [h.message.id for h in await memory.search("printer ink", resource_id="r1", top_k=1)] == ["t2-0"]
        with pytest.raises(EmbedderError):
            await memory.search_vectors("printer ink", resource_id="r1")


async def test_search_checks_its_arguments_and_its_scope(tmp_path: Path) -> None:
    async with hybrid(tmp_path) as memory:
        await filled(memory)
        await memory.create_thread(thread_id="other", resource_id="r2")
        with pytest.raises(ResourceMismatch):
            await memory.search("curry", resource_id="r2", thread_id="t1")
        for bad in ({"top_k": 0}, {"top_k": True}, {"search": "fuzzy"}, {"threshold": "high"}):
            with pytest.raises(ValidationError):
                await memory.search("curry", resource_id="r1", **bad)
        with pytest.raises(ValidationError):
            await memory.search(None, resource_id="r1")  # type: ignore[arg-type]
        in_thread = await memory.search("printer curry", resource_id="r1", thread_id="t2")
        assert {h.message.thread_id for h in in_thread} == {"t2"}
        early = await memory.search("printer curry party", resource_id="r1",
                                    date_range={"end": T0 + timedelta(minutes=30)})
        assert early and all(h.message.created_at <= T0 + timedelta(minutes=30) for h in early)
        assert "t2-0" not in {h.message.id for h in early}


async def test_a_mastra_database_is_found_by_words_once_opened(tmp_path: Path) -> None:
    """Mastra wrote these messages without any keyword index; opening the file indexes them in the background."""
    db = tmp_path / "mastra.db"
    shutil.copyfile(FIXTURE, db)
    store = SQLiteStore(db)
    memory = Memory(storage=store, options={"lastMessages": False, "semanticRecall": {"search": "keyword"}})
    async with memory:
        with anyio.fail_after(10):
            while await store.keyword_backlog():  # noqa: ASYNC110 - the background catch-up has no event
                await anyio.sleep(0.01)
        hits = await memory.search("hotel near Shibuya", resource_id="res-alice", top_k=3)
        assert hits and "Shibuya" in hits[0].message.text
        assert all(h.message.resource_id in (None, "res-alice") for h in hits)
