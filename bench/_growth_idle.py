"""The ``idle`` phase of ``bench_growth``: an idle-thread heavy deployment (see that module's docstring), in a
process of its own on a fresh database: threads touched once each, then left until every actor is passivated;
RSS, live actors, what stays per thread, the event loop's stalls and each sweep slice's duration."""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio
import numpy as np

from threadmind import Memory
from threadmind.codecs import Message
from threadmind.stores import SQLiteStore
from threadmind.testing import actor_system

from ._growth_common import GcPauses, rss_now_mb

__all__ = ("IDLE_IN_FLIGHT", "IDLE_THREADS", "IDLE_TIMEOUT", "IDLE_TRACED", "IDLE_WARM", "idle_phase",
           "idle_traced_phase")

THREADS_PER_RESOURCE = 10


IDLE_THREADS = 100_000
IDLE_TIMEOUT = 2.0
IDLE_IN_FLIGHT = 16
IDLE_TRACED = 2_000  # threads of the tracemalloc run (tracing all of them would take too long)
IDLE_WARM = 50  # threads touched before measuring: the first-use caches of the process itself
_TICK = 0.001


def _idle_memory(path: str, idle_timeout: float, max_actors: int) -> Memory:
    return Memory(storage=SQLiteStore(path), idle_timeout=idle_timeout, max_actors=max_actors,
                  options={"lastMessages": 10})


def _idle_owner(t: int) -> str:
    return f"resource-{t // THREADS_PER_RESOURCE}"


async def _touch(memory: Memory, first: int, count: int, in_flight: int = IDLE_IN_FLIGHT) -> None:
    """Touch threads ``first .. first+count-1`` once each (create, save one message, recall), ``in_flight`` at once."""
    next_t = first
    end = first + count

    async def _worker() -> None:
        nonlocal next_t
        while next_t < end:
            t = next_t
            next_t += 1
            thread, owner = f"thread-{t}", _idle_owner(t)
            await memory.create_thread(thread_id=thread, resource_id=owner)
            await memory.save_messages([Message.user(f"hello {t}", thread_id=thread, resource_id=owner)])
            await memory.recall(thread, resource_id=owner)

    async with anyio.create_task_group() as tg:
        for _ in range(in_flight):
            tg.start_soon(_worker)


def _live(memory: Memory) -> tuple[int, int]:
    system = actor_system(memory)
    return len(system.threads), len(system.resources)


async def _until_passivated(memory: Memory) -> None:
    """Poll until no thread or resource actor is live (the registries signal nothing when they empty)."""
    while _live(memory) != (0, 0):  # noqa: ASYNC110
        await anyio.sleep(0.01)


class _Ticker:
    """Sleeps 1 ms in a loop and keeps the gaps between wakeups per stage; samples RSS and live actors."""

    def __init__(self, memory: Memory, pauses: GcPauses) -> None:
        self._memory = memory
        self._pauses = pauses
        self.stage = "touch"
        self.gaps: dict[str, list[float]] = {}
        self.gc: dict[str, list[float]] = {}  # collector time within each gap
        # The event loop thread's CPU time in each gap: a long gap with little of it is the OS running
        # something else (this machine is shared), not the loop being busy.
        self.cpu: dict[str, list[float]] = {}
        self.peak_rss_mb = 0.0
        self.peak_live = (0, 0)
        self._stop = anyio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        last, last_cpu, last_gc = time.perf_counter(), time.thread_time(), self._pauses.total
        ticks = 0
        while not self._stop.is_set():
            await anyio.sleep(_TICK)
            now, cpu, collected = time.perf_counter(), time.thread_time(), self._pauses.total
            self.gaps.setdefault(self.stage, []).append(now - last)
            self.cpu.setdefault(self.stage, []).append(cpu - last_cpu)
            self.gc.setdefault(self.stage, []).append(collected - last_gc)
            last, last_cpu, last_gc = now, cpu, collected
            threads, resources = _live(self._memory)
            if threads > self.peak_live[0]:
                self.peak_live = (threads, max(resources, self.peak_live[1]))
            ticks += 1
            if ticks % 50 == 0:
                self.peak_rss_mb = max(self.peak_rss_mb, rss_now_mb())

    def report(self, stage: str) -> dict[str, float]:
        arr = np.asarray(self.gaps.get(stage, [0.0]), dtype=np.float64) * 1000.0
        cpu = np.asarray(self.cpu.get(stage, [0.0]), dtype=np.float64) * 1000.0
        without_gc = arr - np.asarray(self.gc.get(stage, [0.0]), dtype=np.float64) * 1000.0
        worst = int(arr.argmax())
        return {"ticks": int(arr.size), "max_gap_ms": round(float(arr.max()), 3),
                "p99_gap_ms": round(float(np.percentile(arr, 99)), 3),
                "p50_gap_ms": round(float(np.percentile(arr, 50)), 3),
                "gaps_over_10ms": int((arr > 10.0).sum()), "gaps_over_50ms": int((arr > 50.0).sum()),
                "max_gap_excluding_gc_ms": round(float(without_gc.max()), 3),
                "p99_gap_excluding_gc_ms": round(float(np.percentile(without_gc, 99)), 3),
                "max_gap_loop_cpu_ms": round(float(cpu[worst]), 3),
                "max_loop_cpu_in_a_gap_ms": round(float(cpu.max()), 3)}


