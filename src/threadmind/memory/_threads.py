"""Thread rows through their actors: create one, and make sure an agent turn's thread exists and is owned."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..actors._thread_actor import CreateThread, GetThread
from ..codecs import Thread
from ..codecs._time import utc_now
from ..errors import ResourceMismatch, ValidationError
from ..tracing import operation_span

if TYPE_CHECKING:
    from ._core import MemoryCore

__all__ = ("create_thread", "ensure_thread")


async def create_thread(core: MemoryCore, thread: Thread) -> Thread:
    """Insert ``thread`` through its actor; ``ValidationError`` if the id is taken. The caller opens the
    operation span (``Memory.create_thread`` one covering the resource mirror too)."""
    created: Thread = await core.door.ask(thread.id, CreateThread(thread))
    return created


async def ensure_thread(core: MemoryCore, thread_id: str, resource_id: str,
                        admit: Callable[[], Awaitable[None]] | None = None) -> Thread:
    """The run's thread, created when missing; a thread of another resource is refused (``ResourceMismatch``).

    ``admit`` runs once the thread is known to be the resource's (or before a missing one is created), so a
    request it refuses leaves no thread behind.
    """
    door = core.door
    door.check_running()
    thread: Thread | None = await door.ask(thread_id, GetThread())
    if thread is not None:
        _check_owner(thread, resource_id)
    if admit is not None:
        await admit()
    if thread is None:
        now = utc_now()
        try:
            with operation_span("threadmind.memory.create_thread", "update_memory", thread_id=thread_id,
                                resource_id=resource_id):
                thread = await create_thread(core, Thread(thread_id, resource_id, "", None, now, now))

        except ValidationError:
            thread = await core.door.get_thread(thread_id)  # created concurrently by another turn
            if thread is None:
                raise
        _check_owner(thread, resource_id)
    return thread


def _check_owner(thread: Thread, resource_id: str) -> None:
    if thread.resource_id and thread.resource_id != resource_id:
        raise ResourceMismatch(
            thread.id, thread.resource_id, resource_id, code="AGENT_MEMORY_THREAD_RESOURCE_MISMATCH",
            message=f'Thread "{thread.id}" belongs to resource "{thread.resource_id}" but resource '
                    f'"{resource_id}" was provided. A thread can only be used by the resource that owns it.',
        )
