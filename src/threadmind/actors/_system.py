"""The actor system of one Memory: thread and resource registries, the index actor, and background work.

``ActorSystem`` owns every long-lived task of a Memory in a host task of its own (``HostTask``), so it can be
started and closed from any task. It offers the few ways the rest of threadmind talks to actors:

* ``ask(thread_id, command)``: one command to a thread's actor, in its arrival order;
* ``exclusive(thread_id, fn)``: run ``fn`` with the thread to itself (a multi-step read-modify-write);
* ``holding(thread_ids, fn)``: run ``fn`` while holding several threads (sorted ids: never deadlocks), and
  ``across(command)``: one write over several threads so (``SaveAcross``, ``UpdateAcross``, ``DeleteAcross``);
* ``modify_resource(resource_id, command)`` / ``get_resource(resource_id)``: a resource's row, in its order;
* ``turn(thread_id, policy)``: an agent turn's hold on its thread (``enqueue``, ``reject`` or ``parallel``);
* ``spawn(fn, ...)``: background work (titles, observations) that ``aclose()`` waits for.

Shutdown order: background work finishes first (it may still use the actors), then the index actor flushes,
then the actors drain, then the store closes.
"""

from __future__ import annotations

import contextvars
import enum
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from .._lowlevel import HostTask
from ..codecs import Resource
from ..errors import ThreadBusy, ThreadmindError
from ..stores import KeywordSearch, Lease
from ..stores._keywords import supports_keywords
from ..tracing import operation_span
from ._across import AcrossThreads, write_across
from ._registry import ActorRegistry
from ._resource_actor import GetResource, ModifyResource, ResourceActor
from ._thread_actor import Exclusive, ThreadActor

if TYPE_CHECKING:
    from ..stores import Store
    from ._index_actor import IndexActor

__all__ = ("ActorSystem", "TurnPolicy", "current_fence", "forget_fences")

_log = logging.getLogger("threadmind.actors")

# The leases of the turns running in this task (thread id -> lease): the fencing token each of their writes
# carries. A context variable, so every write made for a turn (the persist, the token boundary, a tool's
# working-memory update) finds it without it being passed through every layer.
_FENCES: contextvars.ContextVar[dict[str, Lease] | None] = contextvars.ContextVar("threadmind_fences", default=None)


async def _after_the_previous_turn() -> None:
    """Let the wall clock pass the next millisecond: a turn that waited for another then stamps its input
    after every message of that turn (which are stamped at most one millisecond past its release), so the
    history alternates."""
    now = time.time()
    await anyio.sleep(max(0.0, (math.floor(now * 1000) + 1) / 1000 - now))


def current_fence(thread_id: str | None) -> Lease | None:
    """The lease of the turn on ``thread_id`` that the calling task is running, if any."""
    fences = _FENCES.get()
    if thread_id is None or fences is None:
        return None
    return fences.get(thread_id)

def forget_fences() -> None:
    """In a task spawned from a turn that outlives it (background work): act under no turn's lease, which the
    turn gives back when it ends."""
    _FENCES.set(None)


T = TypeVar("T")
TurnPolicy = Literal["enqueue", "reject", "parallel"]


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


def sweep_interval(idle_timeout: float) -> float | None:
    """How often the registries look for actors idle past ``idle_timeout``: a fraction of it, within 0.05–30 s."""
    if not math.isfinite(idle_timeout):
        return None
    return min(30.0, max(0.05, idle_timeout / 4))


