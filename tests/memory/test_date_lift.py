"""A query that names a date lifts the messages created within a day of it (``threadmind.search._dates``), in the
keyword and hybrid modes, on every store and through every door: ``Memory.search``, ``Memory.recall`` and an agent
turn's ``semantic-recall`` processor on the chat server's path (``messages_from_ui`` + ``Agent.stream``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests._factories import semantic_memory

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.embedders import HashEmbedder
from threadmind.models import ScriptedModel
from threadmind.stores import InMemoryStore, PgVectorStore, PostgresStore, SQLiteStore
from threadmind.ui import messages_from_ui

AUGUST = datetime(2023, 8, 1, 14, 0, tzinfo=UTC)
OCTOBER = datetime(2023, 10, 13, 18, 0, tzinfo=UTC)
SHORT = "Melanie: I painted it."  # the better keyword match: short, holds both words
FESTIVAL = "Melanie: I painted a lake at sunset for the autumn festival."
CHATTER = ["the weather was mild", "we should book the train", "my brother called today", "the soup was too salty",
           "a new bakery opened nearby", "the meeting ran late again", "I lost my umbrella", "the cat slept all day"]
DATED = "What did Melanie paint on 13 October, 2023?"
UNDATED = "What did Melanie paint?"
OPTIONS = {"lastMessages": False, "semanticRecall": {"topK": 1, "messageRange": 0, "scope": "resource"}}


def _message(message_id: str, text: str, at: datetime, thread: str, resource: str = "r1") -> Message:
    return Message(id=message_id, role="user", content=Message.user(text).content, created_at=at, thread_id=thread,
                   resource_id=resource)


async def _fill(memory: Memory, festival_at: datetime = OCTOBER, short_at: datetime = AUGUST) -> None:
    for thread, resource in (("summer", "r1"), ("autumn", "r1"), ("other", "r2")):
        await memory.create_thread(thread_id=thread, resource_id=resource)
    await memory.save_messages([_message("short", SHORT, short_at, "summer"),
                                _message("calm", "Caroline: It looks calm.", short_at + timedelta(minutes=1),
                                         "summer")])
    await memory.save_messages([_message("festival", FESTIVAL, festival_at, "autumn"),
                                _message("colours", "Caroline: Lovely colours.", festival_at + timedelta(minutes=1),
                                         "autumn")])
    await memory.save_messages([_message("theirs", SHORT, OCTOBER, "other", "r2")])  # another tenant, same day
    await memory.create_thread(thread_id="chatter", resource_id="r1")  # words of their own: "paint" is rare
    await memory.save_messages([_message(f"chatter-{i}", f"Caroline: {text}", AUGUST + timedelta(days=i), "chatter")
                                for i, text in enumerate(CHATTER)])


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def make_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A Memory factory with hybrid recall on the store of the parameter."""

    def make(options: dict[str, Any] = OPTIONS) -> Memory:
        if request.param == "postgres":
            dsn = request.getfixturevalue("pg_dsn")
            return Memory(storage=PostgresStore(dsn), vector=PgVectorStore(dsn), embedder=HashEmbedder(dim=64),
                          options=options)
        folder = tmp_path / f"v{len(list(tmp_path.iterdir()))}"
        store = SQLiteStore(folder.with_suffix(".db")) if request.param == "sqlite" else InMemoryStore()
        return semantic_memory(store, folder, options)

    return make


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
async def test_a_named_date_lifts_the_message_of_that_day(make_memory: Any, mode: str) -> None:
    async with make_memory() as memory:
        await _fill(memory)
        undated = [h.message.id for h in await memory.search(UNDATED, resource_id="r1", top_k=4, search=mode)]
        assert undated[0] == "short" and "festival" in undated
        dated = await memory.search(DATED, resource_id="r1", top_k=4, search=mode)
        assert dated[0].message.id == "festival" and dated[1].message.id == "short"
        assert "theirs" not in {h.message.id for h in dated}  # the other tenant's message of that day
        # The hit reports the store's own keyword score; the lift is in its rank score alone.
        before = {h.message.id: h.keyword_score for h in await memory.search(UNDATED, resource_id="r1", top_k=4)}
        assert dated[0].keyword_score == before["festival"] and dated[0].score > dated[1].score


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
async def test_a_day_named_relative_to_now_lifts_the_message_of_that_day(make_memory: Any, mode: str) -> None:
    now = datetime.now(UTC)
    async with make_memory() as memory:
        await _fill(memory, festival_at=now - timedelta(days=1), short_at=now - timedelta(days=10))
        undated = await memory.search(UNDATED, resource_id="r1", top_k=2, search=mode)
        assert undated[0].message.id == "short"
        dated = await memory.search("What did Melanie paint yesterday?", resource_id="r1", top_k=2, search=mode)
        assert [h.message.id for h in dated] == ["festival", "short"]
        other = await memory.search("What did Melanie paint four days ago?", resource_id="r1", top_k=2, search=mode)
        assert other[0].message.id == "short"  # a day no message was written on lifts none


async def test_vector_mode_reads_no_date(make_memory: Any) -> None:
    async with make_memory() as memory:
        await _fill(memory)
        index = await memory.search_vectors(DATED, top_k=4, resource_id="r1")
        hits = await memory.search(DATED, resource_id="r1", top_k=4, search="vector")
        assert [h.message.id for h in hits] == [h.message_id for h in index]


@pytest.mark.parametrize(("festival_at", "lifted"), [
    (OCTOBER.replace(hour=0, minute=30) - timedelta(hours=1), True),  # 12 October 23:30 UTC: the 13th east of UTC
    (OCTOBER + timedelta(days=1, hours=5), True),  # 14 October 23:00 UTC: the 13th far west of it
    (OCTOBER + timedelta(days=2), False),
    (OCTOBER - timedelta(days=2), False),
])
async def test_within_a_day_of_the_date_either_side(tmp_path: Path, festival_at: datetime, lifted: bool) -> None:
    async with semantic_memory(SQLiteStore(tmp_path / "m.db"), tmp_path / "v", OPTIONS) as memory:
        await _fill(memory, festival_at)
        hits = await memory.search(DATED, resource_id="r1", top_k=2)
        assert hits[0].message.id == ("festival" if lifted else "short")


async def test_recall_and_the_chat_servers_turn_hand_the_model_the_message_of_that_day(make_memory: Any) -> None:
    async with make_memory({**OPTIONS, "lastMessages": 2}) as memory:
        await _fill(memory)
        await memory.create_thread(thread_id="chat", resource_id="r1")
        recalled = await memory.recall("chat", resource_id="r1", vector_search_string=DATED, per_page=0)
        assert [m.id for m in recalled.messages] == ["festival"]
        model = ScriptedModel(["A lake at sunset."])
        agent = Agent("a", "Be brief.", model, memory=memory)
        body = {"id": "chat", "trigger": "submit-message",
                "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": DATED}]}]}
        async with agent.stream(messages_from_ui(body), thread_id="chat", resource_id="r1") as stream:
            async for _ in stream:
                pass
        prompt = " ".join([*model.requests[0].system, *(m.text for m in model.requests[0].messages)])
        assert "autumn festival" in prompt and SHORT not in prompt
        stored = [m.id for m in (await memory.recall("chat", resource_id="r1", per_page=False)).messages]
        assert len(stored) == 2 and stored[0] == "u-1"
