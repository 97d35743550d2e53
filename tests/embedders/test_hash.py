"""HashEmbedder: WORKLOAD.md §7 exactly, vectorised, off the loop for big batches, and Mastra-fixture compatible."""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from threadmind.embedders import _hash
from threadmind.embedders._hash import HashEmbedder, _chunk_counts, _normalise
from threadmind.embedders._protocol import Embedder
from threadmind.errors import ConfigError, ValidationError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra-1.71"  # a copy of ../shared/fixtures
FIRST_MESSAGE = (
    "context schedule and might compare delta large golf cancel tokyo might table remember message user "
    "assistant window delta schedule charlie or recipe column must from node meeting blue thanks bag recipe"
)
SAMPLES = [
    FIRST_MESSAGE,
    "",
    "a",
    "ab",
    "abc",
    "ABC abc",
    "Bonjour ! café ✓ 日本語 🚀 — \"quotes\", back\\slash second line",
    "🚀",
    "🚀🚀x",
    "\ud800ab",  # a lone surrogate is one code unit, as in JavaScript
    "x" * 500,
    "The booking needs your confirmation, and the hotel search failed.",
]


def reference_embedding(text: str, dim: int) -> npt.NDArray[np.float64]:
    """WORKLOAD.md §7 written out literally, one window at a time."""
    raw = text.lower().encode("utf-16-le", "surrogatepass")
    units = [raw[i] | (raw[i + 1] << 8) for i in range(0, len(raw), 2)]
    v = [0] * dim
    for i in range(len(units) - 2):
        h = 2166136261
        for c in units[i:i + 3]:
            h = ((h ^ c) * 16777619) % 2**32
        v[h % dim] += -1 if h >= 2**31 else 1
    total = 0.0
    for x in v:
        total += float(x) * x
    norm = math.sqrt(total)
    if norm == 0.0:
        v = [1] + [0] * (dim - 1)
        norm = 1.0
    return np.array([x / norm for x in v], dtype=np.float64)


class TestHashEmbedder:
    def test_protocol_and_identity(self) -> None:
        embedder = HashEmbedder()
        assert isinstance(embedder, Embedder)
        assert embedder.dimension == 384
        assert embedder.model_id == "hash-trigram-fnv1a-384"
        assert HashEmbedder(16).model_id == "hash-trigram-fnv1a-16"
        assert repr(HashEmbedder(16)) == "HashEmbedder(dim=16)"

    def test_workload_check_value(self) -> None:
        exact = _normalise(_chunk_counts([FIRST_MESSAGE], 384))[0]
        assert np.count_nonzero(exact) == 132
        total = 0.0
        for x in exact.tolist():  # summed in index order, as WORKLOAD.md states it
            total += x
        assert total == -1.6648913231411602

    async def test_first_message_vector(self) -> None:
        result = await HashEmbedder().embed([FIRST_MESSAGE])
        assert result.vectors.dtype == np.float32
        assert result.vectors.shape == (1, 384)
        expected = reference_embedding(FIRST_MESSAGE, 384).astype(np.float32)
        assert np.array_equal(result.vectors[0], expected)
        assert result.usage_tokens == math.ceil(len(FIRST_MESSAGE) / 4)

    def test_fnv_value_of_abc(self) -> None:
        # "abc" has one window whose hash is FNV-1a-32("abc") = 440920331 (< 2^31, so +1).
        dim = 2**20
        vector = HashEmbedder(dim).embed_sync(["abc"]).vectors[0]
        assert np.flatnonzero(vector).tolist() == [440920331 % dim]
        assert vector[440920331 % dim] == 1.0

    @pytest.mark.parametrize("dim", [1, 7, 16, 384])
    def test_matches_literal_algorithm(self, dim: int) -> None:
        vectors = HashEmbedder(dim).embed_sync(SAMPLES).vectors
        expected = np.stack([reference_embedding(t, dim) for t in SAMPLES]).astype(np.float32)
        assert np.array_equal(vectors, expected)

    def test_batches_do_not_leak_windows_across_texts(self) -> None:
        # Shuffled mixtures of short and long texts, across several internal chunks.
        rng = np.random.default_rng(7)
        texts = [SAMPLES[i] for i in rng.integers(0, len(SAMPLES), size=300)]
        embedder = HashEmbedder(32)
        batch = embedder.embed_sync(texts).vectors
        single = np.stack([embedder.embed_sync([t]).vectors[0] for t in texts])
        assert np.array_equal(batch, single)

    def test_zero_vector_becomes_e0(self) -> None:
        vectors = HashEmbedder(8).embed_sync(["", "ab", "🚀"]).vectors  # "🚀" is only two code units
        assert vectors.tolist() == [[1.0, 0, 0, 0, 0, 0, 0, 0]] * 3

    def test_rows_are_unit_length(self) -> None:
        vectors = HashEmbedder().embed_sync(SAMPLES).vectors
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)

    def test_usage_counts_utf16_units(self) -> None:
        result = HashEmbedder().embed_sync(["abcde", "", "🚀🚀", "abcd"])
        assert result.usage_tokens == 2 + 0 + 1 + 1

    async def test_empty_batch(self) -> None:
        result = await HashEmbedder(16).embed([])
        assert result.vectors.shape == (0, 16)
        assert result.vectors.dtype == np.float32
        assert result.usage_tokens == 0

    def test_invalid_arguments(self) -> None:
        for bad in (0, -1, 2.5, True):
            with pytest.raises(ConfigError, match="dim"):
                HashEmbedder(bad)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match=r"texts\[1\]"):
            HashEmbedder().embed_sync(["ok", 3])  # type: ignore[list-item]

    async def test_large_batches_run_in_a_worker_thread(self, monkeypatch: pytest.MonkeyPatch) -> None:
        threads: list[int] = []
        original = _hash._embed_batch

        def spy(texts: list[str], dim: int) -> Any:
            threads.append(threading.get_ident())
            return original(texts, dim)

        monkeypatch.setattr(_hash, "_embed_batch", spy)
        embedder = HashEmbedder(16)
        await embedder.embed(["small"] * 64)
        await embedder.embed(["large"] * 65)
        assert threads[0] == threading.get_ident()
        assert threads[1] != threading.get_ident()

    async def test_many_concurrent_callers(self) -> None:
        embedder = HashEmbedder(64)
        batches = [[f"text {i} {j}" for j in range(1 + (i % 3) * 50)] for i in range(200)]
        results: dict[int, npt.NDArray[np.float32]] = {}

        async def run(i: int) -> None:
            results[i] = (await embedder.embed(batches[i])).vectors

        async with anyio.create_task_group() as tg:
            for i in range(len(batches)):
                tg.start_soon(run, i)
        for i, batch in enumerate(batches):
            assert np.array_equal(results[i], embedder.embed_sync(batch).vectors)


