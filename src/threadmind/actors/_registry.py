"""The actor registry: one activation per key, created on demand, passivated when idle, LRU-capped.

The registry owns a task group in which actors' loops run, on demand: a loop task starts when a command is
queued for an actor and ends after ``loop_linger`` seconds without one, so a cached idle actor holds no task
(commands of an idle actor mostly run in their caller's task anyway, see ``Actor.run_now``). An optional
sweeper passivates actors idle for ``idle_timeout``. ``ask`` survives the race where an actor is passivated
between lookup and enqueue: a refused command never started, so it is retried on a fresh activation.
"""

from __future__ import annotations

import enum
import logging
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import anyio
import msgspec
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint

from ..errors import ConfigError, ThreadmindError
from ..tracing import tracing_enabled
from ._actor import NOT_NOW, Actor, Refused
from ._mailbox import MailboxClosed

__all__ = ("ActorRegistry", "RegistryStatistics")

A = TypeVar("A", bound="Actor[Any]")

_LOG = logging.getLogger("threadmind.actors")

# A factory that keeps handing out closed actors would otherwise make ``ask`` spin without yielding.
_MAX_REFUSALS = 100
# Actors passivated per step of the background sweeper before it yields to the event loop.
_SWEEP_SLICE = 512
# How long an actor's loop task waits for its next command before it ends (a burst keeps one task).
_LOOP_LINGER = 0.5


