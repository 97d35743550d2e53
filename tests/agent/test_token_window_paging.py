"""The token-window loader reads history in pages (the first from the thread actor's tail); whatever the page
seams, its window must equal one retention pass over the whole thread (tool groups kept whole)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from threadmind import Message, MessageHistoryConfig
from threadmind._history import _PAGE, _retain, group_by_tool_calls, load_token_window
from threadmind.codecs import TextPart
from threadmind.tokens import DefaultTokenCounter

from ._support import RESOURCE, THREAD, base_time, msg, open_memory, seed, text_msg, tool_part


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
        window = await load_token_window(memory._routed, THREAD, RESOURCE, config, None, counter=counter,
                                         use_stored_boundary=False)
        expected, _ = _retain(history[::-1], counter.count_message, None, budget)
        assert [m.id for m in window] == [m.id for m in expected[::-1]]
        ids = {m.id for m in window}
        for group in group_by_tool_calls(history):  # no call without its result, nor the reverse
            assert {m.id for m in group} <= ids or not ({m.id for m in group} & ids)
        if budget == 9_000:
            assert len(window) > 2 * _PAGE  # the window really spans several pages
