"""Helpers for the streaming tests: a paced model stream, a gated store, and event collection."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

import anyio

from threadmind.agent import AgentStream
from threadmind.events import StreamEvent, TextDeltaEvent
from threadmind.models import ModelChunk
from threadmind.stores import SQLiteStore


class Paced:
    """A scripted model stream: yields ``before``, then waits on ``gate`` (forever unless it is set), then
    ``after``. Records how many chunks were taken from it and whether it was closed."""

    def __init__(self, before: Sequence[ModelChunk | str] = (), after: Sequence[ModelChunk | str] = ()) -> None:
        self.before = list(before)
        self.after = list(after)
        self.gate = anyio.Event()
        self.waiting = anyio.Event()  # set once it waits on the gate
        self.taken = 0
        self.closed = False

    async def stream(self) -> AsyncGenerator[ModelChunk | str, None]:
        try:
            for chunk in self.before:
                self.taken += 1
                yield chunk
            self.waiting.set()
            await self.gate.wait()
            for chunk in self.after:
                self.taken += 1
                yield chunk
        finally:
            self.closed = True


class Endless:
    """A model stream that never ends on its own: ``word0 word1 ...``; counts what was taken, notes its close."""

    def __init__(self) -> None:
        self.taken = 0
        self.closed = False

    async def stream(self) -> AsyncGenerator[str, None]:
        try:
            while True:
                await anyio.lowlevel.checkpoint()
                yield f" w{self.taken}" if self.taken else "w0"
                self.taken += 1
        finally:
            self.closed = True


class GatedStore:
    """A real SQLite store whose message saves wait on ``gate`` once ``armed`` (then ``entered`` is set)."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.armed = False
        self.gate = anyio.Event()
        self.entered = anyio.Event()
        self.saves = 0

    async def save_messages(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.entered.set()
            await self.gate.wait()
        result = await self.inner.save_messages(*args, **kwargs)
        self.saves += 1
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def collect(stream: AgentStream) -> list[StreamEvent]:
    """Every event of ``stream`` (entered here)."""
    async with stream:
        return [event async for event in stream]


def types(events: Sequence[StreamEvent]) -> list[str]:
    """The chunk names of ``events``."""
    return [e.type for e in events]


def streamed_text(events: Sequence[StreamEvent]) -> str:
    """The text deltas joined."""
    return "".join(e.delta for e in events if isinstance(e, TextDeltaEvent))
