"""Group commit for ``PostgresStore`` saves: concurrent saves of one store share statements.

A save statement's cost is mostly per statement (a round trip, the statement's fixed work, a commit and its WAL
flush) while few rows are in it: on the 2-core development VM a statement of one 2-message save took 1.1 ms, one of
sixteen such saves 5.2-5.9 ms. So a store runs at most :data:`SAVE_STATEMENTS` save statements at once; a save that
finds them all busy joins the next group (of at most :data:`MAX_GROUP` saves), which goes as one statement
(:data:`SAVE_SQL <._save.SAVE_SQL>` takes any number of threads' parts and checks each part's lease) as soon as one
of them finishes. A save that finds a statement free goes at once: a lone conversation saving one message at a time
waits for nobody. Saves that write their vectors in the statement (``PgVectorStore`` beside the store) group with
saves writing to the same vector table.

Every guarantee of a save holds for each caller of a group:

* **All or nothing, each its own outcome.** The statement applies every part or none. When it fails (a missing
  thread, a lost lease, an id another thread holds, a server error), each save of the group runs again alone, in
  the order they arrived, and gets exactly the result or error it would have got alone.
* **Order.** A group holds each thread once and never goes while a statement holding one of its threads is in
  flight, and a save joins no group older than the newest holding its thread: one thread's saves apply in the order
  they were made.
* **Cancellation.** A save cancelled before its group's statement was sent is dropped (nothing of it is written);
  once sent, it is waited for as a lone save's statement is (shielded), then the cancellation goes on.
* **Durability.** A save returns only once the statement that carried it committed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import anyio
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext

from ...codecs import Message
from ...tracing import ATTR_DB_SYSTEM, get_tracer, tracing_enabled
from .._protocol import Lease
from .._statistics import StoreStatistics
from .._vector_rows import VectorRows
from ._save import Part

__all__ = ("MAX_GROUP", "SAVE_STATEMENTS", "SaveGroups")

SAVE_STATEMENTS = 2
"""Save statements a store runs at once before further saves wait to share one (the next group). Measured on the
shared workload with 16 saves in flight (2-core VM, local server): 1, 2, 4 and unbounded statements gave 3 944-4 248,
4 780-4 949, 4 037-4 183 and 2 778-3 027 messages/s. Two are no bound on a larger server either: a statement of 64
saves wrote 5 700-7 300 messages/s on one connection, more than a Python process feeds (its own work is 70-200 µs a
message)."""

MAX_GROUP = 64
"""The most saves one statement carries (a larger crowd forms several groups): its parameters and its time stay
bounded (a statement of 64 two-message saves took 18-23 ms here)."""

Stored = dict[str, list[Message]]
SaveNow = Callable[[Sequence[Part], bool, Sequence[Lease], VectorRows | None], Awaitable[Stored]]
Kind = tuple[bool, str | None, str, str]
"""What saves of one group share: whether their messages are marked as awaiting vectors, and the vector table
their statement writes (none, or its name, type and namespace)."""


def _kind(mark_pending: bool, vectors: VectorRows | None) -> Kind:
    if vectors is None:
        return mark_pending, None, "", ""
    return mark_pending, vectors.table, vectors.vector_type, vectors.namespace


class _Save:
    """One caller's save: its parts, its lease, and what became of it."""

    __slots__ = ("error", "fence", "link", "parts", "stored", "vectors")

    def __init__(self, parts: Sequence[Part], fence: Lease | None, vectors: VectorRows | None) -> None:
        self.parts = parts
        self.fence = fence
        self.vectors = vectors
        self.link: SpanContext | None = None  # the caller's span, linked from the group's statement span
        if tracing_enabled():
            context = trace.get_current_span().get_span_context()
            self.link = context if context.is_valid else None
        self.stored: Stored | None = None
        self.error: Exception | None = None


class _Group:
    """Saves waiting to go as one statement (at most one save of each thread)."""

    __slots__ = ("claimed", "done", "granted", "kind", "saves", "started", "threads")

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.saves: list[_Save] = []
        self.threads: set[str] = set()
        self.claimed: frozenset[str] = frozenset()  # its threads when it was given a statement
        self.granted = anyio.Event()  # a statement is free for it
        self.started = False  # its statement is being sent: no save leaves it any more
        self.done = anyio.Event()

    def add(self, save: _Save) -> None:
        self.saves.append(save)
        self.threads.update(part.thread_id for part in save.parts)

    def drop(self, save: _Save) -> None:
        self.saves.remove(save)
        self.threads.difference_update(part.thread_id for part in save.parts)


