"""WordLlamaEmbedder: a real model from the files of its wheel, off the event loop, finding by meaning."""

from __future__ import annotations

import numpy as np
import pytest

from threadmind import Memory, Message
from threadmind.embedders import Embedder, HashEmbedder, WordLlamaEmbedder
from threadmind.errors import ConfigError
from threadmind.stores import HnswVectorStore, InMemoryStore

pytest.importorskip("wordllama")


async def test_it_embeds_offline_into_unit_vectors_of_its_dimension() -> None:
    embedder = WordLlamaEmbedder()
    assert isinstance(embedder, Embedder) and embedder.dimension == 256
    out = await embedder.embed(["I want to fly to Tokyo in April", "a flight to Japan", "the cat sleeps"])
    assert out.vectors.shape == (3, 256) and out.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(out.vectors, axis=1), 1.0, atol=1e-5)
    tokyo, japan, cat = out.vectors
    assert float(tokyo @ japan) > 0.6 > float(tokyo @ cat)  # by meaning: few letters are shared


async def test_a_text_with_no_known_word_is_the_zero_vector_not_nan() -> None:
    out = await WordLlamaEmbedder(dim=64).embed(["", "\ud800", "hello"])
    assert out.vectors.shape == (3, 64) and np.isfinite(out.vectors).all()
    assert float(np.linalg.norm(out.vectors[0])) == 0.0


def test_only_the_trained_sizes_are_accepted() -> None:
    for bad in (0, 100, 512, True):
        with pytest.raises(ConfigError, match="dim must be one of"):
            WordLlamaEmbedder(dim=bad)


async def test_semantic_recall_finds_by_meaning_where_the_hash_embedder_does_not(tmp_path: object) -> None:
    """The quick start's pair: "a flight to Japan" finds the Tokyo message among unrelated ones."""
    found = {}
    for name, embedder in (("wordllama", WordLlamaEmbedder()), ("hash", HashEmbedder(dim=256))):
        memory = Memory(storage=InMemoryStore(), vector=HnswVectorStore(), embedder=embedder,
                        options={"semanticRecall": {"topK": 1, "messageRange": 0}})
        async with memory:
            await memory.create_thread(thread_id="t", resource_id="r")
            await memory.save_messages([Message.user(text, thread_id="t", resource_id="r") for text in (
                "I want to fly to Tokyo in April", "Can you recommend a good pasta recipe?",
                "My fantasy novel needs a plot twist", "Jasper is hungry again")])
            hits = await memory.search_vectors("a flight to Japan", top_k=1, resource_id="r")
            found[name] = (await memory.storage.get_messages_by_id([hits[0].message_id]))[0].text
    assert found["wordllama"] == "I want to fly to Tokyo in April"
