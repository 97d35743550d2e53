"""The exact (BPE) counter behind the TokenCounter protocol, and Memory budgets that use it."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadmind import Memory, Message
from threadmind.errors import ConfigError
from threadmind.stores import SQLiteStore
from threadmind.tokens import DefaultTokenCounter, ExactTokenCounter, TokenCounter


def test_exact_counts_are_real_bpe_tokens() -> None:
    counter = ExactTokenCounter()
    assert isinstance(counter, TokenCounter)
    assert counter.count_text("hello world") == 2
    assert counter.count_text("The quick brown fox jumps over the lazy dog.") == 10
    # the estimator says 1 token per short CJK char run segment; BPE disagrees on long words
    word = "antidisestablishmentarianism"
    assert counter.count_text(word) != DefaultTokenCounter().count_text(word)
    # message framing is the reference's: role + 3.8, rounded
    assert counter.count_message(Message.user("hello")) == 6


def test_unknown_encoding_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown encoding"):
        ExactTokenCounter("no-such-encoding")


async def test_memory_uses_its_token_counter(tmp_path: Path) -> None:
    exact = ExactTokenCounter()
    text = " ".join(["antidisestablishmentarianism"] * 20)
    options = {"messageHistory": {"maxTokens": 250, "atMaxRemoveTokens": 0}}
    memory = Memory(storage=SQLiteStore(tmp_path / "m.db"), token_counter=exact, options=options)
    assert memory.estimate_tokens(text) == exact.count_text(text) != DefaultTokenCounter().count_text(text)
    async with memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([Message.user(text, id=f"m{i}", thread_id="t", resource_id="r") for i in range(5)])
        window = await memory.recall("t", resource_id="r")
        # exact: 125 tokens a message -> one fits in 250 - 24; the estimator (105 each) would keep two
        assert exact.count_message(window.messages[0]) == 125
        assert [m.id for m in window.messages] == ["m4"]
    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options=options) as estimated:
        assert [m.id for m in (await estimated.recall("t", resource_id="r")).messages] == ["m3", "m4"]