@pytest.fixture
def fixture_rows(tmp_path: Path) -> tuple[dict[str, Any], list[tuple[str, bytes, dict[str, Any]]]]:
    if not (FIXTURE / "memory.db").exists():
        pytest.skip("the Mastra 1.71 fixture is not available")
    manifest: dict[str, Any] = json.loads((FIXTURE / "manifest.json").read_text())
    copy = tmp_path / "memory.db"
    shutil.copyfile(FIXTURE / "memory.db", copy)
    with contextlib.closing(sqlite3.connect(copy)) as db:
        rows = db.execute("SELECT vector_id, embedding, metadata FROM memory_messages_16 NOT INDEXED").fetchall()
    return manifest, [(vid, blob, json.loads(meta)) for vid, blob, meta in rows]


class TestMastraFixture:
    def test_writer_used_this_algorithm(
        self, fixture_rows: tuple[dict[str, Any], list[tuple[str, bytes, dict[str, Any]]]]
    ) -> None:
        manifest, _ = fixture_rows
        assert manifest["writer"]["embedder"]["dimension"] == 16
        assert "FNV-1a-32" in manifest["writer"]["embedder"]["algorithm"]

    def test_reproduces_every_stored_vector(
        self, fixture_rows: tuple[dict[str, Any], list[tuple[str, bytes, dict[str, Any]]]]
    ) -> None:
        _, rows = fixture_rows
        assert len(rows) == 23
        # Mastra embeds the message text with whitespace runs collapsed to one space.
        texts = [re.sub(r"\s+", " ", meta["content"]) for _, _, meta in rows]
        stored = np.stack([np.frombuffer(blob, dtype="<f4") for _, blob, _ in rows])
        assert np.array_equal(HashEmbedder(16).embed_sync(texts).vectors, stored)

    async def test_semantic_probe_scores(
        self, fixture_rows: tuple[dict[str, Any], list[tuple[str, bytes, dict[str, Any]]]]
    ) -> None:
        manifest, rows = fixture_rows
        probe = manifest["semantic_probe"]
        query = (await HashEmbedder(16).embed([probe["vectorSearchString"]])).vectors[0]
        wanted = probe["vector_query"]["filter"]["thread_id"]
        scores: dict[str, float] = {}
        for _, blob, meta in rows:
            if meta["thread_id"] == wanted:
                vector = np.frombuffer(blob, dtype="<f4")
                cosine = np.dot(query, vector) / (np.linalg.norm(query) * np.linalg.norm(vector))
                scores[meta["message_id"]] = float(cosine)
        ranked = sorted(scores, key=lambda k: -scores[k])[: probe["vector_query"]["topK"]]
        hits = probe["vector_query"]["hits"]
        assert ranked == [hit["message_id"] for hit in hits]
        for hit in hits:
            assert scores[hit["message_id"]] == pytest.approx(hit["score"], abs=1e-6)