class RegistryStatistics(msgspec.Struct, frozen=True):
    """Live actors now, and how many were created, passivated (idle timeout) and evicted (LRU cap)."""

    live: int
    created: int
    passivated: int
    evicted: int


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class ActorRegistry(Generic[A]):
    """Get-or-create actors by key and run them in an owned task group.

    Use as ``async with ActorRegistry(factory) as registry:`` (or ``await start()`` / ``await aclose()``
    from one task). ``factory(key)`` builds an actor whose ``key`` is ``key``. As with any task group,
    ``aclose`` must run in the cancel scope ``start`` ran in: do not wrap it in a ``CancelScope`` of its own
    (running handlers are shielded already).
    """

    def __init__(
        self,
        factory: Callable[[str], A],
        *,
        idle_timeout: float = 300.0,
        max_actors: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        sweep_interval: float | None = 30.0,
        loop_linger: float = _LOOP_LINGER,
    ) -> None:
        if not idle_timeout >= 0:
            raise ConfigError(f"idle_timeout must be ≥ 0 seconds, got {idle_timeout!r}")
        if isinstance(max_actors, bool) or not isinstance(max_actors, int) or max_actors < 1:
            raise ConfigError(f"max_actors must be an integer ≥ 1, got {max_actors!r}")
        if sweep_interval is not None and not sweep_interval > 0:
            raise ConfigError(f"sweep_interval must be > 0 seconds, or None for no sweeper; got {sweep_interval!r}")
        if not loop_linger >= 0:
            raise ConfigError(f"loop_linger must be ≥ 0 seconds, got {loop_linger!r}")
        self._factory = factory
        self._loop_linger = loop_linger
        self._spawn_loop = self._start_loop  # one bound method for every actor, not one object per actor
        self._idle_timeout = idle_timeout
        self._max_actors = max_actors
        self._clock = clock
        self._sweep_interval = sweep_interval
        # Insertion order is recency order: the first entry is the least recently used.
        self._actors: OrderedDict[str, A] = OrderedDict()
        self._state = _State.UNOPENED
        self._task_group: TaskGroup | None = None
        self._sweeper_scope = anyio.CancelScope()
        self._created = 0
        self._passivated = 0
        self._evicted = 0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Enter the task group and start the sweeper.

        :raises ThreadmindError: the registry was already started.
        """
        if self._state is not _State.UNOPENED:
            raise ThreadmindError(
                f"the actor registry is {self._state.value}; a registry can be started only once",
                code="THREADMIND_ALREADY_STARTED",
            )
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._state = _State.OPEN
        if self._sweep_interval is not None:
            task_group.start_soon(self._sweep_forever, self._sweep_interval, name="threadmind actor sweeper")

    async def aclose(self) -> None:
        """Stop accepting, let every actor drain what it accepted, wait for all of them. Idempotent."""
        await self.__aexit__(None, None, None)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        if self._state is not _State.OPEN:
            return None
        self._state = _State.CLOSED
        self._sweeper_scope.cancel()
        actors = list(self._actors.values())
        self._actors.clear()
        for actor in actors:
            actor.close()
        task_group, self._task_group = self._task_group, None
        assert task_group is not None
        # Exiting the group waits for every loop to drain. If the scope around the registry is cancelled
        # meanwhile, the loops stop instead: running handlers finish (shielded), queued commands fail
        # with MailboxClosed. Call this from the task and scope that called start (scopes must nest).
        return await task_group.__aexit__(exc_type, exc_val, exc_tb)

    def __del__(self) -> None:
        if getattr(self, "_state", None) is _State.OPEN:
            warnings.warn(f"unclosed {self!r}; use 'async with' or await aclose()", ResourceWarning, stacklevel=1)

    def __repr__(self) -> str:
        return f"<ActorRegistry {self._state.value} live={len(self._actors)}>"

    # -- lookup ------------------------------------------------------------------------------------

    def _closed_error(self) -> ThreadmindError:
        if self._state is _State.UNOPENED:
            return ThreadmindError(
                "the actor registry is not started; use 'async with registry' or await registry.start()",
                code="THREADMIND_NOT_STARTED",
            )
        return ThreadmindError("the actor registry is closed", code="THREADMIND_CLOSED")

    def get(self, key: str) -> A:
        """The actor for ``key``, created (and started) on first use; marks it most recently used.

        :raises ThreadmindError: the registry is not open (``code`` ``THREADMIND_CLOSED`` after ``aclose``).
        """
        actors = self._actors
        actor = actors.get(key)
        if actor is not None:
            actors.move_to_end(key)
            return actor
        if self._state is not _State.OPEN:
            raise self._closed_error()
        if len(actors) >= self._max_actors:
            self._evict(len(actors) - self._max_actors + 1)
        actor = self._factory(key)
        if actor.key != key:
            raise ConfigError(f"the actor factory returned an actor with key {actor.key!r} for key {key!r}")
        actor.serve(self._spawn_loop, self._loop_linger)
        actors[key] = actor
        self._created += 1
        return actor

    async def ask(self, key: str, command: Any) -> Any:
        """Ask the actor for ``key``; retried on a fresh activation if it was passivated before enqueue.

        :raises ThreadmindError: the registry is not open (``code`` ``THREADMIND_CLOSED`` after ``aclose``).
        :raises MailboxClosed: the actor stopped (its loop was cancelled) before handling the command.
        """
        cached = self._actors.get(key)
        inline = not tracing_enabled()  # traced commands keep their span per command
        if cached is not None and inline:
            try:
                answer = cached.try_answer_now(command)
            except Exception:
                await checkpoint()
                raise
            if answer is not NOT_NOW:
                self._actors.move_to_end(key)
                await checkpoint()  # still a checkpoint, like every ask; one loop pass, not a round trip
                return answer
            if cached.can_run_now(command):  # idle: run it in this task, no mailbox round trip
                self._actors.move_to_end(key)
                return await cached.run_now(command)
        for _ in range(_MAX_REFUSALS):
            try:
                actor = self.get(key)
            except ThreadmindError:
                await checkpoint()  # even a refusal is a checkpoint
                raise
            if actor is not cached and inline and actor.can_run_now(command):
                # Just made, so idle: its first command runs here too (a first read of a thread not cached,
                # or a save to one evicted, would otherwise start a loop task for one command).
                return await actor.run_now(command)
            try:
                return await actor._ask(command, True)
            except Refused:
                if self._state is not _State.OPEN:
                    await checkpoint()
                    raise self._closed_error() from None
                if self._actors.get(key) is actor:  # closed behind our back: drop it, activate anew
                    del self._actors[key]
        raise MailboxClosed(f"actor {key!r} kept refusing commands: the factory returns closed actors")

    def __contains__(self, key: object) -> bool:
        return key in self._actors

    def __len__(self) -> int:
        return len(self._actors)

    def statistics(self) -> RegistryStatistics:
        """A frozen snapshot of the counters."""
        return RegistryStatistics(
            live=len(self._actors), created=self._created, passivated=self._passivated, evicted=self._evicted
        )

    # -- passivation -------------------------------------------------------------------------------

    def sweep(self, limit: int | None = None) -> int:
        """Passivate actors idle for at least ``idle_timeout`` (per the clock); returns how many.

        Walks from the least recently used actor and stops at the first idle one that is still fresh: the
        actors after it were used more recently, so a sweep touches the stale ones and one more, never every
        live actor. Busy actors are skipped. ``limit``: passivate at most that many (the background sweeper
        works in such slices, yielding to the event loop between them).
        """
        now = self._clock()
        timeout = self._idle_timeout
        stale: list[str] = []
        for key, actor in self._actors.items():
            if not actor.idle:
                continue
            if now - actor.last_active < timeout:
                break
            stale.append(key)
            if limit is not None and len(stale) >= limit:
                break
        for key in stale:
            self._actors.pop(key).close()
        self._passivated += len(stale)
        return len(stale)

    def _evict(self, count: int) -> None:
        # Least recently used idle actors go first; busy ones are skipped (the cap is then exceeded).
        victims: list[str] = []
        for key, actor in self._actors.items():
            if actor.idle:
                victims.append(key)
                if len(victims) == count:
                    break
        for key in victims:
            self._actors.pop(key).close()
        self._evicted += len(victims)

    async def _sweep_forever(self, interval: float) -> None:
        with self._sweeper_scope:
            while True:
                await anyio.sleep(interval)
                while self.sweep(limit=_SWEEP_SLICE) >= _SWEEP_SLICE:
                    await checkpoint()  # a large backlog of idle actors goes in slices, the loop runs between
                over = len(self._actors) - self._max_actors
                if over > 0:  # a burst of busy actors went past the cap; bring it back now that some are idle
                    self._evict(over)

    def _start_loop(self, actor: Actor[Any]) -> None:
        # Called by the actor as a command is queued and no loop runs. Every actor is closed before the group
        # goes, and a closed actor queues nothing, so the group is there.
        assert self._task_group is not None
        self._task_group.start_soon(self._run_actor, actor, name=f"threadmind actor {actor.key!r}")

    async def _run_actor(self, actor: Actor[Any]) -> None:
        try:
            await actor.drain()
        except Exception:  # a bug in one actor's loop must not take the others down
            _LOG.exception("actor %r: the loop failed", actor.key)
        finally:
            # The loop ended with the actor closed (cancelled, or a bug) while still registered: forget it.
            if actor.closed and self._actors.get(actor.key) is actor:
                del self._actors[actor.key]
