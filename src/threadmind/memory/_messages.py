"""Saving, updating and deleting messages: one transaction per call, in every thread's order.

A batch of one thread goes through that thread's actor; a batch spanning threads is written in one store
transaction while every involved thread's actor is held (taken in sorted order, so batches never deadlock).
With semantic recall on, a save embeds while it commits and stages the vectors only once the commit succeeded; the
save also marks its messages as awaiting vectors in the same transaction. Where the message store can write the
vectors in the save's own statement (``PostgresStore`` with ``PgVectorStore`` in its database), the save embeds
first and its vectors commit with the messages.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._config import MemoryConfig
from .._results import SaveResult, Usage
from ..actors._across import DeleteAcross, SaveAcross, UpdateAcross
from ..actors._thread_actor import DeleteMessages, SaveMessages, SaveObserver
from ..codecs import Message
from ..errors import ValidationError

if TYPE_CHECKING:
    from ._core import MemoryCore

__all__ = ("delete_messages", "reindex_messages", "save_batch", "update_messages")

_log = logging.getLogger("threadmind.memory")

async def save_batch(core: MemoryCore, batch: list[Message], config: MemoryConfig) -> SaveResult:
    """Persist a checked, de-duplicated batch (each message carries its thread and resource)."""
    door = core.door
    door.check_running()
    if not batch:
        return SaveResult(messages=[])
    by_thread: dict[str, list[Message]] = {}
    for message in batch:
        by_thread.setdefault(message.thread_id or "", []).append(message)
    index = core.door.index if config.semantic_recall_config is not None else None
    mark = index is not None
    # With semantic recall on, each thread's part is embedded while it commits and its vectors are staged once it
    # has committed, queued in the thread's commit order (a message re-saved later ends with its later text); the
    # save returns once they are queryable. One thread or several alike.
    gates = {thread_id: index.upsert_on_commit(messages) for thread_id, messages in by_thread.items()} \
        if index is not None else {}
    for gate in gates.values():  # where the save can write its vectors itself, they are embedded first
        await gate.prepare()
    if len(by_thread) == 1:
        ((thread_id, messages),) = by_thread.items()
        saved: list[Message] = await door.ask(thread_id, SaveMessages(messages, mark, gates.get(thread_id)))
    else:
        saved = await _save_across(core, by_thread, mark, gates)
    tokens = 0
    for gate in gates.values():
        tokens += await gate.result()
    saved.sort(key=_created_at)  # as stored: ascending by created_at, ties in batch order (reference §1)
    return SaveResult(messages=saved, usage=Usage(tokens=tokens) if tokens else None)


async def _save_across(core: MemoryCore, by_thread: dict[str, list[Message]], mark: bool,
                       gates: Mapping[str, SaveObserver]) -> list[Message]:
    """One transaction for every thread's part, written while each thread's actor is held (``SaveAcross``), so the
    batch takes its place in every thread's arrival order and no part commits without the others; each thread's
    gate (its index work) is told when the write starts and how it ended."""
    written: dict[str, list[Message]] = await core.door.across(SaveAcross(by_thread, mark, gates))
    return [m for thread_id in by_thread for m in written[thread_id]]


async def update_messages(core: MemoryCore, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Partial updates by id, one transaction across threads; changed text is re-embedded."""
    door = core.door
    door.check_running()
    existing = {m.id: m for m in await door.get_messages_by_id([u["id"] for u in updates])}
    by_thread: dict[str, list[Mapping[str, Any]]] = {}
    for i, update in enumerate(updates):
        old = existing.get(update["id"])
        if old is None:
            raise ValidationError(f"updates[{i}].id: message {update['id']!r} does not exist")
        for key in ("resource_id", "resourceId"):  # a message always carries its thread's owner
            if key in update and update[key] != old.resource_id:
                raise ValidationError(f"updates[{i}].{key}: message {old.id!r} belongs to resource "
                                      f"{old.resource_id!r}; use update_thread_resource_id to move threads")
        by_thread.setdefault(old.thread_id or "", []).append(update)
    # One transaction for every thread involved, written while their actors are held (as a batch save).
    updated: list[Message] = await door.across(UpdateAcross(list(updates), list(by_thread)))
    index = core.door.index
    if index is not None and core.options.semantic_recall_config is not None:
        changed = [m for m in updated if existing[m.id].content != m.content]
        if changed:
            await index.upsert_messages(changed)
    return updated


async def delete_messages(core: MemoryCore, ids: list[str]) -> None:
    """Delete messages (one transaction across threads) and their vectors."""
    door = core.door
    door.check_running()
    by_thread: dict[str, list[str]] = {}
    for message in await door.get_messages_by_id(ids):
        by_thread.setdefault(message.thread_id or "", []).append(message.id)
    if len(by_thread) == 1:
        ((thread_id, subset),) = by_thread.items()
        await door.ask(thread_id, DeleteMessages(subset))
    elif by_thread:  # one transaction for every thread involved, written while their actors are held
        found = [mid for subset in by_thread.values() for mid in subset]
        await door.across(DeleteAcross(found, list(by_thread)))
    index = core.door.index
    if index is not None:
        await index.delete_messages(ids)


def _created_at(message: Message) -> datetime:
    return message.created_at


async def reindex_messages(core: MemoryCore, progress: Any = None, keyword_progress: Any = None) -> int:
    """``Memory.reindex``: the words of every message the keyword index lacks, then vectors for every message that has
    none; the vectors made (progress to the log unless callbacks are given)."""
    core.door.check_running()
    door = core.door
    if door.keyword_index:
        def _log_words(done: int, total: int) -> None:
            _log.info("reindex: %d/%d messages indexed by their words", done, total)

        await door.build_keyword_index(keyword_progress if keyword_progress is not None else _log_words)
    index = core.door.running_index()
    if index is None:
        return 0

    def _log_progress(done: int, total: int) -> None:
        _log.info("reindex: %d/%d messages embedded", done, total)

    return await index.reindex(progress if progress is not None else _log_progress)
