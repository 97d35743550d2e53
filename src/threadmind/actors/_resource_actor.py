"""The actor that owns one resource: serializes its read-modify-writes and caches its row.

Resource-scoped working memory is shared by every thread of the resource, so its updates run here one at a
time. Every such update goes through this actor, which therefore keeps the resource row it last read: an
agent turn with working memory reads it from memory instead of the database. Any exclusive operation drops
it (it may have written); a store that counts its writes (both built-in stores) tells of a write straight
into it; and it expires after ``ttl`` seconds, which bounds how stale it can be when another process
writes the same file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from ..codecs import Resource
from ..stores import Lease, ResourceChange, Store
from ..tracing import ATTR_RESOURCE_ID
from ._actor import NOT_NOW, Actor
from ._thread_actor import TAIL_TTL, Exclusive

__all__ = ("GetResource", "ModifyResource", "ResourceActor", "ResourceCommand")


class GetResource(msgspec.Struct, frozen=True):
    """The resource row, or None when it does not exist (from the cache while fresh)."""


class ModifyResource(msgspec.Struct, frozen=True):
    """Ask ``change`` what to write of the resource as stored (None when missing; None back: nothing) and write
    it, in one store transaction (``Store.modify_resource``). ``change`` is a pure synchronous function of the
    row; the actor then re-reads the row when next asked."""

    change: Callable[[Resource | None], ResourceChange | None]
    name: str = "modify_resource"
    fence: Lease | None = None

    def span_attributes(self) -> dict[str, str | int]:
        return {"threadmind.exclusive.name": self.name}


ResourceCommand = GetResource | ModifyResource | Exclusive


class ResourceActor(Actor[ResourceCommand]):
    """Runs exclusive operations on one resource, one at a time, in arrival order; caches the row."""

    key_attributes = (ATTR_RESOURCE_ID,)

    def __init__(
        self, key: str, store: Store, *, ttl: float = TAIL_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(key, clock=clock)
        self._store = store
        self._ttl = ttl
        self._resource: tuple[Resource | None, float] | None = None  # (row, expires at)
        # The store's write count for this resource (when it keeps one) as of the cached row.
        self._versions: Callable[[str], int] | None = store.resource_version

        self._seen: int | None = None

    def _version(self) -> int | None:
        return None if self._versions is None else self._versions(self.key)

    async def handle(self, command: ResourceCommand) -> Any:
        match command:
            case GetResource():
                cached = self.answer_now(command)
                if cached is not NOT_NOW:
                    return cached
                before = self._version()
                row = await self._store.get_resource(self.key)
                if self._version() == before:  # no write landed while reading: keep it
                    self._resource = (row, self._clock() + self._ttl)
                    self._seen = before
                return row
            case ModifyResource(change, _, fence):
                self._resource = None
                try:
                    return await self._store.modify_resource(self.key, change, fence=fence)
                finally:
                    self._resource = None
            case Exclusive(fn):
                self._resource = None  # an arbitrary read-modify-write: trust the cache neither now nor after
                try:
                    return await fn()
                finally:
                    self._resource = None
        raise TypeError(f"unknown resource command {type(command).__name__}")  # pragma: no cover

    def runs_inline(self, command: ResourceCommand) -> bool:
        """The store read runs in an idle actor's caller's task; ``Exclusive`` runs user code: mailbox."""
        return isinstance(command, GetResource)

    def answer_now(self, command: ResourceCommand) -> Any:
        """The cached row while it is fresh."""
        cached = self._resource
        if (isinstance(command, GetResource) and cached is not None and self._clock() < cached[1]
                and self._version() == self._seen):  # and nothing wrote it past this actor
            return cached[0]
        return NOT_NOW
