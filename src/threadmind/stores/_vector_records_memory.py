"""Vector records in dicts, with the SQL records' semantics: for ``InMemoryStore`` and tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio.lowlevel
import msgspec

from ._vector_records import PendingVector, VectorRecord

__all__ = ("InMemoryVectorRecords",)


class _Row(msgspec.Struct, kw_only=True):
    record: VectorRecord
    seq: int


class InMemoryVectorRecords:
    """The same semantics in dicts, for ``InMemoryStore`` and tests (nothing survives the process)."""

    def __init__(self) -> None:
        self._seq = 0
        self._rows: dict[tuple[str, str], _Row] = {}
        self._tombstones: dict[tuple[str, str], int] = {}
        self._pending: dict[str, tuple[PendingVector, float]] = {}
        self._pruned: dict[str, int] = {}

    def _bump(self) -> int:
        self._seq += 1
        return self._seq

    def _delete_where(self, seq: int, match: Callable[[str, VectorRecord], bool]) -> None:
        for key in [k for k, row in self._rows.items() if match(k[0], row.record)]:
            del self._rows[key]
            self._tombstones[key] = seq

    async def upsert(self, index_name: str, records: Sequence[VectorRecord], *, background: bool = False,
                     written: list[VectorRecord] | None = None, stored_only: bool = False,
                     fresh_only: bool = False) -> int:
        await anyio.lowlevel.checkpoint()
        if fresh_only:
            have = {row.record.message_id for (name, _), row in self._rows.items() if name == index_name}
            records = [r for r in records if r.message_id not in have]
        if written is not None:  # one process, one writer: stored as given (``stored_only`` changes nothing)
            written.extend(records)
        seq = self._bump()
        messages = {r.message_id for r in records}
        keep = {r.vector_id for r in records}
        self._delete_where(
            seq, lambda name, rec: name == index_name and rec.message_id in messages and rec.vector_id not in keep
        )
        for record in records:
            self._rows[(index_name, record.vector_id)] = _Row(record=record, seq=seq)
        for message_id in messages:
            self._pending.pop(message_id, None)
        return seq

    async def delete_by_message_ids(self, index_name: str | None, ids: Sequence[str]) -> int:
        await anyio.lowlevel.checkpoint()
        seq = self._bump()
        wanted = set(ids)
        self._delete_where(
            seq, lambda name, rec: (index_name is None or name == index_name) and rec.message_id in wanted
        )
        for message_id in wanted:
            self._pending.pop(message_id, None)
        return seq

    async def delete_by_thread(self, thread_id: str) -> int:
        await anyio.lowlevel.checkpoint()
        seq = self._bump()
        self._delete_where(seq, lambda _name, rec: rec.thread_id == thread_id)
        for message_id in [m for m, (p, _) in self._pending.items() if p.thread_id == thread_id]:
            del self._pending[message_id]
        return seq

    async def move_thread(self, thread_id: str, resource_id: str, *, written: list[str] | None = None) -> int:
        await anyio.lowlevel.checkpoint()
        if written is not None:  # one process: the resource given
            written.append(resource_id)
        seq = self._bump()
        for row in self._rows.values():
            if row.record.thread_id == thread_id:
                row.record = msgspec.structs.replace(row.record, resource_id=resource_id)
                row.seq = seq
        for message_id, (pending, stamp) in list(self._pending.items()):
            if pending.thread_id == thread_id:
                self._pending[message_id] = (msgspec.structs.replace(pending, resource_id=resource_id), stamp)
        return seq

    async def load(self, index_name: str, since_seq: int = 0) -> tuple[list[VectorRecord], list[str], int]:
        await anyio.lowlevel.checkpoint()
        rows = sorted(
            (row for (name, _), row in self._rows.items() if name == index_name and row.seq > since_seq),
            key=lambda row: row.seq,
        )
        deleted = (
            [vid for (name, vid), seq in self._tombstones.items()
             if name == index_name and seq > since_seq and (name, vid) not in self._rows]
            if since_seq > 0
            else []
        )
        return [row.record for row in rows], deleted, self._seq

    async def records_for_messages(self, index_name: str, ids: Sequence[str]) -> list[VectorRecord]:
        await anyio.lowlevel.checkpoint()
        wanted = set(ids)
        found = [
            row.record
            for (name, _), row in self._rows.items()
            if name == index_name and row.record.message_id in wanted
        ]
        return sorted(found, key=lambda r: (r.message_id, r.vector_id))

    async def prune_tombstones(self, index_name: str, upto_seq: int) -> None:
        await anyio.lowlevel.checkpoint()
        for key in [k for k, seq in self._tombstones.items() if k[0] == index_name and seq <= upto_seq]:
            del self._tombstones[key]
        self._pruned[index_name] = max(self._pruned.get(index_name, 0), upto_seq)

    async def scope_records(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> list[VectorRecord]:
        await anyio.lowlevel.checkpoint()
        return [
            row.record for (name, _), row in self._rows.items()
            if name == index_name and (thread_id is None or row.record.thread_id == thread_id)
            and (resource_id is None or row.record.resource_id == resource_id)
        ]

    async def scope_embeddings(
        self, index_name: str, *, resource_id: str | None, thread_id: str | None
    ) -> dict[str, bytes]:
        found = await self.scope_records(index_name, resource_id=resource_id, thread_id=thread_id)
        return {record.vector_id: record.embedding for record in found}

    async def load_page(self, index_name: str, after: int, limit: int) -> tuple[list[VectorRecord], int]:
        await anyio.lowlevel.checkpoint()
        rows = [row.record for (name, _), row in self._rows.items() if name == index_name][after : after + limit]
        return rows, after + len(rows)

    async def load_changes(
        self, index_name: str, since_seq: int, after: tuple[int, int], limit: int, until_seq: int | None = None
    ) -> tuple[list[VectorRecord], tuple[int, int]]:
        await anyio.lowlevel.checkpoint()
        rows = sorted(
            ((row.seq, position, row.record) for position, ((name, _), row) in enumerate(self._rows.items())
             if name == index_name and row.seq > since_seq and (row.seq, position) > after
             and (until_seq is None or row.seq <= until_seq)),
            key=lambda item: (item[0], item[1]),
        )[:limit]
        return [r for _, _, r in rows], ((rows[-1][0], rows[-1][1]) if rows else after)

    async def deleted_since(self, index_name: str, since_seq: int) -> list[str]:
        await anyio.lowlevel.checkpoint()
        return [vid for (name, vid), seq in self._tombstones.items()
                if name == index_name and seq > since_seq and (name, vid) not in self._rows]

    async def size_hint(self, index_name: str) -> int:
        await anyio.lowlevel.checkpoint()
        return len(self._rows)

    async def sequence(self, index_name: str) -> tuple[int, int]:
        await anyio.lowlevel.checkpoint()
        return self._seq, self._pruned.get(index_name, 0)

    async def add_pending(self, items: Sequence[PendingVector], error: str) -> None:
        await anyio.lowlevel.checkpoint()
        now = time.monotonic()
        for item in items:
            old = self._pending.get(item.message_id)
            attempts = (old[0].attempts if old else 0) + 1
            self._pending[item.message_id] = (
                msgspec.structs.replace(item, attempts=attempts, last_error=error),
                now,
            )

    async def take_pending(self, limit: int, before: float | None = None) -> list[PendingVector]:
        await anyio.lowlevel.checkpoint()
        ordered = sorted(self._pending.values(), key=lambda e: (e[0].attempts, e[1], e[0].message_id))
        return [pending for pending, _ in ordered[:limit]]

    async def clear_pending(self, ids: Sequence[str]) -> None:
        await anyio.lowlevel.checkpoint()
        for message_id in ids:
            self._pending.pop(message_id, None)

    async def pending_count(self, before: float | None = None) -> int:
        await anyio.lowlevel.checkpoint()
        return len(self._pending)  # no in-flight markers here: every entry is a real failure

    async def message_ids_with_vectors(self, index_name: str) -> set[str]:
        await anyio.lowlevel.checkpoint()
        return {row.record.message_id for (name, _), row in self._rows.items() if name == index_name}
