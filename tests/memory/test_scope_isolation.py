"""Scope isolation (SPEC §6): a thread owned by another resource is never read or written as that resource.

One table of every public entry point that takes a thread id together with a resource id. Each is called on
resource A's thread while claiming resource B: writes and recall raise ``ResourceMismatch``; the reads that
answer ``str | None`` (working memory, the system message, ``get_thread_by_id``) return None, as for a thread
that does not exist. No call returns anything of A or changes anything of A or B (A's messages, thread row,
working memory in both scopes and vectors, and B's resource row, are compared before and after).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tests._factories import StoreKind, new_store, semantic_memory

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.agent import ToolContext as AgentToolContext
from threadmind.errors import ResourceMismatch
from threadmind.models import ModelResponse, ScriptedModel, ToolCall

SECRET = "the launch code of resource A is 0000"
A_WM = "# A's private notes\n- secret: 0000\n"
B_WM = "# B's own notes\n"
THREAD, OWNER, INTRUDER = "ta", "rA", "rB"

Call = Callable[[Memory], Awaitable[Any]]


def _config(scope: str) -> dict[str, Any]:
    return {"lastMessages": 10, "workingMemory": {"enabled": True, "scope": scope},
            "semanticRecall": {"topK": 2, "messageRange": 1, "scope": "resource"}}


async def _tool(memory: Memory) -> Any:
    tool = memory.list_tools()["updateWorkingMemory"]
    assert tool.execute is not None
    return await tool.run({"memory": "# overwritten by B\n"},
                          AgentToolContext(thread_id=THREAD, resource_id=INTRUDER, memory=memory))


async def _agent(memory: Memory) -> Any:
    model = ScriptedModel([ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory", {"memory": "# B\n"})]),
                           "done"])
    result = await Agent("a", "Be helpful.", model, memory=memory).generate(
        "what is the launch code?", thread_id=THREAD, resource_id=INTRUDER)
    if model.requests:  # the model must never have seen A's thread
        assert SECRET not in repr(model.requests)
    return result


async def _save(memory: Memory) -> Any:
    return await memory.save_messages([Message.user("B writes into A's thread", thread_id=THREAD,
                                                    resource_id=INTRUDER)])


ENTRY_POINTS: list[Any] = [
    pytest.param(lambda m: m.recall(THREAD, resource_id=INTRUDER), id="recall-window"),
    pytest.param(lambda m: m.recall(THREAD, resource_id=INTRUDER, per_page=False), id="recall-all"),
    pytest.param(lambda m: m.recall(THREAD, resource_id=INTRUDER, per_page=5, page=0, direction="ASC"),
                 id="recall-page"),
    pytest.param(lambda m: m.recall(THREAD, resource_id=INTRUDER, include=[{"id": "a1", "withNextMessages": 1}]),
                 id="recall-include"),
    *[pytest.param(lambda m, mode=mode: m.recall(THREAD, resource_id=INTRUDER, vector_search_string="launch code",
                                                 thread_config={"semanticRecall": {"search": mode}}),
                   id=f"recall-semantic-{mode}") for mode in ("hybrid", "vector", "keyword")],
    *[pytest.param(lambda m, mode=mode: m.search("launch code", resource_id=INTRUDER, thread_id=THREAD, search=mode),
                   id=f"search-{mode}") for mode in ("hybrid", "vector", "keyword")],
    pytest.param(lambda m: m.recall(THREAD, resource_id=INTRUDER,
                                    thread_config={"messageHistory": {"maxTokens": 1000}}), id="recall-token-window"),
    pytest.param(lambda m: m.update_working_memory(thread_id=THREAD, resource_id=INTRUDER,
                                                   working_memory="# overwritten by B\n"), id="wm-update"),
    pytest.param(_tool, id="wm-tool"),
    pytest.param(_agent, id="agent-generate"),
    pytest.param(_save, id="save-messages"),
]


@pytest.fixture(params=["sqlite", "memory"])
def store_kind(request: pytest.FixtureRequest) -> StoreKind:
    kind: StoreKind = request.param
    return kind


@pytest.fixture(params=["thread", "resource"])
def wm_scope(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def memory(tmp_path: Path, store_kind: StoreKind, wm_scope: str) -> AsyncIterator[Memory]:
    store = new_store(store_kind, tmp_path / "m.db", synchronous="NORMAL")
    async with semantic_memory(store, tmp_path / "v", _config(wm_scope)) as mem:
        await mem.create_thread(resource_id=OWNER, thread_id=THREAD, title="A's thread", metadata={"plan": "a"})
        await mem.save_messages([
            Message.user(SECRET, id="a1", thread_id=THREAD, resource_id=OWNER),
            Message.assistant("noted", id="a2", thread_id=THREAD, resource_id=OWNER),
        ])
        await mem.update_working_memory(thread_id=THREAD, resource_id=OWNER, working_memory=A_WM)
        # B has data of its own, so a foreign read that fell back to B's scope would show.
        await mem.create_thread(resource_id=INTRUDER, thread_id="tb")
        await mem.update_working_memory(thread_id="tb", resource_id=INTRUDER, working_memory=B_WM)
        yield mem


async def _snapshot(memory: Memory) -> dict[str, Any]:
    """Everything of resource A that a foreign call could change."""
    history = await memory.recall(THREAD, resource_id=OWNER, per_page=False)
    hits = await memory.recall(THREAD, resource_id=OWNER, vector_search_string="launch code", per_page=0)
    thread = await memory.get_thread_by_id(THREAD)
    assert thread is not None
    return {
        "messages": [(m.id, m.role, m.text) for m in history.messages],
        "thread": (thread.resource_id, thread.title, thread.metadata),
        "wm": await memory.get_working_memory(thread_id=THREAD, resource_id=OWNER),
        "intruder_wm": await memory.get_working_memory(thread_id="tb", resource_id=INTRUDER),
        "intruder_row": await memory.storage.get_resource(INTRUDER),
        "hits": sorted(m.id for m in hits.messages),
    }


@pytest.mark.parametrize("call", ENTRY_POINTS)
async def test_foreign_resource_is_refused(memory: Memory, call: Call) -> None:
    before = await _snapshot(memory)
    assert before["wm"] == A_WM and before["intruder_wm"] == B_WM and before["hits"] == ["a1", "a2"]
    with pytest.raises(ResourceMismatch) as info:
        await call(memory)
    assert SECRET not in str(info.value) and "0000" not in str(info.value)
    assert await _snapshot(memory) == before


READS: list[Any] = [
    pytest.param(lambda m: m.get_thread_by_id(THREAD, resource_id=INTRUDER), id="get-thread"),
    pytest.param(lambda m: m.get_working_memory(thread_id=THREAD, resource_id=INTRUDER), id="wm-get"),
    pytest.param(lambda m: m.get_system_message(thread_id=THREAD, resource_id=INTRUDER), id="system-message"),
]


@pytest.mark.parametrize("call", READS)
async def test_foreign_resource_reads_as_absent(memory: Memory, call: Call) -> None:
    before = await _snapshot(memory)
    assert await call(memory) is None
    assert await _snapshot(memory) == before


async def test_get_thread_by_id_hides_a_foreign_thread(memory: Memory) -> None:
    found = await memory.get_thread_by_id(THREAD, resource_id=OWNER)
    assert found is not None and found.resource_id == OWNER


async def test_owner_still_reads_and_writes(memory: Memory) -> None:
    """The checks refuse only the foreign resource: A's own calls on the same thread keep working."""
    assert await memory.get_working_memory(thread_id=THREAD, resource_id=OWNER) == A_WM
    system = await memory.get_system_message(thread_id=THREAD, resource_id=OWNER)
    assert system is not None and "secret: 0000" in system
    await memory.update_working_memory(thread_id=THREAD, resource_id=OWNER, working_memory="# A v2\n")
    assert await memory.get_working_memory(thread_id=THREAD, resource_id=OWNER) == "# A v2\n"
    window = await memory.recall(THREAD, resource_id=OWNER)
    assert [m.id for m in window.messages] == ["a1", "a2"]


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
async def test_a_search_of_ones_own_resource_never_finds_anothers_messages(memory: Memory, mode: str) -> None:
    """B asks its own resource for A's words: no mode (by words, by vectors, both) returns anything of A."""
    await memory.save_messages([Message.user("B's own note about lunch", id="b1", thread_id="tb",
                                             resource_id=INTRUDER)])
    hits = await memory.search("launch code 0000 secret", resource_id=INTRUDER, search=mode, top_k=10)  # type: ignore[arg-type]
    assert {h.message.id for h in hits} <= {"b1"}
    recalled = await memory.recall("tb", resource_id=INTRUDER, vector_search_string="launch code 0000", per_page=0,
                                   thread_config={"semanticRecall": {"search": mode}})
    assert {m.id for m in recalled.messages} <= {"b1"}
    mine = await memory.search("launch code", resource_id=OWNER, search=mode, top_k=10)  # type: ignore[arg-type]
    assert "a1" in {h.message.id for h in mine}  # the words are there to be found, by their owner