def _rss_after_trim_mb() -> float:
    """RSS once the C allocator has handed its free pages back (``malloc_trim``, glibc only)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is not None:
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    return rss_now_mb()


class _SweepTimer:
    """Times every ``sweep`` call of one registry (the background sweeper's slices) without changing it."""

    def __init__(self, registry: Any, pauses: GcPauses) -> None:
        self.calls: list[tuple[str, float, float, int]] = []  # (stage, seconds, of which collecting, passivated)
        self.stage = "touch"
        sweep = registry.sweep

        def timed(limit: int | None = None) -> int:
            started, collected = time.perf_counter(), pauses.total
            count: int = sweep(limit)
            self.calls.append((self.stage, time.perf_counter() - started, pauses.total - collected, count))
            return count

        registry.sweep = timed

    def report(self, stage: str) -> dict[str, float]:
        calls = [c for c in self.calls if c[0] == stage]
        seconds = [c[1] for c in calls]
        return {"calls": len(calls), "passivated": sum(c[3] for c in calls),
                "max_slice_passivated": max((c[3] for c in calls), default=0),
                "max_ms": round(max(seconds, default=0.0) * 1000.0, 3),
                "max_ms_excluding_gc": round(max((c[1] - c[2] for c in calls), default=0.0) * 1000.0, 3),
                "calls_with_a_collection": sum(1 for c in calls if c[2] > 0),
                "total_ms": round(sum(seconds) * 1000.0, 3)}


async def idle_phase(path: str, threads: int, idle_timeout: float, max_actors: int) -> dict[str, Any]:
    import gc

    out: dict[str, Any] = {"threads": threads, "idle_timeout_s": idle_timeout, "max_actors": max_actors,
                           "in_flight": IDLE_IN_FLIGHT}
    memory = _idle_memory(path, idle_timeout, max_actors)
    await memory.start()
    try:
        await _touch(memory, -IDLE_WARM, IDLE_WARM)
        with anyio.fail_after(idle_timeout * 4 + 60):
            await _until_passivated(memory)
        gc.collect()
        rss_before = rss_now_mb()
        blocks_before = sys.getallocatedblocks()
        pauses = GcPauses()
        gc.callbacks.append(pauses)
        ticker = _Ticker(memory, pauses)
        sweeps = {"threads": _SweepTimer(actor_system(memory).threads, pauses),
                  "resources": _SweepTimer(actor_system(memory).resources, pauses)}
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker.run)
            started = time.perf_counter()
            await _touch(memory, 0, threads)
            touch_s = time.perf_counter() - started
            ticker.stage = "drain"
            for timer in sweeps.values():
                timer.stage = "drain"
            rss_touched = rss_now_mb()
            live_touched = _live(memory)
            started = time.perf_counter()
            with anyio.fail_after(idle_timeout * 4 + 600):
                await _until_passivated(memory)
            drain_s = time.perf_counter() - started
            ticker.stop()
        gc.callbacks.remove(pauses)
        stats = actor_system(memory).threads.statistics()
        gc.collect()
        rss_after = rss_now_mb()
        blocks_after = sys.getallocatedblocks()
        rss_trimmed = _rss_after_trim_mb()
        out["touch"] = {"seconds": round(touch_s, 3), "msgs_per_s": round(threads / touch_s),
                        "threads_per_s": round(threads / touch_s)}
        out["rss_mb"] = {"before": rss_before, "peak": max(ticker.peak_rss_mb, rss_touched),
                         "after_touching": rss_touched, "after_passivation": rss_after,
                         "after_passivation_malloc_trim": rss_trimmed}
        out["live_actors"] = {"peak_threads": ticker.peak_live[0], "peak_resources": ticker.peak_live[1],
                              "after_touching_threads": live_touched[0], "after_touching_resources": live_touched[1]}
        out["thread_actors"] = {"created": stats.created, "passivated": stats.passivated, "evicted": stats.evicted}
        out["passivation_s_after_touching"] = round(drain_s, 3)
        out["retained_per_thread"] = {
            "rss_bytes": round((rss_after - rss_before) * 2**20 / threads),
            "rss_bytes_after_malloc_trim": round((rss_trimmed - rss_before) * 2**20 / threads),
            "allocated_blocks": round((blocks_after - blocks_before) / threads, 2),
        }
        out["event_loop"] = {"touch": ticker.report("touch"), "drain": ticker.report("drain"),
                             "gc": pauses.report()}
        out["sweeps"] = {name: {stage: timer.report(stage) for stage in ("touch", "drain")}
                         for name, timer in sweeps.items()}
    finally:
        await memory.aclose()
    return out


async def idle_traced_phase(path: str, threads: int, idle_timeout: float, max_actors: int) -> dict[str, Any]:
    """The bytes tracemalloc sees retained per thread once every actor of ``threads`` touched ones is passivated."""
    import gc
    import tracemalloc

    memory = _idle_memory(path, idle_timeout, max_actors)
    async with memory:
        await _touch(memory, -IDLE_WARM, IDLE_WARM)
        with anyio.fail_after(idle_timeout * 4 + 60):
            await _until_passivated(memory)
        gc.collect()
        tracemalloc.start(1)
        try:
            before = tracemalloc.take_snapshot()
            await _touch(memory, 0, threads)
            with anyio.fail_after(idle_timeout * 4 + 600):
                await _until_passivated(memory)
            gc.collect()
            diff = tracemalloc.take_snapshot().compare_to(before, "lineno")
        finally:
            tracemalloc.stop()
    retained = sum(stat.size_diff for stat in diff)
    top = [{"where": str(stat.traceback), "bytes_per_thread": round(stat.size_diff / threads, 1),
            "blocks_per_thread": round(stat.count_diff / threads, 3)} for stat in diff[:8]]
    return {"threads": threads, "retained_bytes_per_thread": round(retained / threads, 1), "grew_most": top}


