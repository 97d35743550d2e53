"""The token-window loader reads history in pages (the first from the thread actor's tail); whatever the page
seams, its window must equal one retention pass over the whole thread (tool groups kept whole)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from tests._factories import RESOURCE, THREAD, CountingStore, base_time, msg, open_memory, seed, text_msg, tool_part

from threadmind import Message, MessageHistoryConfig
from threadmind._history_window import _PAGE, _retain, group_by_tool_calls, load_token_window
from threadmind.codecs import TextPart
from threadmind.testing import processor_access
from threadmind.tokens import DefaultTokenCounter


def _history(n: int) -> list[Message]:
    """``n`` messages; a call/result pair straddles every page seam (counted from the newest message)."""
    t0 = base_time()
    seams = {n - k * _PAGE for k in range(1, n // _PAGE + 1)}  # index of the newest message of each older page
    out: list[Message] = []
    for i in range(n):
        at = t0 + timedelta(seconds=i)
        if i in seams and i >= 1 and out[-1].role != "assistant":  # the pair is (i-1, i): one on each side
            out[-1] = msg("assistant", tool_part("call", f"c{i}"), id=f"m{i - 1:04d}", at=out[-1].created_at)
            out.append(msg("assistant", TextPart(text=f"result {i}"), tool_part("result", f"c{i}", result="r " * 9),
                           id=f"m{i:04d}", at=at))
            continue
        out.append(text_msg("user" if i % 2 == 0 else "assistant", f"message {i} " + "lorem ipsum " * (i % 7),
                            id=f"m{i:04d}", at=at))
    return out


@pytest.mark.parametrize("budget", [300, 1_500, 4_000, 9_000])
async def test_paged_window_equals_one_pass_over_the_thread(tmp_path: Path, budget: int) -> None:
    history = _history(5 * _PAGE + 7)
    assert any(len(group) > 1 for group in group_by_tool_calls(history[::-1]))  # pairs exist across seams
    counter = DefaultTokenCounter()
    async with open_memory(tmp_path) as memory:
        await seed(memory, history)
        config = MessageHistoryConfig(max_tokens=budget, at_max_remove_tokens=0)
        window = await load_token_window(processor_access(memory), THREAD, RESOURCE, config, None, counter=counter,
                                         use_stored_boundary=False)
        expected, _ = _retain(history[::-1], counter.count_message, None, budget)
        assert [m.id for m in window] == [m.id for m in expected[::-1]]
        ids = {m.id for m in window}
        for group in group_by_tool_calls(history):  # no call without its result, nor the reverse
            assert {m.id for m in group} <= ids or not ({m.id for m in group} & ids)
        if budget == 9_000:
            assert len(window) > 2 * _PAGE  # the window really spans several pages


async def test_pages_from_the_actors_tail_equal_the_stores_pages(tmp_path: Path) -> None:
    """Older pages of the newest TAIL_MAX come from the thread actor's (grown) tail: the same rows, totals and
    has_more as the store's own pages, also after saves merged into the tail at its grown capacity."""
    import random

    from threadmind.actors._thread_actor import TAIL_MAX
    from threadmind.stores import MessageQuery

    rng = random.Random(3)
    t0 = base_time()
    async with open_memory(tmp_path) as memory:
        await seed(memory, [text_msg("user", f"m{i}", id=f"m{i:04d}", at=t0 + timedelta(seconds=i // 3))
                            for i in range(150)])  # equal timestamps in threes: order by insertion
        next_id = 150
        for step in range(40):
            per_page = rng.choice([16, 40, 64, 100])
            for page in range(TAIL_MAX // per_page + 1):
                query = MessageQuery(thread_id=THREAD, resource_id=RESOURCE, page=page, per_page=per_page,
                                     direction="DESC", include_total=False)
                routed = await processor_access(memory).list_messages(query)
                exact = await memory.storage.list_messages(query)
                assert [m.id for m in routed.messages] == [m.id for m in exact.messages], (step, per_page, page)
                assert (routed.page, routed.per_page, routed.has_more) == (exact.page, exact.per_page, exact.has_more)
            batch = [text_msg("assistant", f"m{next_id + k}", id=f"m{next_id + k:04d}",
                              at=t0 + timedelta(seconds=50 + step)) for k in range(rng.randint(1, 4))]
            next_id += len(batch)
            await memory.save_messages(batch)


async def _budget_turns(tmp_path: Path, name: str) -> tuple[list[list[str]], list[int]]:
    """Eleven token-budget turns over a 400-message thread: the texts the model saw, and the store reads."""
    from threadmind.agent import Agent
    from threadmind.models import ScriptedModel

    t0 = base_time()
    async with open_memory(tmp_path, {"messageHistory": {"maxTokens": 1_500, "atMaxRemoveTokens": 0}},
                           counting=True, name=name) as memory:
        await seed(memory, [text_msg("user" if i % 2 == 0 else "assistant", f"message {i} " + "lorem " * 8,
                                     id=f"m{i:04d}", at=t0 + timedelta(seconds=i)) for i in range(400)])
        store = memory.storage
        assert isinstance(store, CountingStore)
        model = ScriptedModel([f"answer {i}" for i in range(11)])
        agent = Agent("a", "i", model, memory=memory)
        reads: list[int] = []
        for i in range(11):
            await agent.generate(f"turn {i}", thread_id=THREAD, resource_id=RESOURCE)
            reads.append(len(store.queries))
        thread = await memory.get_thread_by_id(THREAD)
        assert thread is not None and thread.metadata is not None and "memoryTokenLimiter" in thread.metadata
    return [[m.text for m in request.messages] for request in model.requests], reads


async def test_a_token_budget_window_is_read_from_the_store_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window spans two tail pages: the first turn reads it; the later ones (boundary writes included)
    are served by the thread actor's tail, which grew to hold both pages, and see exactly what the model
    saw when every older page came from the store."""
    seen, reads = await _budget_turns(tmp_path, "grown.db")
    assert len(seen[0]) > _PAGE  # the window really needs a second page
    assert reads[0] >= 1 and reads[-1] == reads[0]  # ten more turns, no message read

    import threadmind.actors._thread_actor as thread_actor
    import threadmind.memory._gateway as memory_module

    monkeypatch.setattr(thread_actor, "TAIL_MAX", thread_actor.TAIL_CAPACITY)
    monkeypatch.setattr(memory_module, "TAIL_MAX", thread_actor.TAIL_CAPACITY)
    seen_before, reads_before = await _budget_turns(tmp_path, "store.db")
    assert reads_before[-1] >= reads_before[0] + 10  # the older page came from the store every turn
    assert seen == seen_before
