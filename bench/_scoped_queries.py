"""The workload's scoped semantic queries through a running Memory: latencies and recall@10 against exact search.

Shared by ``bench_memory`` and ``bench_postgres`` so both time and score the same calls.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from threadmind import Memory
from threadmind.embedders import HashEmbedder
from threadmind.testing import actor_system
from threadmind.workload import STREAM_RESOURCE_QUERIES, STREAM_THREAD_QUERIES, Workload

__all__ = ("alternating_recalls", "scoped_queries")


async def scoped_queries(memory: Memory, workload: Workload) -> dict[str, dict[str, Any]]:
    """Per scope (``resource``, ``thread``): every workload query asked of the index (top 10) and through
    ``Memory.recall`` (top 4, message range 1), their latencies in seconds, recall@10 of the index against an
    exact search of the workload's own vectors, and how many queries the index answered exactly and by ANN."""
    index = actor_system(memory).index
    assert index is not None
    embedder = HashEmbedder(dim=384)
    messages = [m for t in range(workload.threads) for k in range(workload.turns)
                for m in workload.messages_for_turn(t, k)]
    vectors = (await embedder.embed([m.text for m in messages])).vectors
    owners = {"resource": np.array([m.resource_id for m in messages]),
              "thread": np.array([m.thread_id for m in messages])}
    ids = np.array([m.id for m in messages])
    result: dict[str, dict[str, Any]] = {}
    for scope, stream in (("resource", STREAM_RESOURCE_QUERIES), ("thread", STREAM_THREAD_QUERIES)):
        queries = list(workload.iter_queries(stream))
        # Three passes, so the exact oracle (which scans every vector) never runs between timed calls.
        before = index.statistics()
        index_latencies: list[float] = []
        found_ids: list[set[str]] = []
        for q in queries:
            kwargs: dict[str, Any] = (
                {"resource_id": q.resource_id} if scope == "resource" else {"thread_id": q.thread_id})
            started = time.perf_counter()
            hits = await index.query(q.text, top_k=10, **kwargs)
            index_latencies.append(time.perf_counter() - started)
            found_ids.append({h.message_id for h in hits})
        after = index.statistics()
        recall_latencies: list[float] = []
        for q in queries:
            started = time.perf_counter()
            await memory.recall(q.thread_id, resource_id=q.resource_id, per_page=0, vector_search_string=q.text,
                                thread_config={"semanticRecall": {"topK": 4, "messageRange": 1, "scope": scope}})
            recall_latencies.append(time.perf_counter() - started)
        query_vectors = (await embedder.embed([q.text for q in queries])).vectors
        found = total = 0
        for q, qv, got in zip(queries, query_vectors, found_ids, strict=True):
            mask = owners[scope] == (q.resource_id if scope == "resource" else q.thread_id)
            exact = set(ids[mask][np.argsort(-(vectors[mask] @ qv), kind="stable")[:10]])
            found += len(exact & got)
            total += len(exact)
        result[scope] = {
            "queries": len(queries), "index_latencies": index_latencies, "recall_latencies": recall_latencies,
            "recall_at_10": round(found / max(1, total), 4),
            "answered_exactly": after.brute_force_queries - before.brute_force_queries,
            "answered_by_ann": after.ann_queries - before.ann_queries,
        }
    return result


async def alternating_recalls(memory: Memory, workload: Workload, passes: int = 2) -> dict[str, list[dict[str, Any]]]:
    """Per scope and pass: every workload query recalled (top 4, range 1) by vectors alone and by the hybrid ranking
    one right after the other (each first every other query), so both modes see the same machine moment (a VM
    drifts ±30 % between runs); latencies in seconds. The first pass holds each scope's first searches, the later
    ones what a busy server repeats."""
    out: dict[str, list[dict[str, Any]]] = {}
    for scope, stream in (("resource", STREAM_RESOURCE_QUERIES), ("thread", STREAM_THREAD_QUERIES)):
        queries = list(workload.iter_queries(stream))
        runs: list[dict[str, Any]] = []
        for _ in range(passes):
            latencies: dict[str, list[float]] = {"vector": [], "hybrid": []}
            for i, q in enumerate(queries):
                # Each mode goes first every other query: the second finds the query's embedding cached.
                for mode in ("vector", "hybrid") if i % 2 == 0 else ("hybrid", "vector"):
                    config = {"semanticRecall": {"topK": 4, "messageRange": 1, "scope": scope, "search": mode}}
                    started = time.perf_counter()
                    await memory.recall(q.thread_id, resource_id=q.resource_id, per_page=0,
                                        vector_search_string=q.text, thread_config=config)
                    latencies[mode].append(time.perf_counter() - started)
            runs.append(latencies)
        out[scope] = runs
    return out
