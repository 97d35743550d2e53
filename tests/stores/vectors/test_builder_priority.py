"""hnswlib insertion runs at a lower CPU priority than serving: the graph only speeds up large scopes, so it
takes the CPU that saves and queries leave (Linux keeps a nice value per thread)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from threadmind.actors._index_actor import IndexActor
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vectors import _hnsw_index, _hnsw_session
from threadmind.stores._vectors._hnsw import HnswVectorStore

from ._support import FlakyEmbedder, make_message, persist

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


async def test_flushes_and_loads_add_to_hnswlib_in_nicer_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, list[tuple[int, str]]] = {"flush": [], "load": []}
    apply, add_now = _hnsw_index.HnswIndex.apply_flush, _hnsw_index.HnswIndex.add_now

    def _apply(index: Any, plan: Any) -> int:
        seen["flush"].append((_nice(), threading.current_thread().name))
        return apply(index, plan)

    def _add(index: Any, records: Any) -> None:
        seen["load"].append((_nice(), threading.current_thread().name))
        add_now(index, records)

    monkeypatch.setattr(_hnsw_index.HnswIndex, "apply_flush", _apply)
    monkeypatch.setattr(_hnsw_index.HnswIndex, "add_now", _add)
    monkeypatch.setattr(_hnsw_session, "SNAPSHOT_AT_CLOSE_MAX", 0)  # the restart adds the rows from SQL
    serving = _nice()
    messages = [make_message(f"m{i}", "t1", "r1", f"note {i} about trams", i) for i in range(40)]
    async with SQLiteStore(tmp_path / "m.db") as store:
        await persist(store, messages)
        async with IndexActor(store=store, vector=HnswVectorStore(tmp_path / "vec"), embedder=FlakyEmbedder(),
                              retry_interval=None) as actor:
            await actor.upsert_messages(messages)
            await actor.flush()
        async with IndexActor(store=store, vector=HnswVectorStore(tmp_path / "vec"), embedder=FlakyEmbedder(),
                              retry_interval=None) as actor:
            assert [h.message_id for h in await actor.query(messages[9].text, top_k=1, thread_id="t1")] == ["m9"]
    assert seen["flush"] and seen["load"]
    expected = min(19, serving + _hnsw_session.BUILD_NICENESS)
    for nice, name in seen["flush"] + seen["load"]:
        assert (nice, name) == (expected, "threadmind index builder")
    assert _nice() == serving  # the serving thread kept its priority
