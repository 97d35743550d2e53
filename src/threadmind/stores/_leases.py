"""Leases shared by the stores: the waiting policy, and the lease table of a store that lives in one process.

Waiting never spins: a waiter sleeps with a growing backoff (1 ms, doubling, at most ``_MAX_BACKOFF``) and
looks again, so a lease given back is taken within one backoff step, and one whose holder stopped renewing it
is taken over within ``ttl`` plus one step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from ..errors import LeaseLost, ThreadBusy
from ._protocol import Lease

__all__ = ("InProcessLeases", "busy_error", "wait_backoff")

_FIRST_BACKOFF = 0.001
_MAX_BACKOFF = 0.05


def busy_error(key: str) -> ThreadBusy:
    """The ``ThreadBusy`` of a lease key (``thread:<id>`` names its thread)."""
    return ThreadBusy(key.removeprefix("thread:"))


async def wait_backoff(delay: float) -> float:
    """Sleep ``delay`` and return the next one (doubling up to the cap)."""
    await anyio.sleep(delay)
    return min(_MAX_BACKOFF, delay * 2)


class InProcessLeases:
    """A lease table in memory (``InMemoryStore``: every holder is in this process).

    Holders renew their leases; one whose lease expired is taken over with a new token, and a write fenced by
    the old token is refused.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._rows: dict[str, tuple[str, int, float]] = {}  # key -> (owner, token, expires at)
        self._tokens: dict[str, int] = {}

    async def acquire(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        delay = _FIRST_BACKOFF
        while True:
            now = self._clock()
            row = self._rows.get(key)
            if row is None or row[2] <= now:
                token = self._tokens.get(key, 0) + 1
                self._tokens[key] = token
                self._rows[key] = (owner, token, now + ttl)
                return Lease(key=key, owner=owner, token=token, acquired_at=time.time())
            if not wait:
                await anyio.lowlevel.checkpoint()
                raise busy_error(key)
            delay = await wait_backoff(delay)

    async def release(self, lease: Lease) -> None:
        # No checkpoint here or on an uncontended acquire: they bracket every turn, which checkpoints anyway.
        row = self._rows.get(lease.key)
        if row is not None and row[0] == lease.owner and row[1] == lease.token:
            del self._rows[lease.key]

    async def renew(self, owner: str, ttl: float) -> None:
        await anyio.lowlevel.checkpoint()
        now = self._clock()
        for key, (holder, token, expires) in list(self._rows.items()):
            if holder == owner and expires > now:
                self._rows[key] = (holder, token, now + ttl)

    def check(self, fence: Lease | None) -> None:
        """Raise ``LeaseLost`` unless ``fence`` is still held (None: unfenced)."""
        if fence is None:
            return
        row = self._rows.get(fence.key)
        if row is None or row[0] != fence.owner or row[1] != fence.token or row[2] <= self._clock():
            raise LeaseLost(fence.key, "its holder stopped renewing it and it was taken over")