class ActorSystem:
    """The actors of one Memory over one store (see the module docstring).

    :param store: the message store every actor reads and writes.
    :param cache_ttl: seconds actors trust what they cached (``math.inf``: until a write says otherwise).
    :param index: the index actor, or None without semantic recall; entered and flushed with the system.
    :param on_start: awaited once everything runs, before ``start()`` returns (e.g. probe the embedder).
    """

    def __init__(
        self,
        store: Store,
        *,
        cache_ttl: float,
        idle_timeout: float,
        max_actors: int,
        lease_ttl: float = 30.0,
        index: IndexActor | None = None,
        on_start: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.index = index
        #: Who this system's leases belong to (unique per system: two Memories in one process are two owners).
        self.owner = uuid.uuid4().hex
        self.lease_ttl = lease_ttl
        self._cache_ttl = cache_ttl
        self._idle_timeout = idle_timeout
        self._max_actors = max_actors
        self._on_start = on_start
        self._state = _State.NEW
        self._host = HostTask(self._enter, name="threadmind.memory")
        self._threads: ActorRegistry[ThreadActor] | None = None
        self._resources: ActorRegistry[ResourceActor] | None = None
        self._background: TaskGroup | None = None
        self._jobs: dict[int, anyio.Event] = {}  # background work spawned and not finished, by number
        self._jobs_started = 0

    # lifecycle -----------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Started and not closed."""
        return self._state is _State.RUNNING

    async def start(self) -> None:
        """Open the store and start every actor (idempotent; a failed start may be retried).

        :raises ThreadmindError: the system was closed (``THREADMIND_CLOSED``).
        """
        if self._state is _State.RUNNING:
            return
        if self._state is _State.CLOSED:
            raise ThreadmindError("this Memory is closed; create a new one", code="THREADMIND_CLOSED")
        await self._host.start()
        self._state = _State.RUNNING

    async def aclose(self) -> None:
        """Wait for background work, flush the index, drain every actor and close the store (idempotent)."""
        self._state = _State.CLOSED
        await self._host.stop()

    async def _enter(self, stack: AsyncExitStack) -> None:
        store = self.store
        await store.open()
        stack.push_async_callback(store.aclose)
        interval = sweep_interval(self._idle_timeout)
        ttl = self._cache_ttl
        versions = store.thread_version
        self._threads = await stack.enter_async_context(ActorRegistry(
            lambda key: ThreadActor(key, store, ttl=ttl, versions=versions), idle_timeout=self._idle_timeout,
            max_actors=self._max_actors, sweep_interval=interval))
        self._resources = await stack.enter_async_context(ActorRegistry(
            lambda key: ResourceActor(key, store, ttl=ttl), idle_timeout=self._idle_timeout,
            sweep_interval=interval))
        if self.index is not None:
            await stack.enter_async_context(self.index)
        if self._on_start is not None:
            await self._on_start()
        self._background = await stack.enter_async_context(anyio.create_task_group())
        heartbeat = anyio.CancelScope()
        stack.callback(heartbeat.cancel)  # unwound before the group waits for its tasks
        self._background.start_soon(self._heartbeat, heartbeat, name="threadmind.heartbeat")
        if supports_keywords(store):
            keywords = anyio.CancelScope()
            stack.callback(keywords.cancel)
            self._background.start_soon(self._catch_up_keywords, store, keywords, name="threadmind.keywords")

    async def _catch_up_keywords(self, store: KeywordSearch, scope: anyio.CancelScope) -> None:
        """Index the messages the store's keyword index lacks (written by Mastra, or by a threadmind older than the
        index), in bounded batches on the store's own threads; given up when the system closes (the next start, or
        ``Memory.reindex``, goes on where it stopped)."""
        with scope, operation_span("threadmind.memory.keyword_catch_up", "update_memory"):
            try:
                if await store.keyword_backlog():
                    written = await store.build_keyword_index()
                    if written:
                        _log.info("keyword index: %d messages indexed that were written without it", written)
            except Exception:
                _log.warning("building the keyword index failed; Memory.reindex() tries again", exc_info=True)

    async def _heartbeat(self, scope: anyio.CancelScope) -> None:
        """Renew this system's leases (and tell other processes it is alive) every quarter of ``lease_ttl``."""
        interval = max(0.01, min(self.lease_ttl / 4, 5.0))
        with scope:
            while True:
                try:
                    await self.store.renew_leases(self.owner, self.lease_ttl)
                except Exception:  # a failed beat is retried next time; a lease then lapses only after lease_ttl
                    _log.warning("renewing leases failed", exc_info=True)
                await anyio.sleep(interval)

    @property
    def threads(self) -> ActorRegistry[ThreadActor]:
        """The thread actors (``ThreadmindError`` before start and after close)."""
        threads, _ = self._registries()
        return threads

    @property
    def resources(self) -> ActorRegistry[ResourceActor]:
        """The resource actors (``ThreadmindError`` before start and after close)."""
        _, resources = self._registries()
        return resources

    def check_running(self) -> None:
        """Raise the misuse error of a system that is not started or already closed."""
        if self._state is _State.NEW:
            raise ThreadmindError(
                "Memory is not started: use `async with memory:` or `await memory.start()` first",
                code="THREADMIND_NOT_STARTED",
            )
        if self._state is _State.CLOSED or self._threads is None:
            raise ThreadmindError("this Memory is closed", code="THREADMIND_CLOSED")

    def _registries(self) -> tuple[ActorRegistry[ThreadActor], ActorRegistry[ResourceActor]]:
        """The registries while they exist (also while ``aclose()`` lets background work finish)."""
        threads, resources = self._threads, self._resources
        if threads is None or resources is None:
            raise ThreadmindError("this Memory is closed", code="THREADMIND_CLOSED")
        return threads, resources

    # threads -------------------------------------------------------------------------------------
    async def ask(self, thread_id: str, command: Any, *, background: bool = False) -> Any:
        """Send ``command`` to the thread's actor and return its reply (``background``: the caller is background
        work, which may still run while ``aclose()`` drains it)."""
        if not background:
            self.check_running()
        threads, _ = self._registries()
        return await threads.ask(thread_id, command)

    async def exclusive(self, thread_id: str, fn: Callable[[], Awaitable[T]], name: str, *,
                        thread_unchanged: bool = False, background: bool = False) -> T:
        """Run ``fn`` with exclusive access to the thread.

        ``thread_unchanged``: ``fn`` writes neither the thread's row nor its messages (the actor keeps its
        caches). ``background``: the caller is background work, which may still run while ``aclose()``
        drains it.
        """
        if not background:
            self.check_running()
        threads, _ = self._registries()
        result: T = await threads.ask(thread_id, Exclusive(fn, name, thread_unchanged))
        return result

    async def holding(self, thread_ids: Sequence[str], fn: Callable[[], Awaitable[T]], name: str) -> T:
        """Run ``fn`` while holding the actor of each of ``thread_ids`` (an exclusive step on each, nested).

        Callers pass the ids sorted: two holders then always take their common actors in the same order,
        so neither can wait on the other. Once the first actor has started, the rest runs to completion
        even if the caller leaves (handlers are shielded).
        """
        if not thread_ids:
            return await fn()
        first, rest = thread_ids[0], thread_ids[1:]
        return await self.exclusive(first, lambda: self.holding(rest, fn, name), name)

    async def across(self, command: AcrossThreads) -> Any:
        """Run a write across threads (``_across``): one store transaction, while every thread's actor is held."""
        store = self.store

        async def write() -> Any:
            return await write_across(store, command)

        return await self.holding(command.thread_ids(), write, command.name)

    @asynccontextmanager
    async def turn(self, thread_id: str, policy: TurnPolicy) -> AsyncIterator[Lease | None]:
        """Hold the thread for one agent turn per ``policy`` (SPEC §6, §10): ``enqueue`` waits for the turn
        before it, in this process or any other on the store, ``reject`` raises ``ThreadBusy`` while another
        runs, ``parallel`` does not hold it at all.

        Within the process the thread actor's turn lock orders turns; across processes the store's lease
        ``thread:<id>`` does, renewed by the heartbeat while the turn runs. Its fencing token is what the
        turn's writes carry (:func:`current_fence`): if the lease was taken over (this process froze past
        ``lease_ttl``), they are refused with ``LeaseLost``.
        """
        self.check_running()
        if policy == "parallel":
            yield None
            return
        threads, _ = self._registries()
        actor = threads.get(thread_id)
        actor.turn_started()
        try:
            waited = False
            if policy == "reject":
                try:
                    actor.turn_lock.acquire_nowait()
                except anyio.WouldBlock:
                    raise ThreadBusy(thread_id) from None
            else:
                waited = actor.turn_lock.value == 0
                await actor.turn_lock.acquire()
            try:
                lease, contended = await self._acquire(thread_id, wait=policy == "enqueue")
                try:
                    if waited or contended:
                        await _after_the_previous_turn()
                    token = _FENCES.set({**(_FENCES.get() or {}), thread_id: lease})
                    try:
                        yield lease
                    finally:
                        try:
                            _FENCES.reset(token)
                        except ValueError:  # closed from another context (an abandoned stream's finalizer):
                            pass            # nothing to reset there, the turn's own context is gone with it
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.store.release_lease(lease)
            finally:
                actor.turn_lock.release()
        finally:
            actor.turn_finished()

    async def _acquire(self, thread_id: str, *, wait: bool) -> tuple[Lease, bool]:
        """The lease ``thread:<id>``, and whether another holder had it first (the turn then waited for it)."""
        key = f"thread:{thread_id}"
        try:
            return await self.store.acquire_lease(key, owner=self.owner, ttl=self.lease_ttl, wait=False), False
        except ThreadBusy:
            if not wait:
                raise
        return await self.store.acquire_lease(key, owner=self.owner, ttl=self.lease_ttl, wait=True), True

    # resources -----------------------------------------------------------------------------------
    async def modify_resource(self, resource_id: str, command: ModifyResource) -> Resource | None:
        """Run ``command`` (a read-modify-write of the resource row) on the resource's actor, after the
        resource's earlier operations."""
        self.check_running()
        _, resources = self._registries()
        resource: Resource | None = await resources.ask(resource_id, command)
        return resource

    async def get_resource(self, resource_id: str) -> Resource | None:
        """The resource row through its actor (cached while fresh; after any update through it, re-read)."""
        self.check_running()
        _, resources = self._registries()
        resource: Resource | None = await resources.ask(resource_id, GetResource())
        return resource

    # background work -----------------------------------------------------------------------------
    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None) -> bool:
        """Start ``fn(*args)`` as background work that ``aclose()`` waits for; False when closed or closing."""
        background = self._background
        if background is None or self._state is not _State.RUNNING:
            return False
        self._jobs_started += 1
        done = anyio.Event()
        self._jobs[self._jobs_started] = done
        background.start_soon(self._job, self._jobs_started, done, fn, args, name=name)
        return True

    async def _job(self, number: int, done: anyio.Event, fn: Callable[..., Coroutine[Any, Any, Any]],
                   args: tuple[Any, ...]) -> None:
        try:
            await fn(*args)
        finally:
            del self._jobs[number]
            done.set()

    async def settled(self) -> None:
        """Wait for the background work :meth:`spawn` started before this call, then for what started while
        waiting (the follow-ups of that work, such as a reflection after an observation); not for later work."""
        for _ in range(2):
            pending = [done for number, done in self._jobs.items() if number <= self._jobs_started]
            for done in pending:
                await done.wait()
        await anyio.lowlevel.checkpoint()

    @property
    def accepting_background(self) -> bool:
        """Whether :meth:`spawn` would start work now."""
        return self._background is not None and self._state is _State.RUNNING
