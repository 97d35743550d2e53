"""Embedder calls shared by the saves that embed before they commit (``IndexActor.rows_for_save``, where the vector
store writes its rows in the save's own statement): at most :data:`SHARED_CALLS` calls at once, and the texts of
saves that arrive meanwhile go together in the next call, as the index actor's batches do for the other saves. So
32 concurrent semantic saves make a handful of embedder calls (requests to a paid, rate-limited API) instead of 32,
and a lone save calls at once.

A caller gets its own texts' vectors and their share of the usage tokens (by length, as a batch shares them). A
failed call fails every caller of it (each then retries its own texts alone, as the batch path does); a caller
cancelled before its call went leaves it, and if the caller that sent a call is cancelled while it runs, the others
call for themselves.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import anyio
import numpy as np
import numpy.typing as npt

__all__ = ("MAX_SHARED_TEXTS", "SHARED_CALLS", "SharedEmbedCalls")

F32 = npt.NDArray[np.float32]
EmbedCall = Callable[[list[str]], Awaitable[tuple[F32, int]]]

SHARED_CALLS = 2
"""Embedder calls in flight for saves before further saves' texts wait to go together in the next one."""
MAX_SHARED_TEXTS = 256
"""The most texts one shared call carries (more waiting form another call)."""


class _Abandoned(Exception):
    """The caller that sent a shared call was cancelled while it ran."""


class _Call:
    """Texts waiting to go as one embedder call, and its outcome."""

    __slots__ = ("callers", "done", "error", "granted", "started", "texts", "tokens", "vectors")

    def __init__(self) -> None:
        self.texts: dict[str, None] = {}
        self.callers = 0
        self.granted = anyio.Event()  # a call slot is free for it
        self.started = False
        self.done = anyio.Event()
        self.vectors: F32 | None = None
        self.tokens = 0
        self.error: BaseException | None = None


def _share(texts: Sequence[str], batch: Sequence[str], vectors: F32,
           tokens: int) -> tuple[dict[str, F32], dict[str, float]]:
    """``texts``' vectors out of ``batch``'s, and their usage tokens (the call's, shared by length)."""
    at = {text: i for i, text in enumerate(batch)}
    total = sum(len(text) for text in batch) or 1
    return ({text: vectors[at[text]] for text in texts}, {text: tokens * len(text) / total for text in texts})


class SharedEmbedCalls:
    """Runs ``call`` (one validated embedder call) for concurrent callers, sharing calls (see the module)."""

    def __init__(self, call: EmbedCall, calls: int = SHARED_CALLS) -> None:
        self._call = call
        self._free = max(1, calls)
        self._waiting: deque[_Call] = deque()

    async def embed(self, texts: list[str]) -> tuple[dict[str, F32], dict[str, float]]:
        """The vectors of ``texts`` (distinct) and their usage tokens, from a call shared with concurrent callers.

        :raises EmbedderError: the call failed (or ``EmbeddingDimensionMismatch``), as the embedder call raises.
        """
        if self._free > 0 and not self._waiting:
            self._free -= 1
            try:
                vectors, tokens = await self._call(texts)
            finally:
                self._release()
            return _share(texts, texts, vectors, tokens)
        call = self._join(texts)
        call.callers += 1
        try:
            await call.granted.wait()
        except BaseException:
            call.callers -= 1
            if not call.started and not call.callers:  # nobody left to send it
                if call.granted.is_set():
                    self._release()
                else:
                    self._waiting.remove(call)
            raise
        if not call.started:
            call.started = True  # the first of its callers to wake sends it
            await self._send(call)
        else:
            await call.done.wait()
        if isinstance(call.error, _Abandoned):
            vectors, tokens = await self._call(texts)
            return _share(texts, texts, vectors, tokens)
        if call.error is not None:
            raise call.error
        assert call.vectors is not None
        return _share(texts, list(call.texts), call.vectors, call.tokens)

    def _join(self, texts: Sequence[str]) -> _Call:
        for call in self._waiting:
            if len(call.texts) + len(texts) <= MAX_SHARED_TEXTS:
                call.texts.update(dict.fromkeys(texts))
                return call
        call = _Call()
        call.texts.update(dict.fromkeys(texts))
        self._waiting.append(call)
        return call

    def _release(self) -> None:
        """A call ended: the oldest waiting one takes its slot."""
        while self._waiting:
            call = self._waiting.popleft()
            if call.callers:
                call.granted.set()
                return
        self._free += 1

    async def _send(self, call: _Call) -> None:
        try:
            call.vectors, call.tokens = await self._call(list(call.texts))
        except Exception as exc:
            call.error = exc
        except BaseException:
            call.error = _Abandoned()
            raise
        finally:
            call.done.set()
            self._release()
