"""An OpenAI-compatible ``/embeddings`` client implementing the :class:`Embedder` protocol (extra ``[openai]``).

Large inputs are split into batches of ``max_batch`` texts, sent a few at a time, and reassembled in input
order using each item's ``index`` (servers may answer out of order). Retries and error text follow the
chat model's policy (``threadmind.models._http``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import msgspec
import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, EmbedderError
from ..models._http import OpenAIHTTP
from ._protocol import Embeddings

if TYPE_CHECKING:
    import httpx

__all__ = ("KNOWN_DIMENSIONS", "OpenAIEmbedder")

KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_CONCURRENT_BATCHES = 4


class _WireItem(msgspec.Struct):
    index: int
    embedding: list[float]


class _WireUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    total_tokens: int | None = None


class _WireEmbeddings(msgspec.Struct):
    data: list[_WireItem]
    usage: _WireUsage | None = None


_decoder = msgspec.json.Decoder(_WireEmbeddings)
_THREAD_PARSE_BYTES = 1 << 20


def _parse(raw: bytes, count: int) -> tuple[npt.NDArray[np.float32], int]:
    """Rows placed by ``index`` (each of 0..count-1 exactly once, one shared length) and the billed tokens."""
    try:
        answer = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise EmbedderError(f"the embeddings response is malformed: {exc}",
                            code="THREADMIND_EMBEDDER_BAD_RESPONSE") from exc
    items = answer.data
    indexes = [item.index for item in items]
    if len(items) != count or sorted(indexes) != list(range(count)):
        raise EmbedderError(
            f"the embeddings response has {len(items)} items with indexes that do not cover 0..{count - 1}",
            code="THREADMIND_EMBEDDER_BAD_RESPONSE",
        )
    width = len(items[0].embedding)
    if width == 0 or any(len(item.embedding) != width for item in items):
        raise EmbedderError("the embeddings response mixes vector lengths or has empty vectors",
                            code="THREADMIND_EMBEDDER_BAD_RESPONSE")
    vectors = np.asarray([item.embedding for item in items], dtype=np.float32)
    if indexes != list(range(count)):
        ordered = np.empty_like(vectors)
        ordered[np.asarray(indexes)] = vectors
        vectors = ordered
    usage = answer.usage
    tokens = 0 if usage is None else (usage.prompt_tokens or usage.total_tokens or 0)
    return vectors, tokens


def _first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


class OpenAIEmbedder:
    """Embeds texts through an OpenAI-compatible ``/embeddings`` endpoint.

    ``dimension`` is known up front for OpenAI's models (or from ``dimensions``), else learnt from the first
    answer. ``api_key`` and ``base_url`` fall back to ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``. Close it with
    :meth:`aclose` or ``async with``; a given ``client`` is never closed here.

    :raises ~threadmind.errors.ConfigError: httpx is missing, or an argument is invalid.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        dimensions: int | None = None,
        max_batch: int = 2048,
        max_retries: int = 3,
        timeout: float = 60.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"OpenAIEmbedder: model must be a non-empty string, got {model!r}")
        if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)
                                       or dimensions < 1):
            raise ConfigError(f"OpenAIEmbedder: dimensions must be a positive integer or None, got {dimensions!r}")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ConfigError(f"OpenAIEmbedder: max_batch must be a positive integer, got {max_batch!r}")
        self.model = model
        self._dimensions = dimensions
        self._dimension: int | None = dimensions if dimensions is not None else KNOWN_DIMENSIONS.get(model)
        self._max_batch = max_batch
        self._http = OpenAIHTTP(
            owner="OpenAIEmbedder",
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            client=client,
            error=EmbedderError,
            code_prefix="THREADMIND_EMBEDDER",
        )

    @property
    def model_id(self) -> str:
        """``openai/<model>``, plus ``@<dimensions>`` when a reduced dimension was asked for."""
        suffix = f"@{self._dimensions}" if self._dimensions is not None else ""
        return f"openai/{self.model}{suffix}"

    @property
    def dimension(self) -> int | None:
        """The vector length: known for OpenAI models or from ``dimensions``, else after the first call."""
        return self._dimension

    async def embed(self, texts: list[str]) -> Embeddings:
        """Embed ``texts``; row ``i`` belongs to ``texts[i]`` and ``usage_tokens`` sums every batch.

        :raises ~threadmind.errors.EmbedderError: HTTP 4xx (at once), 429/5xx/network failures after the
            retries, a malformed answer (wrong count, indexes or dimension), or a closed embedder.
        """
        if not texts:
            await anyio.lowlevel.checkpoint()
            return Embeddings(vectors=np.zeros((0, self._dimension or 0), dtype=np.float32), usage_tokens=0)
        batches = [texts[i:i + self._max_batch] for i in range(0, len(texts), self._max_batch)]
        results: list[tuple[npt.NDArray[np.float32], int] | None] = [None] * len(batches)
        limiter = anyio.CapacityLimiter(_CONCURRENT_BATCHES)

        async def run(slot: int) -> None:
            async with limiter:
                results[slot] = await self._embed_batch(batches[slot])

        if len(batches) == 1:
            await run(0)
        else:
            failure: BaseException | None = None
            try:
                async with anyio.create_task_group() as tg:
                    for slot in range(len(batches)):
                        tg.start_soon(run, slot)
            except BaseExceptionGroup as group:
                # The first failing batch cancels the others; callers see its EmbedderError, not a group.
                matched, _rest = group.split(EmbedderError)
                if matched is None:
                    raise
                failure = _first_leaf(matched)
            if failure is not None:
                raise failure  # outside the except block, so its own cause (not the group) is what is chained
        done = [r for r in results if r is not None]
        vectors = done[0][0] if len(done) == 1 else np.concatenate([v for v, _ in done], axis=0)
        return Embeddings(vectors=vectors, usage_tokens=sum(tokens for _, tokens in done))

    async def _embed_batch(self, batch: list[str]) -> tuple[npt.NDArray[np.float32], int]:
        payload: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self._dimensions is not None:
            payload["dimensions"] = self._dimensions
        raw = await self._http.post(
            "/embeddings", msgspec.json.encode(payload), what=f"embeddings ({self.model}, {len(batch)} texts)"
        )
        if len(raw) > _THREAD_PARSE_BYTES:  # a full batch is tens of MB of JSON: decode off the event loop
            vectors, tokens = await anyio.to_thread.run_sync(_parse, raw, len(batch))
        else:
            vectors, tokens = _parse(raw, len(batch))
        width = vectors.shape[1]
        if self._dimension is not None and width != self._dimension:
            raise EmbedderError(
                f"{self.model} returned vectors of dimension {width}, expected {self._dimension}",
                code="THREADMIND_EMBEDDER_BAD_RESPONSE",
            )
        self._dimension = width
        return vectors, tokens

    async def aclose(self) -> None:
        """Close the HTTP client if this embedder created it."""
        await self._http.aclose()

    async def __aenter__(self) -> OpenAIEmbedder:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self._http.display_url!r}, dimension={self._dimension})"
