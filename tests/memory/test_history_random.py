"""Threads, history and working memory against the stored truth, over random sequences of every write ``Memory``
takes (saves, re-saves, updates, deletions, threads created, renamed, moved, cloned and deleted, working memory
written) through two ``Memory`` objects on one database, as two worker processes would make them: after each
write, what either one reads (a thread, its whole history, its last messages, working memory) is what the store
holds, whatever either cached (SPEC §10: caches are validated, not trusted)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import pytest

from threadmind import Memory
from threadmind.stores import InMemoryStore, Store

from ._random_writes import RandomWrites, stores_on_one_database

LAST = 4
OPTIONS = {"lastMessages": LAST, "workingMemory": {"enabled": True}, "generateTitle": False}


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def setup(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Memory, Memory, Store]]:
    """Two Memory objects on one database and a plain store object on it (the truth: no cache of Memory's)."""
    if request.param == "memory":
        store = InMemoryStore()
        async with Memory(storage=store, options=OPTIONS) as only:
            yield only, only, store
        return
    make = stores_on_one_database(request.param, request, tmp_path)
    async with Memory(storage=make(), options=OPTIONS) as one, Memory(storage=make(), options=OPTIONS) as two:
        async with make() as truth:
            yield one, two, truth


async def _check(writes: RandomWrites, truth: Store) -> None:
    for thread in writes.rng.sample(list(writes.threads), min(2, len(writes.threads))):
        stored = await truth.get_thread(thread)
        assert stored is not None
        every = sorted(await truth.get_messages_by_id([m for m, t in writes.messages.items() if t == thread]),
                       key=lambda m: m.created_at)
        want = [(m.id, m.text) for m in every]
        for memory in writes.memories:
            seen = await memory.get_thread_by_id(thread)
            assert seen is not None
            assert (seen.resource_id, seen.title, seen.metadata) == (stored.resource_id, stored.title, stored.metadata)
            whole = await memory.recall(thread, resource_id=stored.resource_id, per_page=False)
            assert [(m.id, m.text) for m in whole.messages] == want
            last = await memory.recall(thread, resource_id=stored.resource_id)
            assert [(m.id, m.text) for m in last.messages] == want[-LAST:]
            notes = await memory.get_working_memory(thread_id=thread, resource_id=stored.resource_id)
            if stored.resource_id in writes.notes:
                assert notes == writes.notes[stored.resource_id]
            await _pages(writes, memory, thread, stored.resource_id, want)


async def _pages(writes: RandomWrites, memory: Memory, thread: str, resource: str,
                 want: list[tuple[str, str]]) -> None:
    """A random page (each direction) and a random context window read as the stored history cuts them."""
    rng = writes.rng
    size, page = rng.randint(1, 4), rng.randint(0, 2)
    newest = want[::-1]
    cuts: list[tuple[Literal["ASC", "DESC"] | None, list[tuple[str, str]]]] = [
        (None, newest[page * size:(page + 1) * size][::-1]), ("ASC", want[page * size:(page + 1) * size]),
        ("DESC", newest[page * size:(page + 1) * size])]
    for direction, expected in cuts:
        got = await memory.recall(thread, resource_id=resource, per_page=size, page=page, direction=direction)
        assert [(m.id, m.text) for m in got.messages] == expected, (direction, size, page)
        assert got.total == len(want) and got.has_more == ((page + 1) * size < len(want))
    if want:
        at = rng.randrange(len(want))
        before, after = rng.randint(0, 2), rng.randint(0, 2)
        window = await memory.recall(thread, resource_id=resource, per_page=0, include=[
            {"id": want[at][0], "withPreviousMessages": before, "withNextMessages": after}])
        assert [m.id for m in window.messages] == [mid for mid, _ in want[max(0, at - before):at + after + 1]]


# A second seed in CI's slow tier: the README's command keeps one (the suite's time on two cores).
@pytest.mark.slow_variants("postgres")  # SQLite's two store objects stay in the default run
@pytest.mark.parametrize("seed", [6, pytest.param(7, marks=pytest.mark.slow)])
async def test_every_read_is_what_the_store_holds_after_every_write(setup: tuple[Memory, Memory, Store],
                                                                   seed: int) -> None:
    writes = RandomWrites(seed, setup[:2])
    for _ in range(60):
        await writes.write()
        await _check(writes, setup[2])
    assert {"save", "resave", "update", "delete", "delete_thread", "move", "clone", "rename", "working"} <= writes.done