class SaveGroups:
    """Runs a store's saves through at most ``statements`` statements at once (see the module docstring).

    Groups are given statements in the order they were formed, and never while a statement in flight holds one of
    their threads; a save joins no group older than the newest one holding one of its threads. So two saves of a
    thread are never in flight together and apply in the order they were made.

    :param save_now: runs one statement for parts of one or more saves (every part or none), with their leases.
    """

    def __init__(self, save_now: SaveNow, statements: int = SAVE_STATEMENTS) -> None:
        self._save_now = save_now
        self._free = max(1, statements)
        self._waiting: deque[_Group] = deque()
        self._busy: set[str] = set()  # threads of the statements in flight
        self._statements = 0  # save statements sent (see statistics)
        self._saves = 0  # the saves they carried
        self._largest = 0

    def statistics(self) -> StoreStatistics:
        """Save statements sent and the saves they carried (a group whose statement failed counts that statement,
        then one for each of its saves sent again alone), the largest group and the saves waiting now."""
        return StoreStatistics(commits=self._statements, jobs=self._saves, largest_group=self._largest,
                               queued=sum(len(group.saves) for group in self._waiting))

    async def save(self, parts: Sequence[Part], mark_pending: bool, fence: Lease | None,
                   vectors: VectorRows | None = None) -> Stored:
        """Save ``parts`` (validated, each thread once) with ``fence`` and their ``vectors``: alone when a statement
        is free, else with the saves of the same kind (:data:`Kind`) that wait beside it."""
        threads = frozenset(part.thread_id for part in parts)
        if self._free > 0 and not self._waiting and self._busy.isdisjoint(threads):
            self._free -= 1
            self._busy.update(threads)
            self._counted(1)
            try:
                return await self._save_now(parts, mark_pending, () if fence is None else (fence,), vectors)
            finally:
                self._finished(threads)
        save = _Save(parts, fence, vectors)
        group = self._join(save, threads, _kind(mark_pending, vectors))
        try:
            await group.granted.wait()
        except BaseException:
            if group.started:  # sent meanwhile by another save of the group: wait for it as a lone save would
                with anyio.CancelScope(shield=True):
                    await group.done.wait()
                raise
            group.drop(save)
            if not group.saves:
                if group.granted.is_set():
                    self._finished(group.claimed)  # the statement given to the group goes to the next one
                else:
                    self._waiting.remove(group)
                    self._dispatch()  # a group it held back may go
            raise
        if not group.started:
            group.started = True  # the first of the group to wake sends it
            await self._run(group)
        else:
            with anyio.CancelScope(shield=True):
                await group.done.wait()
        if save.error is not None:
            raise save.error
        assert save.stored is not None
        return save.stored

    def _join(self, save: _Save, threads: frozenset[str], kind: Kind) -> _Group:
        """The group ``save`` goes with: the oldest of its kind, not full, after every group holding one of its
        threads."""
        after = 0
        for at, group in enumerate(self._waiting):
            if not group.threads.isdisjoint(threads):
                after = at + 1
        for at, group in enumerate(self._waiting):
            if at >= after and group.kind == kind and len(group.saves) < MAX_GROUP:
                group.add(save)
                return group
        group = _Group(kind)
        group.add(save)
        self._waiting.append(group)
        return group

    def _finished(self, threads: frozenset[str]) -> None:
        """A statement finished (or its group emptied before it went): its threads and the statement are free."""
        self._busy.difference_update(threads)
        self._free += 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Give free statements to the oldest waiting groups, in order, while none of their threads is in flight."""
        while self._free > 0 and self._waiting:
            group = self._waiting[0]  # (a group whose saves all left was removed then)
            if not self._busy.isdisjoint(group.threads):
                return
            self._waiting.popleft()
            self._free -= 1
            group.claimed = frozenset(group.threads)
            self._busy.update(group.claimed)
            group.granted.set()

    async def _run(self, group: _Group) -> None:
        """Send the group as one statement; when it fails, each save alone (its own outcome)."""
        saves = list(group.saves)
        try:
            with anyio.CancelScope(shield=True):
                if tracing_enabled():
                    with get_tracer().start_as_current_span(
                            "threadmind.store.group_commit", links=[Link(s.link) for s in saves if s.link is not None],
                            attributes={ATTR_DB_SYSTEM: "postgresql", "threadmind.store.group_size": len(saves)}):
                        await self._send(saves, group.kind[0])
                else:
                    await self._send(saves, group.kind[0])
        finally:
            group.done.set()
            self._finished(group.claimed)

    async def _send(self, saves: Sequence[_Save], mark_pending: bool) -> None:
        """The group's statement; when it fails, each save alone, in order."""
        if len(saves) == 1:
            await self._alone(saves[0], mark_pending)
            return
        self._counted(len(saves))
        fences = list({s.fence: None for s in saves if s.fence is not None})
        vectors = [s.vectors for s in saves if s.vectors is not None]
        try:
            stored = await self._save_now([part for s in saves for part in s.parts], mark_pending, fences,
                                          VectorRows.joined(vectors) if vectors else None)
        except Exception:
            for save in saves:
                await self._alone(save, mark_pending)
            return
        for save in saves:
            save.stored = {part.thread_id: stored[part.thread_id] for part in save.parts}

    def _counted(self, saves: int) -> None:
        self._statements += 1
        self._saves += saves
        self._largest = max(self._largest, saves)

    async def _alone(self, save: _Save, mark_pending: bool) -> None:
        self._counted(1)
        try:
            save.stored = await self._save_now(save.parts, mark_pending, () if save.fence is None else (save.fence,),
                                               save.vectors)
        except Exception as exc:
            save.error = exc
