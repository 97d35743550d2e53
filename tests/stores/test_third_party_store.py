"""A store written by someone else: a wrapper offering exactly the documented ``Store`` protocol runs the store
conformance suite and a whole Memory; a store missing a method is refused when the Memory is built."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.codecs import Resource, Thread
from threadmind.embedders import HashEmbedder
from threadmind.errors import ConfigError
from threadmind.models import ScriptedModel
from threadmind.stores import (
    STORE_METHODS,
    HnswVectorStore,
    InMemoryStore,
    Lease,
    Leases,
    MessagePage,
    MessageQuery,
    ObservationalMemoryStore,
    ReadModifyWrite,
    ResourceChange,
    SideRecords,
    SQLiteStore,
    Store,
    ThreadChange,
    ThreadPage,
    ThreadsAndMessages,
    VectorRecords,
)
from threadmind.stores._protocol import STORE_CAPABILITIES, UNSET, UnsetType

from .test_conformance import (  # noqa: F401 - the suite, collected again here over the fixture below
    TestListMessages,
    TestResources,
    TestSaveMessages,
    TestSaveMessagesMany,
    TestThreads,
    TestUpdateAndDelete,
)


class MinimalStore:
    """Exactly the ``Store`` protocol and nothing more, delegating to another store (as a user's adapter
    over their own database would)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def open(self) -> None:
        await self._inner.open()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> MinimalStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def create_thread(self, thread: Thread) -> Thread:
        return await self._inner.create_thread(thread)  # type: ignore[no-any-return]

    async def get_thread(self, thread_id: str) -> Thread | None:
        return await self._inner.get_thread(thread_id)  # type: ignore[no-any-return]

    async def list_threads(self, *, resource_id: str | None = None, page: int = 0, per_page: int | bool = 100,
                           order_by: Literal["created_at", "updated_at"] = "created_at",
                           direction: Literal["ASC", "DESC"] = "DESC",
                           metadata: Mapping[str, Any] | None = None) -> ThreadPage:
        return await self._inner.list_threads(  # type: ignore[no-any-return]
            resource_id=resource_id, page=page, per_page=per_page, order_by=order_by, direction=direction,
            metadata=metadata)

    async def update_thread(self, thread_id: str, *, title: str | None = None,
                            metadata: Mapping[str, Any] | None = None) -> Thread:
        return await self._inner.update_thread(thread_id, title=title, metadata=metadata)  # type: ignore[no-any-return]

    async def delete_thread(self, thread_id: str) -> None:
        await self._inner.delete_thread(thread_id)

    async def update_thread_resource_id(self, thread_id: str, resource_id: str) -> Thread:
        return await self._inner.update_thread_resource_id(thread_id, resource_id)  # type: ignore[no-any-return]

    async def create_thread_with_messages(self, thread: Thread, messages: Sequence[Message]) -> Thread:
        return await self._inner.create_thread_with_messages(thread, messages)  # type: ignore[no-any-return]

    async def save_messages(self, thread_id: str, messages: Sequence[Message], *,
                            mark_pending: bool = False, fence: Lease | None = None) -> list[Message]:
        return await self._inner.save_messages(  # type: ignore[no-any-return]
            thread_id, messages, mark_pending=mark_pending, fence=fence)

    async def save_messages_many(self, by_thread: Mapping[str, Sequence[Message]], *,
                                 mark_pending: bool = False, fence: Lease | None = None) -> dict[str, list[Message]]:
        return await self._inner.save_messages_many(  # type: ignore[no-any-return]
            by_thread, mark_pending=mark_pending, fence=fence)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        return await self._inner.list_messages(query)  # type: ignore[no-any-return]

    async def get_thread_with_tail(self, thread_id: str, size: int) -> tuple[Thread | None, MessagePage]:
        return await self._inner.get_thread_with_tail(thread_id, size)  # type: ignore[no-any-return]

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        return await self._inner.get_messages_by_id(ids)  # type: ignore[no-any-return]

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        return await self._inner.update_messages(updates)  # type: ignore[no-any-return]

    async def delete_messages(self, ids: Sequence[str]) -> set[str]:
        return await self._inner.delete_messages(ids)  # type: ignore[no-any-return]

    async def get_resource(self, resource_id: str) -> Resource | None:
        return await self._inner.get_resource(resource_id)  # type: ignore[no-any-return]

    async def update_resource(self, resource_id: str, *, working_memory: str | None | UnsetType = UNSET,
                              metadata: Mapping[str, Any] | None = None) -> Resource:
        return await self._inner.update_resource(  # type: ignore[no-any-return]
            resource_id, working_memory=working_memory, metadata=metadata)

    async def modify_thread(self, thread_id: str, change: Callable[[Thread], ThreadChange | None], *,
                            fence: Lease | None = None) -> Thread | None:
        return await self._inner.modify_thread(thread_id, change, fence=fence)  # type: ignore[no-any-return]

    async def modify_resource(self, resource_id: str, change: Callable[[Resource | None], ResourceChange | None], *,
                              fence: Lease | None = None) -> Resource | None:
        return await self._inner.modify_resource(resource_id, change, fence=fence)  # type: ignore[no-any-return]

    async def acquire_lease(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        return await self._inner.acquire_lease(key, owner=owner, ttl=ttl, wait=wait)  # type: ignore[no-any-return]

    async def release_lease(self, lease: Lease) -> None:
        await self._inner.release_lease(lease)

    async def renew_leases(self, owner: str, ttl: float) -> None:
        await self._inner.renew_leases(owner, ttl)

    def thread_version(self, thread_id: str) -> int:
        return self._inner.thread_version(thread_id)  # type: ignore[no-any-return]

    def resource_version(self, resource_id: str) -> int:
        return self._inner.resource_version(resource_id)  # type: ignore[no-any-return]

    def vector_records(self) -> VectorRecords:
        return self._inner.vector_records()  # type: ignore[no-any-return]

    def observational_records(self, *, ttl: float | None = None) -> ObservationalMemoryStore:
        return self._inner.observational_records(ttl=ttl)  # type: ignore[no-any-return]


def test_the_wrapper_is_exactly_the_protocol() -> None:
    public = {name for name in vars(MinimalStore) if not name.startswith("_")}
    assert public == set(STORE_METHODS)
    assert isinstance(MinimalStore(InMemoryStore()), Store)


@pytest.fixture(params=[pytest.param("memory", id="minimal-over-memory"),
                        pytest.param("sqlite", id="minimal-over-sqlite")])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    inner: Any = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "m.db", synchronous="NORMAL")
    async with MinimalStore(inner) as wrapped:
        yield wrapped


