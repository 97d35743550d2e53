"""Shared test factories: messages and tool parts, a fake clock, stores and memories, and reading a thread back.

A folder's ``_support`` module, or a test file's own helper, keeps only what differs (a signature its tests
share, a loop mode) and builds on these.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from threadmind import Memory, Message
from threadmind.codecs import MessageContent, Part, Role, TextPart, ToolInvocation, ToolInvocationPart
from threadmind.codecs._time import utc_now
from threadmind.embedders import Embedder, HashEmbedder
from threadmind.memory import MemoryConfig, WorkingMemoryConfig
from threadmind.stores import HnswVectorStore, InMemoryStore, MessagePage, MessageQuery, SQLiteStore, Store

THREAD = "thread-1"
RESOURCE = "user-1"
BASE = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
"""A fixed clock origin for messages whose order, not their age, is what a test is about."""

StoreKind = Literal["sqlite", "memory"]
StoreFactory = Callable[[], Store]


# -- time -----------------------------------------------------------------------------------------------
def base_time() -> datetime:
    """A time an hour ago: seeded history always sorts before the turn's own messages."""
    return utc_now().replace(microsecond=0) - timedelta(hours=1)


class FakeClock:
    """A monotonic clock (seconds) that moves only when a test moves it (``advance`` or ``now +=``); pass it
    as ``clock=`` to what takes one (actors, the actor registry, in-process leases)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- messages -------------------------------------------------------------------------------------------
def msg(role: Role, *parts: Part, id: str, at: datetime, text: str | None = None,  # noqa: A002 - mirrors Message
        thread_id: str | None = THREAD, resource_id: str | None = RESOURCE, **content: Any) -> Message:
    """A message with explicit parts, id and time (``text`` also sets ``content.content``; ``content`` holds
    the other content fields)."""
    return Message(id=id, role=role, content=MessageContent(parts=list(parts), content=text, **content),
                   created_at=at, thread_id=thread_id, resource_id=resource_id)


def text_msg(role: Role, text: str, *, id: str, at: datetime, **kwargs: Any) -> Message:  # noqa: A002
    """A message with one text part mirrored in ``content.content``."""
    return msg(role, TextPart(text=text), id=id, at=at, text=text, **kwargs)


def tool_part(state: Any, call_id: str, name: str = "ask", args: Any = None, result: Any = None,
              **extra: Any) -> ToolInvocationPart:
    """A tool-invocation part (``state`` is not checked: tests pass states Mastra never writes)."""
    invocation = ToolInvocation(state=state, tool_call_id=call_id, tool_name=name,
                                args=args if args is not None else {"q": call_id}, result=result)
    return ToolInvocationPart(tool_invocation=invocation, **extra)


# -- stores and memories --------------------------------------------------------------------------------
def new_store(kind: StoreKind, path: Path, **sqlite_options: Any) -> Store:
    """A fresh store: a SQLite file at ``path`` (with ``sqlite_options``), or an in-memory one."""
    if kind == "sqlite":
        return SQLiteStore(path, **sqlite_options)
    return InMemoryStore()


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


def working_memory(store: Store | None = None, **wm: Any) -> Memory:
    """A Memory (not started) with working memory enabled and ``wm`` as its other settings, over ``store``
    (an in-memory one when none is given)."""
    config = MemoryConfig(working_memory=WorkingMemoryConfig(enabled=True, **wm))
    return Memory(storage=store if store is not None else InMemoryStore(), options=config)


def semantic_memory(store: Store, vectors: Path, options: Mapping[str, Any], *,
                    embedder: Embedder | None = None) -> Memory:
    """A Memory (not started) with semantic recall: ``store``, an HNSW index under ``vectors``, and the
    64-dimension hash embedder unless given another."""
    return Memory(storage=store, vector=HnswVectorStore(vectors),
                  embedder=embedder if embedder is not None else HashEmbedder(dim=64), options=options)


# -- seeding and reading back ---------------------------------------------------------------------------
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


async def all_ids(memory: Memory, thread_id: str) -> list[str]:
    """Every message id of a thread in (created_at, sequence) order."""
    result = await memory.recall(thread_id, per_page=False)
    return [m.id for m in result.messages]


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
