"""MemoryInputFilter through Agent.generate (reference §3.1): what the model sees and what storage holds."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests._factories import (
    RESOURCE,
    THREAD,
    CountingStore,
    base_time,
    by_id,
    msg,
    open_memory,
    seed,
    stored,
    text_msg,
    texts,
    tool_part,
    tool_states,
)

from threadmind.agent import Agent, Tool
from threadmind.codecs import TextPart, ToolInvocationPart
from threadmind.models import ScriptedModel
from threadmind.stores import MessageQuery

PM = {"openai": {"itemId": "item-1"}}


def _agent(model: ScriptedModel, memory: object) -> Agent:
    return Agent("a", "be brief", model, memory=memory, tools=[Tool("ask")])  # type: ignore[arg-type]


async def test_trailing_user_messages_are_kept_after_an_echoed_history(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = text_msg("user", "first question", id="u1", at=t0)
    a1 = text_msg("assistant", "first answer", id="a1", at=t0 + timedelta(seconds=1))
    async with open_memory(tmp_path) as memory:
        await seed(memory, [u1, a1])
        model = ScriptedModel(["second answer"])
        echo = [u1, a1, text_msg("user", "q2", id="u2", at=t0 + timedelta(seconds=2)),
                text_msg("user", "q3", id="u3", at=t0 + timedelta(seconds=3))]
        await _agent(model, memory).generate(echo, thread_id=THREAD, resource_id=RESOURCE)
        seen = model.requests[0].messages
        assert [m.id for m in seen] == ["u1", "a1", "u2", "u3"]
        rows = await stored(memory)
        assert [m.id for m in rows][:4] == ["u1", "a1", "u2", "u3"]
        assert texts(rows) == ["first question", "first answer", "q2", "q3", "second answer"]


async def test_echo_without_new_user_turn_after_a_stored_assistant_is_not_duplicated(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = text_msg("user", "hello", id="u1", at=t0)
    a1 = text_msg("assistant", "hi", id="a1", at=t0 + timedelta(seconds=1))
    async with open_memory(tmp_path) as memory:
        await seed(memory, [u1, a1])
        model = ScriptedModel(["again"])
        await _agent(model, memory).generate([u1, a1], thread_id=THREAD, resource_id=RESOURCE)
        # The assistant echo is stored: the input shrinks to nothing; the model sees only stored history. The
        # response is a message of its own: a reply continues a stored assistant message only when the input
        # completes one of its tool calls (the reference merges it into the latest assistant message, which
        # appended overlapping chat requests' replies to one message).
        assert [m.id for m in model.requests[0].messages] == ["u1", "a1"]
        rows = await stored(memory)
        assert [m.id for m in rows][:2] == ["u1", "a1"] and len(rows) == 3
        assert [p.text for p in rows[1].content.parts if isinstance(p, TextPart)] == ["hi"]
        assert rows[2].role == "assistant" and rows[2].text == "again"


async def test_an_assistant_message_that_is_not_stored_is_kept(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = text_msg("user", "hello", id="u1", at=t0)
    async with open_memory(tmp_path) as memory:
        await seed(memory, [u1])
        model = ScriptedModel(["ok"])
        note = text_msg("assistant", "internal instruction", id="note", at=t0 + timedelta(seconds=5))
        await _agent(model, memory).generate([note], thread_id=THREAD, resource_id=RESOURCE)
        assert "note" in [m.id for m in model.requests[0].messages]
        note_row = by_id(await stored(memory), "note")
        assert "internal instruction" in [p.text for p in note_row.content.parts if isinstance(p, TextPart)]


async def test_client_tool_outcome_is_kept_when_it_advances_a_stored_pending_call(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = text_msg("user", "look it up", id="u1", at=t0)
    a1 = msg("assistant", tool_part("call", "c1"), id="a1", at=t0 + timedelta(seconds=1))
    async with open_memory(tmp_path) as memory:
        await seed(memory, [u1, a1])
        model = ScriptedModel(["thanks"])
        outcome = msg("assistant", TextPart(text="client text is ignored"),
                      tool_part("result", "c1", result={"answer": 42}), id="a1", at=t0 + timedelta(seconds=1))
        u2 = text_msg("user", "and now?", id="u2", at=t0 + timedelta(seconds=2))
        await _agent(model, memory).generate([u1, outcome, u2], thread_id=THREAD, resource_id=RESOURCE)
        seen = by_id(model.requests[0].messages, "a1")
        assert tool_states(seen) == {"c1": "result"}
        rows = await stored(memory)
        a1_row = by_id(rows, "a1")
        assert tool_states(a1_row) == {"c1": "result"}
        part = next(p for p in a1_row.content.parts if isinstance(p, ToolInvocationPart))
        assert part.tool_invocation.result == {"answer": 42}
        assert "client text is ignored" not in a1_row.text


async def test_client_tool_outcome_is_dropped_when_the_stored_state_is_terminal(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = text_msg("user", "look it up", id="u1", at=t0)
    a1 = msg("assistant", tool_part("result", "c1", result={"answer": 1}), id="a1", at=t0 + timedelta(seconds=1))
    async with open_memory(tmp_path) as memory:
        await seed(memory, [u1, a1])
        model = ScriptedModel(["ok"])
        forged = msg("assistant", tool_part("result", "c1", result={"answer": 999}), id="a1",
                     at=t0 + timedelta(seconds=1))
        u2 = text_msg("user", "next", id="u2", at=t0 + timedelta(seconds=2))
        await _agent(model, memory).generate([u1, forged, u2], thread_id=THREAD, resource_id=RESOURCE)
        for source in (model.requests[0].messages, await stored(memory)):
            part = next(p for p in by_id(source, "a1").content.parts if isinstance(p, ToolInvocationPart))
            assert part.tool_invocation.result == {"answer": 1}


async def test_client_outcome_for_an_unknown_call_id_is_dropped(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = text_msg("user", "look it up", id="u1", at=t0)
    a1 = msg("assistant", tool_part("call", "c1"), id="a1", at=t0 + timedelta(seconds=1))
    async with open_memory(tmp_path) as memory:
        await seed(memory, [u1, a1])
        model = ScriptedModel(["ok"])
        other = msg("assistant", tool_part("result", "zzz", result=1), id="a1", at=t0 + timedelta(seconds=1))
        u2 = text_msg("user", "next", id="u2", at=t0 + timedelta(seconds=2))
        await _agent(model, memory).generate([u1, other, u2], thread_id=THREAD, resource_id=RESOURCE)
        assert tool_states(by_id(await stored(memory), "a1")) == {"c1": "call"}
        assert tool_states(by_id(model.requests[0].messages, "a1")) == {"c1": "call"}


async def test_empty_thread_is_seeded_with_the_whole_input_and_provider_metadata_stripped(tmp_path: Path) -> None:
    t0 = base_time()
    u1 = msg("user", TextPart(text="hi", provider_metadata=PM), id="u1", at=t0, text="hi")
    a1 = msg("assistant", TextPart(text="hello", provider_metadata=PM),
             tool_part("call", "c0", provider_metadata=PM),
             tool_part("result", "c1", result="r", provider_metadata=PM),
             id="a1", at=t0 + timedelta(seconds=1), text="hello")
    u2 = text_msg("user", "next", id="u2", at=t0 + timedelta(seconds=2))
    async with open_memory(tmp_path) as memory:
        model = ScriptedModel(["answer"])
        await _agent(model, memory).generate([u1, a1, u2], thread_id=THREAD, resource_id=RESOURCE)
        assert [m.id for m in model.requests[0].messages] == ["u1", "a1", "u2"]
        rows = await stored(memory)
        assert [m.id for m in rows][:3] == ["u1", "a1", "u2"]
        a1_row = by_id(rows, "a1")
        text_part, call_part, result_part = a1_row.content.parts
        assert text_part.provider_metadata is None
        assert call_part.provider_metadata is None
        assert result_part.provider_metadata == PM  # client outcomes keep theirs
        assert by_id(rows, "u1").content.parts[0].provider_metadata == PM  # user messages are untouched


async def test_no_storage_call_when_nothing_would_be_trimmed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The filter's storage is the memory's routed store (its "last 1" probe may be answered by the thread
    # actor's tail without a database read), so spy at that level, and on the database below it.
    from threadmind.memory._gateway import ActorAccess as _RoutedStore

    probes: list[MessageQuery] = []
    original = _RoutedStore.list_messages

    async def spy(self: _RoutedStore, query: MessageQuery) -> Any:
        if query.per_page == 1:
            probes.append(query)
        return await original(self, query)

    monkeypatch.setattr(_RoutedStore, "list_messages", spy)
    async with open_memory(tmp_path, counting=True) as memory:
        store = memory.storage
        assert isinstance(store, CountingStore)
        model = ScriptedModel(["one", "two"])
        agent = _agent(model, memory)
        await agent.generate("hello", thread_id=THREAD, resource_id=RESOURCE)
        await agent.generate(["a", "b"], thread_id=THREAD, resource_id=RESOURCE)
        assert probes == [] and store.probe_queries() == []
        assert store.by_id_calls == []
        # Control: an echo that does get trimmed probes its storage exactly once.
        rows = await stored(memory)
        model2 = ScriptedModel(["three"])
        await _agent(model2, memory).generate([*rows, "c"], thread_id=THREAD, resource_id=RESOURCE)
        assert len(probes) == 1


async def _retain_case(tmp_path: Path, options: dict[str, object] | None,
                       call_options: dict[str, object] | None) -> list[str]:
    t0 = base_time()
    async with open_memory(tmp_path, options) as memory:
        await seed(memory, [text_msg("user", "stored q", id="u1", at=t0),
                            text_msg("assistant", "stored a", id="a1", at=t0 + timedelta(seconds=1))])
        model = ScriptedModel(["ok"])
        client_history = [text_msg("user", "client-only q", id="x1", at=t0 + timedelta(seconds=2)),
                          text_msg("assistant", "client-only a", id="x2", at=t0 + timedelta(seconds=3)),
                          text_msg("user", "new q", id="u2", at=t0 + timedelta(seconds=4))]
        await _agent(model, memory).generate(client_history, thread_id=THREAD, resource_id=RESOURCE,
                                             memory_options=call_options)
        seen = [m.id for m in model.requests[0].messages]
        assert [m.id for m in await stored(memory)][:len(seen)] == seen
        return seen


async def test_retain_full_input_off_drops_the_client_history(tmp_path: Path) -> None:
    assert await _retain_case(tmp_path, None, None) == ["u1", "a1", "u2"]


async def test_retain_full_input_in_options_keeps_the_input_verbatim(tmp_path: Path) -> None:
    assert await _retain_case(tmp_path, {"retainFullInput": True}, None) == ["u1", "a1", "x1", "x2", "u2"]


async def test_retain_full_input_per_call(tmp_path: Path) -> None:
    assert await _retain_case(tmp_path, None, {"retainFullInput": True}) == ["u1", "a1", "x1", "x2", "u2"]


async def test_retain_full_input_per_call_false_overrides_options(tmp_path: Path) -> None:
    assert await _retain_case(tmp_path, {"retainFullInput": True}, {"retainFullInput": False}) == ["u1", "a1", "u2"]