async def test_a_memory_runs_on_the_minimal_store(tmp_path: Path) -> None:
    """History, working memory, semantic recall and persistence of an agent turn, all through the wrapper."""
    options = {"lastMessages": 10, "workingMemory": {"enabled": True},
               "semanticRecall": {"topK": 2, "messageRange": 0, "scope": "resource"}}
    path = tmp_path / "third.db"
    store = MinimalStore(SQLiteStore(path, synchronous="NORMAL"))
    async with Memory(storage=store, vector=HnswVectorStore(tmp_path / "v"), embedder=HashEmbedder(dim=64),
                      options=options) as memory:
        model = ScriptedModel(["Tokyo in April sounds lovely."])
        await Agent("a", "Be brief.", model, memory=memory).generate(
            "I want to fly to Tokyo in April", thread_id="t1", resource_id="r1")
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# likes Tokyo\n")
        await memory.flush_index()
        found = await memory.recall("t2", resource_id="r1", vector_search_string="flight to Tokyo")
        assert {m.text for m in found.messages} >= {"I want to fly to Tokyo in April"}
    # Everything went into the wrapped SQLite file: a plain store sees it after the Memory closed.
    async with SQLiteStore(path) as plain:
        page = await plain.list_messages(MessageQuery(thread_id="t1", per_page=False))
        assert [m.role for m in page.messages] == ["user", "assistant"]
        resource = await plain.get_resource("r1")
        assert resource is not None and resource.working_memory == "# likes Tokyo\n"


@pytest.mark.parametrize("missing", ["save_messages_many", "get_thread_with_tail", "vector_records",
                                     "observational_records", "thread_version"])
def test_a_store_missing_a_method_is_refused_naming_it(missing: str) -> None:
    class Partial(MinimalStore):
        pass

    setattr(Partial, missing, None)
    with pytest.raises(ConfigError) as info:
        Memory(storage=Partial(InMemoryStore()))
    assert missing in info.value.message and info.value.code == "THREADMIND_STORE_INCOMPLETE"


@pytest.mark.parametrize(("capability", "methods"), list(STORE_CAPABILITIES.items()))
def test_each_capability_is_a_protocol_a_part_can_be_checked_against(capability: str,
                                                                     methods: tuple[str, ...]) -> None:
    """A third party may build its store a capability at a time: each capability is a protocol of its own that
    the finished store satisfies, a store lacking one of its methods fails only that one, and the refusal names
    the capability with the methods it lacks."""
    protocol = {"ThreadsAndMessages": ThreadsAndMessages, "ReadModifyWrite": ReadModifyWrite,
                "Leases": Leases, "SideRecords": SideRecords}[capability]
    assert isinstance(MinimalStore(InMemoryStore()), protocol)

    class Partial(MinimalStore):
        pass

    for name in methods:
        setattr(Partial, name, None)
    partial = Partial(InMemoryStore())
    assert not isinstance(partial, protocol)
    others = [p for p in (ThreadsAndMessages, ReadModifyWrite, Leases, SideRecords) if p is not protocol]
    assert all(isinstance(partial, other) for other in others)
    with pytest.raises(ConfigError) as info:
        Memory(storage=partial)
    assert f"{', '.join(methods)} ({capability})" in info.value.message


def test_the_capabilities_together_are_the_store() -> None:
    assert set(STORE_METHODS) == {name for names in STORE_CAPABILITIES.values() for name in names}
    assert len(STORE_METHODS) == len(set(STORE_METHODS))
