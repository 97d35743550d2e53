"""chunk_text (Mastra's chunkText with its measured examples), the text rule, and the embedding cache."""

from __future__ import annotations

import numpy as np
import pytest

from threadmind.codecs import Message, MessageContent, TextPart, ToolInvocation, ToolInvocationPart
from threadmind.embedders._cache import EmbeddingCache
from threadmind.embedders._chunking import chunk_text, message_text
from threadmind.errors import ConfigError

from ._support import EPOCH


class TestChunkText:
    def test_measured_whitespace_example(self) -> None:
        assert chunk_text("  hello   world  ") == ["hello world "]

    def test_measured_long_word_example(self) -> None:
        # tokenSize 10 → a budget of 40 characters.
        assert chunk_text("short " + "y" * 43 + " tail", 40) == ["short", "y" * 40, "yyy", "tail"]

    def test_greedy_packing_never_exceeds_budget(self) -> None:
        text = " ".join(f"w{i:03d}" for i in range(100))  # 100 words of 4 chars
        chunks = chunk_text(text, 20)
        assert all(len(c) <= 20 for c in chunks)
        assert chunks[0] == "w000 w001 w002 w003"  # 19 chars; one more word would make 24
        assert " ".join(chunks).split() == text.split()

    def test_default_budget_is_16384(self) -> None:
        assert chunk_text("x" * 16384) == ["x" * 16384]
        assert chunk_text("x" * 16385) == ["x" * 16384, "x"]

    def test_blank_text_has_no_chunks(self) -> None:
        assert chunk_text(" \n\t ") == []

    def test_lengths_are_utf16_units(self) -> None:
        # "😀" is two UTF-16 units, as in JavaScript: two of them fill a budget of 4.
        assert chunk_text("😀😀 a", 4) == ["😀😀", "a"]
        assert chunk_text("😀😀😀", 4) == ["😀😀", "😀"]


class TestMessageText:
    def _message(self, content: MessageContent) -> Message:
        return Message(id="m", role="user", content=content, created_at=EPOCH)

    def test_content_string_wins_when_not_blank(self) -> None:
        content = MessageContent(parts=[TextPart(text="part")], content="  the content ")
        assert message_text(self._message(content)) == "  the content "

    def test_blank_content_falls_back_to_trimmed_text_parts(self) -> None:
        content = MessageContent(parts=[TextPart(text=" one"), TextPart(text="two ")], content="   ")
        assert message_text(self._message(content)) == "one two"

    def test_message_without_text(self) -> None:
        call = ToolInvocationPart(tool_invocation=ToolInvocation(state="call", tool_call_id="c", tool_name="t"))
        assert message_text(self._message(MessageContent(parts=[call]))) == ""


class TestEmbeddingCache:
    def test_lru_eviction_and_hits(self) -> None:
        cache = EmbeddingCache(2)
        cache.put("m", "a", np.ones(3, dtype=np.float32))
        cache.put("m", "b", np.zeros(3, dtype=np.float32))
        assert cache.get("m", "a") is not None  # a becomes most recent
        cache.put("m", "c", np.zeros(3, dtype=np.float32))
        assert cache.get("m", "b") is None
        assert cache.get("other-model", "a") is None
        vector = cache.get("m", "a")
        assert vector is not None and vector.dtype == np.float32 and not vector.flags.writeable
        assert len(cache) == 2 and cache.hits == 2 and cache.misses == 2

    def test_entries_are_copies(self) -> None:
        cache = EmbeddingCache(4)
        source = np.arange(4, dtype=np.float32)
        cache.put("m", "a", source)
        source[0] = 99.0  # the caller's array changes after the put
        cached = cache.get("m", "a")
        assert cached is not None and cached.tolist() == [0.0, 1.0, 2.0, 3.0]
        with pytest.raises(ValueError):
            cached[1] = 5.0  # and nobody changes a cached vector in place
        cache.put("m", "b", np.arange(3, dtype=np.float64))  # type: ignore[arg-type]  # other dtypes are stored as float32
        other = cache.get("m", "b")
        assert other is not None and other.dtype == np.float32 and other.tolist() == [0.0, 1.0, 2.0]

    def test_zero_disables_and_negative_is_rejected(self) -> None:
        cache = EmbeddingCache(0)
        cache.put("m", "a", np.ones(3, dtype=np.float32))
        assert cache.get("m", "a") is None
        with pytest.raises(ConfigError, match="cache_size"):
            EmbeddingCache(-1)


def test_short_text_fast_path_matches_word_packing() -> None:
    import random

    from threadmind.embedders._chunking import _pack_words

    rng = random.Random(7)
    pieces = ["a", "word", "é", "日本", "😀", " ", "  ", "\t", "\n", "\u00a0", "\u3000", "x" * 9]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        budget = rng.randint(2 * len(text), 2 * len(text) + 40) or 1
        assert chunk_text(text, budget) == _pack_words(text, budget), repr(text)
