"""The asyncio-specific pieces of threadmind, in one place: the only module that imports asyncio.

threadmind runs on asyncio (directly, or under anyio's asyncio backend; aiosqlite, its SQLite driver, is
asyncio-only, so trio is not supported). Everything else is written against anyio; the few things anyio does not
offer, or offers at a cost that shows on the hot path, live here: reply futures for mailbox round trips, fast
events, shielded waits that outlive a cancelled caller, and the host task that owns a Memory's actor system so
``start()``/``aclose()`` work from any task and under any timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TypeVar

__all__ = ("FastEvent", "HostTask", "Reply", "new_reply", "running_loop", "shielded")

T = TypeVar("T")

#: The reply slot of one mailbox round trip (an asyncio future: the actor sets it, the caller awaits it).
Reply = asyncio.Future

#: An event for the hot paths (a save's commit gate, the index actor's per-operation events, a parked writer):
#: asyncio's, where an anyio Event costs a backend lookup per creation (~3 µs) and a checkpoint per wait.
FastEvent = asyncio.Event


def new_reply() -> asyncio.Future[Any]:
    """A fresh reply slot (or parking spot) on the running loop."""
    return asyncio.get_running_loop().create_future()


def running_loop() -> asyncio.AbstractEventLoop:
    """The running event loop (for ``call_soon_threadsafe`` from a driver's worker thread)."""
    return asyncio.get_running_loop()


async def shielded(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even if the caller is cancelled meanwhile (the cancellation is re-raised
    to the caller at once; the work itself goes on)."""
    return await asyncio.shield(awaitable)


class HostTask:
    """Runs ``body(stack)`` in a task of its own until :meth:`stop`, then unwinds ``stack``.

    ``body`` enters whatever must live for the host's lifetime (stores, task groups, actor registries) on
    the given ``AsyncExitStack``. Task groups and cancel scopes must be entered and exited by the same task;
    owning them in a dedicated task lets callers start and stop from any task, under any timeout: a
    cancelled ``start()`` leaves nothing running, and a ``stop()`` whose caller gives up still finishes.
    """

    def __init__(self, body: Callable[[AsyncExitStack], Awaitable[None]], *, name: str) -> None:
        self._body = body
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None

    @property
    def running(self) -> bool:
        """Started successfully and not yet stopped."""
        started = self._started
        return (started is not None and started.done() and not started.cancelled()
                and started.exception() is None and self._task is not None and not self._task.done())

    async def start(self) -> None:
        """Start the host and wait until ``body`` has entered everything; re-raises what ``body`` raised.

        Concurrent calls share one start; after a failed or interrupted start, a later call tries afresh.
        """
        if self._started is None:
            loop = asyncio.get_running_loop()
            self._started = loop.create_future()
            self._stop = asyncio.Event()
            self._task = loop.create_task(self._run(self._started, self._stop), name=self._name)
        started = self._started
        try:
            await asyncio.shield(started)
        except BaseException:
            if not started.done() or started.cancelled() or started.exception() is not None:
                await self.stop()  # a failed or interrupted start leaves nothing running
                if self._started is started:
                    self._task = self._started = self._stop = None
            raise

    async def stop(self) -> None:
        """Tell the host to unwind and wait for it (shielded: a caller that gives up does not stop the unwind).

        :raises BaseException: what unwinding raised.
        """
        task, stop = self._task, self._stop
        if task is None or stop is None:
            return
        stop.set()
        await asyncio.shield(task)

    async def _run(self, started: asyncio.Future[None], stop: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                await self._body(stack)
                started.set_result(None)
                await stop.wait()
        except BaseException as exc:
            if started.done():
                raise  # a failure while unwinding: stop() reports it
            if isinstance(exc, asyncio.CancelledError):
                started.cancel()
            else:
                started.set_exception(_single(exc))


def _single(exc: BaseException) -> BaseException:
    """The one error inside the task groups a failed start unwound through (a group of several stays a group), so
    ``start()`` raises e.g. the ``ConfigError`` a vector store's ``open`` raised."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
