"""OpenAIEmbedder against a real local HTTP server: batching, ordering, usage, retries, errors; resolve_embedder."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from tests._openai_server import FakeOpenAI

from threadmind.embedders._openai import OpenAIEmbedder
from threadmind.embedders._protocol import Embedder, Embeddings
from threadmind.embedders._resolve import resolve_embedder
from threadmind.errors import ConfigError, EmbedderError

KEY = "sk-embed-secret-987654321"


def _embedder(server: FakeOpenAI, model: str = "fake-embed", **kwargs: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(model, api_key=KEY, base_url=server.url, **kwargs)


def _expected(texts: list[str], dim: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray([FakeOpenAI.vector_for(t, dim) for t in texts], dtype=np.float32)


class TestEmbed:
    async def test_batches_keep_input_order_even_when_shuffled(self, fake_openai: FakeOpenAI) -> None:
        fake_openai.shuffle_embeddings = True
        texts = [f"text number {i}" for i in range(3000)]
        async with _embedder(fake_openai, max_batch=1000) as embedder:
            result = await embedder.embed(texts)
        sent = fake_openai.requests_to("/embeddings")
        assert [len(r.body["input"]) for r in sent] == [1000, 1000, 1000]
        assert sorted(t for r in sent for t in r.body["input"]) == sorted(texts)
        assert result.vectors.dtype == np.float32 and result.vectors.shape == (3000, 8)
        np.testing.assert_array_equal(result.vectors, _expected(texts, 8))
        assert result.usage_tokens == 3 * 3000
        assert embedder.dimension == 8

    async def test_request_shape_and_dimensions(self, fake_openai: FakeOpenAI) -> None:
        async with _embedder(fake_openai, "text-embedding-3-small", dimensions=16) as embedder:
            assert embedder.dimension == 16
            result = await embedder.embed(["hello world"])
        [sent] = fake_openai.requests
        assert sent.path == "/v1/embeddings"
        assert sent.headers["authorization"] == f"Bearer {KEY}"
        assert sent.body == {"model": "text-embedding-3-small", "input": ["hello world"], "encoding_format": "float",
                             "dimensions": 16}
        np.testing.assert_array_equal(result.vectors, _expected(["hello world"], 16))
        assert result.usage_tokens == 2

    async def test_empty_input_makes_no_request(self, fake_openai: FakeOpenAI) -> None:
        async with _embedder(fake_openai, "text-embedding-3-large") as embedder:
            result = await embedder.embed([])
        assert result.vectors.shape == (0, 3072) and result.usage_tokens == 0
        assert fake_openai.requests == []

    async def test_concurrent_callers(self, fake_openai: FakeOpenAI) -> None:
        results: dict[int, Embeddings] = {}
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=16)) as client:
            embedder = _embedder(fake_openai, client=client)

            async def run(i: int) -> None:
                results[i] = await embedder.embed([f"a{i}", f"b{i}"])

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(run, i)
            await embedder.aclose()
            assert not client.is_closed  # a given client is left to its owner
        for i, result in results.items():
            np.testing.assert_array_equal(result.vectors, _expected([f"a{i}", f"b{i}"], 8))
        assert len(results) == 100

    def test_known_and_unknown_dimensions(self) -> None:
        url = "http://127.0.0.1:1/v1"
        assert OpenAIEmbedder(api_key=KEY, base_url=url).dimension == 1536
        assert OpenAIEmbedder("text-embedding-3-large", api_key=KEY, base_url=url).dimension == 3072
        assert OpenAIEmbedder("text-embedding-ada-002", api_key=KEY, base_url=url).dimension == 1536
        assert OpenAIEmbedder("nomic-embed-text", api_key=KEY, base_url=url).dimension is None
        embedder = OpenAIEmbedder(api_key=KEY, base_url=url, dimensions=256)
        assert (embedder.dimension, embedder.model_id) == (256, "openai/text-embedding-3-small@256")
        assert OpenAIEmbedder(api_key=KEY, base_url=url).model_id == "openai/text-embedding-3-small"
        assert isinstance(embedder, Embedder)
        assert KEY not in repr(embedder)


class TestErrors:
    async def test_retries_then_succeeds(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(429, 1, retry_after="2")
        fake_openai.fail_next(502, 1)
        async with _embedder(fake_openai) as embedder:
            result = await embedder.embed(["x"])
        assert result.vectors.shape == (1, 8)
        assert len(fake_openai.requests) == 3
        assert sleeps[0] == 2.0 and 0.75 <= sleeps[1] <= 1.0

    async def test_exhausted_retries(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(500, 5)
        async with _embedder(fake_openai, max_retries=1) as embedder:
            with pytest.raises(EmbedderError, match="HTTP 500 after 2 attempts") as info:
                await embedder.embed(["x"])
        assert info.value.code == "THREADMIND_EMBEDDER_HTTP_RETRIES_EXHAUSTED"
        assert len(fake_openai.requests) == 2 and len(sleeps) == 1

    async def test_client_error_fails_at_once_without_the_key(self, fake_openai: FakeOpenAI,
                                                              sleeps: list[float]) -> None:
        fake_openai.fail_next(401, body={"error": {"message": f"Incorrect API key provided: {KEY}"}})
        async with _embedder(fake_openai) as embedder:
            with pytest.raises(EmbedderError, match="HTTP 401") as info:
                await embedder.embed(["x"])
        assert KEY not in str(info.value) and "[redacted]" in str(info.value)
        assert sleeps == [] and len(fake_openai.requests) == 1

    @pytest.mark.parametrize("body", [
        pytest.param(b"<html>", id="not-json"),
        pytest.param(b'{"data": []}', id="missing-rows"),
        pytest.param(b'{"data": [{"index": 3, "embedding": [1.0]}]}', id="bad-index"),
        pytest.param(b'{"data": [{"index": 0, "embedding": []}]}', id="empty-vector"),
    ])
    async def test_malformed_answers(self, fake_openai: FakeOpenAI, body: bytes) -> None:
        fake_openai.fail_next(200, body=body)
        async with _embedder(fake_openai) as embedder:
            with pytest.raises(EmbedderError) as info:
                await embedder.embed(["x"])
        assert info.value.code == "THREADMIND_EMBEDDER_BAD_RESPONSE"

    async def test_dimension_differs_from_the_known_one(self, fake_openai: FakeOpenAI) -> None:
        async with _embedder(fake_openai, "text-embedding-3-small") as embedder:  # known 1536, server sends 8
            with pytest.raises(EmbedderError, match="dimension 8, expected 1536"):
                await embedder.embed(["x"])

    async def test_one_failing_batch_fails_the_call(self, fake_openai: FakeOpenAI, sleeps: list[float]) -> None:
        fake_openai.fail_next(400)
        async with _embedder(fake_openai, max_batch=2) as embedder:
            with pytest.raises(EmbedderError, match="HTTP 400") as info:
                await embedder.embed(["a", "b", "c", "d", "e"])
        assert not isinstance(info.value.__context__, BaseExceptionGroup)

    async def test_closed_embedder(self, fake_openai: FakeOpenAI) -> None:
        embedder = _embedder(fake_openai)
        await embedder.embed(["warm"])
        await embedder.aclose()
        with pytest.raises(EmbedderError, match="closed"):
            await embedder.embed(["x"])

    @pytest.mark.parametrize("kwargs", [
        pytest.param({"dimensions": 0}, id="zero-dimensions"),
        pytest.param({"max_batch": 0}, id="zero-batch"),
        pytest.param({"max_retries": -1}, id="negative-retries"),
    ])
    def test_invalid_arguments(self, kwargs: dict[str, Any]) -> None:
        with pytest.raises(ConfigError):
            OpenAIEmbedder(api_key=KEY, base_url="http://127.0.0.1:1/v1", **kwargs)


class _Stub:
    model_id = "stub"
    dimension = 3

    async def embed(self, texts: list[str]) -> Embeddings:
        return Embeddings(vectors=np.zeros((len(texts), 3), dtype=np.float32))


class TestResolveEmbedder:
    def test_openai_string(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        embedder = resolve_embedder("openai/text-embedding-3-small")
        assert isinstance(embedder, OpenAIEmbedder)
        assert (embedder.model, embedder.dimension) == ("text-embedding-3-small", 1536)

    def test_embedders_pass_through(self) -> None:
        stub = _Stub()
        assert resolve_embedder(stub) is stub

    @pytest.mark.parametrize("spec", ["cohere/embed-v3", "text-embedding-3-small", "openai/"])
    def test_bad_strings(self, spec: str) -> None:
        with pytest.raises(ConfigError, match="'openai/<model>'"):
            resolve_embedder(spec)

    def test_other_objects(self) -> None:
        with pytest.raises(ConfigError, match="not object"):
            resolve_embedder(object())  # type: ignore[arg-type]
