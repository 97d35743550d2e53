"""A process that holds a lease on a store and does what its parent tells it (one command per stdin line).

Run: ``python _lease_child.py (sqlite PATH | postgres DSN | pgbouncer DSN) KEY TTL``. It opens the store,
takes ``KEY`` for the owner ``child`` (waiting for it), renews it every quarter of ``TTL`` (the heartbeat a live
Memory runs), and prints ``held <token>``. Commands: ``save THREAD ID`` (a save fenced by the lease; prints ``saved`` or
``lost``), ``release`` (prints ``released``), ``quit``.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import anyio

from threadmind.codecs import Message
from threadmind.errors import LeaseLost
from threadmind.stores import PostgresStore, SQLiteStore, Store


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _heartbeat(store: Store, ttl: float) -> None:
    while True:
        await store.renew_leases("child", ttl)
        await anyio.sleep(ttl / 4)


async def main(kind: str, where: str, key: str, ttl: float) -> None:
    store: SQLiteStore | PostgresStore = SQLiteStore(where) if kind == "sqlite" else PostgresStore(
        where, max_size=2, statement_cache_size=0 if kind == "pgbouncer" else None)
    async with store, anyio.create_task_group() as tg:
        lease = await store.acquire_lease(key, owner="child", ttl=ttl, wait=True)
        tg.start_soon(_heartbeat, store, ttl)
        _say(f"held {lease.token}")
        lines = anyio.wrap_file(sys.stdin)
        async for line in lines:
            command = line.split()
            if not command or command[0] == "quit":
                break
            if command[0] == "save":
                message = Message.user("from the child", id=command[2], thread_id=command[1], resource_id="r1",
                                       created_at=datetime.now(UTC))
                try:
                    await store.save_messages(command[1], [message], fence=lease)
                except LeaseLost:
                    _say("lost")
                else:
                    _say("saved")
            elif command[0] == "release":
                await store.release_lease(lease)
                _say("released")
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
