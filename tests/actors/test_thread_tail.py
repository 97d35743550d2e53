"""The thread actor's in-memory tail always answers the default window exactly as the database would."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from threadmind import Memory, Message
from threadmind.actors._tail import Tail
from threadmind.stores import InMemoryStore, SQLiteStore

BASE = datetime(2025, 1, 1, tzinfo=UTC)


def _msg(i: int, seconds: int, text: str | None = None) -> Message:
    return Message.user(text or f"message {i}", id=f"m{i}", thread_id="t", resource_id="r",
                        created_at=BASE + timedelta(seconds=seconds))


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_random_operations_keep_the_tail_exact(tmp_path: Path, kind: str) -> None:
    rng = random.Random(5)
    store = SQLiteStore(tmp_path / "m.db") if kind == "sqlite" else InMemoryStore()
    async with Memory(storage=store, options={"lastMessages": 7}) as memory:
        await memory.create_thread(thread_id="t", resource_id="r")
        known: list[int] = []
        next_id = 0
        for step in range(150):
            action = rng.random()
            if action < 0.55 or not known:  # new messages, often with equal timestamps, sometimes older
                batch = []
                for _ in range(rng.randint(1, 3)):
                    batch.append(_msg(next_id, rng.choice([step, step, step - 50, 0])))
                    known.append(next_id)
                    next_id += 1
                await memory.save_messages(batch)
            elif action < 0.7:  # re-save an existing id with new text (keeps its place)
                i = rng.choice(known)
                await memory.save_messages([_msg(i, 999, text=f"edited {i} at {step}")])
            elif action < 0.8:
                i = known.pop(rng.randrange(len(known)))
                await memory.delete_messages([f"m{i}"])
            elif action < 0.9:
                i = rng.choice(known)
                await memory.update_messages([{"id": f"m{i}", "content": {"content": f"updated {i}"}}])
            else:
                await memory.update_thread("t", title=f"title {step}")
            fast = await memory.recall("t", resource_id="r")
            exact = await memory.recall("t", resource_id="r", per_page=7)  # straight from the store
            assert [(m.id, m.text) for m in fast.messages] == [(m.id, m.text) for m in exact.messages], step
            assert fast.total == exact.total == len(known)
            assert fast.has_more == exact.has_more


def test_tail_merge_rules() -> None:
    clock = [0.0]
    tail = Tail([_msg(1, 10), _msg(2, 20)], total=5, owner="r", clock=lambda: clock[0], ttl=1.0)
    assert tail.window(2) is not None and tail.window(3) is None  # only two of five held
    assert tail.merge([_msg(3, 20)], capacity=10)  # equal timestamp: after the stored one
    assert [m.id for m in tail.messages] == ["m1", "m2", "m3"] and tail.total == 6
    assert not tail.merge([_msg(9, 5)], capacity=10)  # older than the window: cannot place it exactly
    clock[0] = 2.0
    assert not tail.fresh
