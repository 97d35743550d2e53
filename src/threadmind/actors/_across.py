"""Writes across threads: one store transaction over several threads, written while each of their actors is held.

A batch that spans threads takes its place in every thread's arrival order and commits whole or not at all. The
actors are taken in sorted order (``ActorSystem.holding``), so two such writes never wait on each other; each
thread's actor forgets its cached tail and row, which the write changed. A save's observers (the index's
commit-gated upserts, one per thread) are told when the write starts and how it ended, as a thread actor tells a
single thread's save's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import msgspec

from ..codecs import Message
from ..stores import Store
from ..stores._vector_rows import SavesVectorRows, VectorRows
from ._thread_actor import SaveObserver

__all__ = ("AcrossThreads", "DeleteAcross", "SaveAcross", "UpdateAcross", "write_across")


class SaveAcross(msgspec.Struct, frozen=True):
    """Upsert each thread's messages (``by_thread``) in one transaction (``mark_pending``: and mark them as awaiting
    vectors); ``observers`` by thread, each told when the write starts and how it ended."""

    by_thread: Mapping[str, Sequence[Message]]
    mark_pending: bool = False
    observers: Mapping[str, SaveObserver] = {}

    @property
    def name(self) -> str:
        return "save_messages"

    def thread_ids(self) -> list[str]:
        return sorted(self.by_thread)


class UpdateAcross(msgspec.Struct, frozen=True):
    """Partial updates by message id (``Store.update_messages``) of messages of ``threads``, in one transaction."""

    updates: Sequence[Mapping[str, Any]]
    threads: Sequence[str]

    @property
    def name(self) -> str:
        return "update_messages"

    def thread_ids(self) -> list[str]:
        return sorted(set(self.threads))


class DeleteAcross(msgspec.Struct, frozen=True):
    """Delete messages by id (``Store.delete_messages``) of ``threads``, in one transaction."""

    ids: Sequence[str]
    threads: Sequence[str]

    @property
    def name(self) -> str:
        return "delete_messages"

    def thread_ids(self) -> list[str]:
        return sorted(set(self.threads))


AcrossThreads = SaveAcross | UpdateAcross | DeleteAcross


async def write_across(store: Store, command: AcrossThreads) -> Any:
    """(every thread's actor held) Run ``command``'s one transaction: a save returns the stored messages by thread,
    an update the updated messages, a deletion the ids it deleted."""
    match command:
        case SaveAcross(by_thread, mark_pending, observers):
            rows = [await observer.started() for observer in observers.values()]
            inline = [part for part in rows if part is not None]
            try:
                if inline:  # some parts' vectors are written by the save itself (see ``RowsForSave``)
                    written = await cast(SavesVectorRows, store).save_messages_with_vectors(
                        by_thread, VectorRows.joined(cast(list[VectorRows], inline)),
                        mark_pending=mark_pending and len(inline) < len(rows))
                else:
                    written = await store.save_messages_many(by_thread, mark_pending=mark_pending)
            except BaseException:
                for observer in observers.values():
                    observer.finished(None)
                raise
            for thread_id, observer in observers.items():
                observer.finished(written.get(thread_id, []))
            return written
        case UpdateAcross(updates, _):
            return await store.update_messages(updates)
        case DeleteAcross(ids, _):
            return await store.delete_messages(ids)
    raise TypeError(f"unknown write across threads {type(command).__name__}")  # pragma: no cover
