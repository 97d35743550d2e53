"""Helpers for the agent-pipeline tests: a memory on real SQLite, seeded history, a call-counting store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from threadmind import Memory, Message
from threadmind.codecs import MessageContent, Part, TextPart, ToolInvocation, ToolInvocationPart, utc_now
from threadmind.stores import MessagePage, MessageQuery, SQLiteStore

THREAD = "thread-1"
RESOURCE = "user-1"


def base_time() -> datetime:
    """A time an hour ago: seeded history always sorts before the turn's own messages."""
    return utc_now().replace(microsecond=0) - timedelta(hours=1)


class CountingStore:
    """Delegates to a real store and records every ``list_messages`` query and ``get_messages_by_id`` call."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.queries: list[MessageQuery] = []
        self.by_id_calls: list[list[str]] = []

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        self.queries.append(query)
        return await self.inner.list_messages(query)

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        self.by_id_calls.append(list(ids))
        return await self.inner.get_messages_by_id(ids)

    def probe_queries(self) -> list[MessageQuery]:
        """The ``per_page=1`` newest-message probes (MemoryInputFilter step 6)."""
        return [q for q in self.queries if q.per_page == 1]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@asynccontextmanager
async def open_memory(
    tmp_path: Path, options: Mapping[str, Any] | None = None, *, counting: bool = False, name: str = "memory.db",
    **kwargs: Any,
) -> AsyncIterator[Memory]:
    """A started Memory on a SQLite file under ``tmp_path`` (its store wrapped in CountingStore if asked)."""
    store: Any = SQLiteStore(str(tmp_path / name), synchronous="NORMAL")  # WAL: durable enough for tests
    if counting:
        store = CountingStore(store)
    async with Memory(storage=store, options=dict(options) if options is not None else None, **kwargs) as memory:
        yield memory


def msg(role: Any, *parts: Part, id: str, at: datetime, text: str | None = None,  # noqa: A002 - mirrors Message
        thread_id: str = THREAD, resource_id: str = RESOURCE, **content: Any) -> Message:
    """A message with explicit parts, id and time (``text`` also sets ``content.content``)."""
    return Message(id=id, role=role, content=MessageContent(parts=list(parts), content=text, **content),
                   created_at=at, thread_id=thread_id, resource_id=resource_id)


def text_msg(role: Any, text: str, *, id: str, at: datetime, **kwargs: Any) -> Message:  # noqa: A002
    """A message with one text part mirrored in ``content.content``."""
    return msg(role, TextPart(text=text), id=id, at=at, text=text, **kwargs)


def tool_part(state: Any, call_id: str, name: str = "ask", args: Any = None, result: Any = None,
              **extra: Any) -> ToolInvocationPart:
    """A tool-invocation part."""
    invocation = ToolInvocation(state=state, tool_call_id=call_id, tool_name=name,
                                args=args if args is not None else {"q": call_id}, result=result)
    return ToolInvocationPart(tool_invocation=invocation, **extra)


async def seed(memory: Memory, messages: Sequence[Message], *, thread_id: str = THREAD,
               resource_id: str = RESOURCE) -> None:
    """Create the thread when needed and save ``messages`` through the public API."""
    if await memory.get_thread_by_id(thread_id) is None:
        await memory.create_thread(resource_id=resource_id, thread_id=thread_id)
    await memory.save_messages(list(messages))


async def stored(memory: Memory, thread_id: str = THREAD, resource_id: str = RESOURCE) -> list[Message]:
    """Every stored message of the thread, oldest first."""
    result = await memory.recall(thread_id, resource_id=resource_id, per_page=False)
    return result.messages


def texts(messages: Sequence[Message]) -> list[str]:
    """The text of each message."""
    return [m.text for m in messages]


def tool_states(message: Message) -> dict[str, str]:
    """Tool call id → state of a message's tool-invocation parts."""
    return {p.tool_invocation.tool_call_id: p.tool_invocation.state
            for p in message.content.parts if isinstance(p, ToolInvocationPart)}


def by_id(messages: Sequence[Message], message_id: str) -> Message:
    """The message with that id (AssertionError when absent)."""
    found = [m for m in messages if m.id == message_id]
    assert len(found) == 1, f"{message_id} appears {len(found)} times in {[m.id for m in messages]}"
    return found[0]
