"""Read-your-writes across OS processes (SPEC §10) over a random sequence of saves, updates and deletions, each
made by this process or by a worker process on one SQLite file or one PostgreSQL database, each process with its own
caches and its own HNSW index: after every write, both processes' next reads (the conversation, a search by words,
a search by vectors) find exactly what was written."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.multiprocess._harness import Worker, workers
from tests.multiprocess._worker import make_memory

from threadmind import Memory, Message

WORDS = "dog cat harbour marathon parrot violin river coffee novel chess".split()


async def _reads(memory: Memory, child: Worker, ids: list[str], texts: dict[str, str], probe: str | None) -> None:
    """Both processes read the conversation as ``ids``; a message's unique word and its exact text find it."""
    page = await memory.recall("t-vis", resource_id="r1", per_page=False)
    assert [m.id for m in page.messages] == ids
    await child.send("recall")
    assert (await child.event("recalled"))["ids"] == ids
    if probe is None:
        return
    word, text = f"u{probe[1:]}", texts.get(probe)
    found = [h.message.id for h in await memory.search(word, resource_id="r1", top_k=3, search="keyword")]
    await child.send(f"words {word}")
    theirs = (await child.event("found"))["ids"]
    expected = [probe] if text is not None else []
    assert found[:1] == expected and theirs[:1] == expected, (probe, found, theirs)
    if text is not None:
        hits = await memory.search_vectors(text, top_k=3, resource_id="r1")
        await child.send(f"search {text}")
        assert [h.message_id for h in hits][:1] == [probe]
        assert (await child.event("found"))["ids"][:1] == [probe]


async def test_random_writes_of_either_process_are_read_by_both_at_once(backend: dict[str, Any],
                                                                       tmp_path: Path) -> None:
    rng = random.Random(21)
    base = {"store": backend, "lease_ttl": 2.0, "semantic": True}
    async with make_memory({**base, "hnsw_path": str(tmp_path / "parent.hnsw")}) as memory:
        await memory.create_thread(thread_id="t-vis", resource_id="r1")
        config = {**base, "hnsw_path": str(tmp_path / "child.hnsw"), "scenario": "serve", "proc": 0}
        async with workers([config]) as (child,):
            ids: list[str] = []
            texts: dict[str, str] = {}
            for n in range(30):
                by_child = rng.random() < 0.5
                kind = rng.choice(["save", "save", "update", "delete"]) if ids else "save"
                probe: str | None
                if kind == "save":
                    probe = f"m{n}"
                    text = f"{' '.join(rng.sample(WORDS, 3))} u{n}"
                    if by_child:
                        await child.send(f"save {probe} {text}")
                        await child.event("saved")
                    else:
                        await memory.save_messages([Message.user(text, id=probe, thread_id="t-vis", resource_id="r1",
                                                                 created_at=datetime.now(UTC))])
                    ids.append(probe)
                    texts[probe] = text
                elif kind == "update":
                    probe = rng.choice(ids)
                    text = f"{' '.join(rng.sample(WORDS, 2))} u{probe[1:]} edited {n}"
                    if by_child:
                        await child.send(f"update {probe} {text}")
                        await child.event("updated")
                    else:
                        await memory.update_messages([{"id": probe, "content": {"content": text}}])
                    texts[probe] = text
                else:
                    probe = rng.choice(ids)
                    if by_child:
                        await child.send(f"delete {probe}")
                        await child.event("deleted")
                    else:
                        await memory.delete_messages([probe])
                    ids.remove(probe)
                    del texts[probe]
                await _reads(memory, child, ids, texts, probe)
            await child.send("quit")
            await child.event("done")
