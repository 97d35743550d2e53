"""``Memory.clone_thread``: a new thread with copies of the source's messages, vectors and side state.

Reference §1 and §7.1: the copy is titled ``"Clone of <title>"``, its metadata notes the source in
``clone``, its messages get new ids (``id_map``); thread-scoped working memory comes along, resource-scoped
working memory only into a resource that has none (an existing profile is never overwritten), and the
source's current observations are copied with their observed ids mapped to the copies. ``resource_id``
names the owner of the copy, which may differ from the source's owner (a deliberate copy across resources).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from .._results import CloneResult
from ..actors._resource_actor import ModifyResource
from ..actors._thread_actor import CreateThreadWithMessages, LoadMessages
from ..codecs import Resource, Thread
from ..codecs._time import to_iso, utc_now
from ..errors import ThreadNotFound
from ..stores import MessagePage, MessageQuery, ResourceChange
from ..stores._om import lookup_key

if TYPE_CHECKING:
    from ._core import MemoryCore

__all__ = ("clone_thread",)


async def clone_thread(
    core: MemoryCore,
    source_thread_id: str,
    *,
    new_thread_id: str | None,
    resource_id: str | None,
    title: str | None,
    metadata: Mapping[str, Any] | None,
    message_limit: int | None,
) -> CloneResult:
    """Copy the thread (arguments already validated)."""
    door = core.door
    door.check_running()
    source = await door.get_thread(source_thread_id)
    if source is None:
        raise ThreadNotFound(source_thread_id, code="MASTRA_STORAGE_LIBSQL_CLONE_THREAD_SOURCE_NOT_FOUND",
                             message=f"Source thread with id {source_thread_id} not found")
    page: MessagePage = await door.ask(
        source_thread_id, LoadMessages(MessageQuery(thread_id=source_thread_id, per_page=False)))
    originals = page.messages
    if message_limit is not None:
        originals = originals[len(originals) - message_limit:] if message_limit else []
    target_id = new_thread_id or str(uuid.uuid4())
    target_resource = resource_id or source.resource_id
    now = utc_now()
    clone_info: dict[str, Any] = {"sourceThreadId": source_thread_id, "clonedAt": to_iso(now)}
    if originals:
        clone_info["lastMessageId"] = originals[-1].id
    # Thread-scoped working memory lives in the thread's metadata: the clone inherits it (reference §7.1),
    # unless the caller's metadata sets its own.
    inherited = source.metadata.get("workingMemory") if source.metadata else None
    new_metadata = {**({"workingMemory": inherited} if isinstance(inherited, str) else {}),
                    **(metadata or {}), "clone": clone_info}
    new_title = title if title is not None else (f"Clone of {source.title}" if source.title else "")
    thread = Thread(target_id, target_resource, new_title, new_metadata, now, now)
    id_map = {m.id: str(uuid.uuid4()) for m in originals}
    copies = [
        msgspec.structs.replace(m, id=id_map[m.id], thread_id=target_id, resource_id=target_resource)
        for m in originals
    ]

    created: Thread = await door.ask(target_id, CreateThreadWithMessages(
        thread, copies, exists_code="MASTRA_STORAGE_LIBSQL_CLONE_THREAD_THREAD_EXISTS"))
    index = core.door.index
    if index is not None and core.options.semantic_recall_config is not None and copies:
        await index.copy_messages(id_map, thread_id=target_id, resource_id=target_resource)
    await _clone_side_state(core, source, created, id_map)
    return CloneResult(thread=created, messages=copies, id_map=id_map)


async def _clone_side_state(core: MemoryCore, source: Thread, clone: Thread, id_map: Mapping[str, str]) -> None:
    """Resource-scoped working memory into a new owner without one, and the source's observations."""
    door = core.door
    door.check_running()
    if clone.resource_id != source.resource_id:
        origin = await door.get_resource(source.resource_id)
        text = origin.working_memory if origin is not None else None
        if text:
            def inherit(target: Resource | None) -> ResourceChange | None:
                if target is not None and target.working_memory:
                    return None  # an existing profile is never overwritten
                return ResourceChange(working_memory=text)

            await door.modify_resource(clone.resource_id, ModifyResource(inherit, "clone_working_memory"))
    if core.options.observational_memory_config is None and core.door.observational is None:
        return
    records = core.door.observational_engine().records
    current = await records.current(lookup_key("thread", source.id, None))
    if current is not None:
        now = utc_now()
        await records.put(msgspec.structs.replace(
            current.copy(), id=str(uuid.uuid4()), lookup_key=lookup_key("thread", clone.id, None),
            thread_id=clone.id, resource_id=clone.resource_id, created_at=now, updated_at=now,
            observed_message_ids=[id_map[i] for i in current.observed_message_ids if i in id_map]))
