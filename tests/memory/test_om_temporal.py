"""Observational memory's temporal markers: the model is told how long the user was away, in Mastra's words,
through ``generate`` and through the chat server's door (``messages_from_ui`` + ``Agent.stream``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadmind.agent import Agent
from threadmind.memory import Memory
from threadmind.models._scripted import ScriptedModel
from threadmind.stores import MessageQuery
from threadmind.stores._sqlite import SQLiteStore


async def test_temporal_markers_tell_the_model_how_long_the_user_was_away(tmp_path: Path) -> None:
    """``temporalMarkers``: a turn 2 h 5 min after the previous message gets a stored ``system-reminder`` signal
    before its model call, which the model reads as Mastra renders it; ``recall`` hides it; a turn 3 minutes
    later gets none."""
    from datetime import timedelta

    from threadmind import Message
    from threadmind.codecs._time import utc_now

    options = {"observationalMemory": {"model": ScriptedModel([]), "temporalMarkers": True,
                                       "observation": {"messageTokens": 100_000}}}
    async with Memory(storage=SQLiteStore(tmp_path / "om.db"), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        before = utc_now() - timedelta(hours=2, minutes=5)
        await memory.save_messages([Message.user("see you later", id="old", thread_id="t1", resource_id="r1",
                                                 created_at=before)])
        model = ScriptedModel(["welcome back", "sure"])
        agent = Agent("a", "i", model, memory=memory)
        await agent.generate("I am back", thread_id="t1", resource_id="r1")
        rendered = [m.text for m in model.requests[0].messages if m.text.startswith("<system-reminder")]
        assert len(rendered) == 1
        assert rendered[0].startswith('<system-reminder type="temporal-gap" gapText="2 hours 5 minutes later" gapMs="')
        assert ">2 hours 5 minutes later — " in rendered[0] and rendered[0].endswith("</system-reminder>")
        stored = await memory.storage.list_messages(MessageQuery(thread_id="t1", per_page=False))
        [marker] = [m for m in stored.messages if m.role == "signal"]
        user = next(m for m in stored.messages if m.text == "I am back")
        signal = (marker.content.metadata or {})["signal"]
        assert marker.id.startswith("__temporal_gap_") and marker.type == "system-reminder"
        assert signal["type"] == "reactive" and signal["attributes"]["precedesMessageId"] == user.id
        assert signal["metadata"]["systemReminder"]["type"] == "temporal-gap"
        assert marker.id not in {m.id for m in (await memory.recall("t1", per_page=False)).messages}
        await agent.generate("one more thing", thread_id="t1", resource_id="r1")  # moments later: no marker
        assert not any(m.text.startswith("<system-reminder") and "one more" in m.text
                       for m in model.requests[1].messages)
        again = await memory.storage.list_messages(MessageQuery(thread_id="t1", per_page=False))
        assert [m.role for m in again.messages].count("signal") == 1


@pytest.mark.parametrize(("ms", "text"), [
    (599_999, None), (600_000, "10 minutes later"), (59 * 60_000 + 40_000, "60 minutes later"),
    (3_600_000, "1 hour later"), (2 * 3_600_000 + 5 * 60_000, "2 hours 5 minutes later"),
    (86_400_000 * 3 + 3_600_000, "3 days 1 hour later"), (86_400_000 * 8, "1 week 1 day later"),
    (86_400_000 * 45, "1 month 2 weeks later"), (86_400_000 * 400, "1 year 1 month later"),
])
def test_gaps_read_as_mastra_writes_them(ms: int, text: str | None) -> None:
    from threadmind.processors._temporal_markers import format_gap

    assert format_gap(ms) == text


async def test_temporal_markers_through_the_chat_servers_door(tmp_path: Path) -> None:
    """A useChat body through ``messages_from_ui`` and ``Agent.stream``, an hour after the thread's last message:
    the model reads the gap before its answer, and the stream carries no marker to the browser."""
    from datetime import timedelta

    from threadmind import Message
    from threadmind.codecs._time import utc_now
    from threadmind.ui import messages_from_ui

    options = {"observationalMemory": {"model": ScriptedModel([]), "temporalMarkers": True,
                                       "observation": {"messageTokens": 100_000}}}
    async with Memory(storage=SQLiteStore(tmp_path / "chat.db"), options=options) as memory:
        await memory.create_thread(thread_id="chat-1", resource_id="r1")
        await memory.save_messages([Message.user("bye", id="u0", thread_id="chat-1", resource_id="r1",
                                                 created_at=utc_now() - timedelta(hours=1))])
        model = ScriptedModel(["welcome back"])
        agent = Agent("chat", "You answer.", model, memory=memory)
        body = {"id": "chat-1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
        async with agent.stream(messages_from_ui(body), thread_id="chat-1", resource_id="r1") as stream:
            kinds = [event.type async for event in stream]
        assert "data-signal" not in kinds
        rendered = [m.text for m in model.requests[0].messages if m.text.startswith("<system-reminder")]
        assert len(rendered) == 1 and 'gapText="1 hour later"' in rendered[0]
