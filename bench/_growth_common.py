"""What the phases of ``bench_growth`` share: the process's RSS, latency percentiles, the event loop's gaps and the
garbage collector's pauses."""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np

__all__ = ("GcPauses", "LoopGaps", "pcts", "rss_now_mb")


def rss_now_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return round(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def pcts(samples: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(samples, dtype=np.float64) * 1000.0
    if arr.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    return {"p50_ms": round(float(np.percentile(arr, 50)), 3), "p99_ms": round(float(np.percentile(arr, 99)), 3)}


class LoopGaps:
    """A 1 ms sleep loop beside the work: its longest gaps are how long the event loop was held (a snapshot
    written with the GIL held, a collection, a long callback) while saves and queries ran. The gaps are an
    ``array`` of doubles: a list of a quarter of a million floats would itself lengthen every full collection
    it measures."""

    def __init__(self) -> None:
        self.gaps = array("d")
        self._stop = anyio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            await anyio.sleep(0.001)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now

    def report(self) -> dict[str, float]:
        arr = np.asarray(self.gaps or [0.0], dtype=np.float64) * 1000.0
        return {"max_gap_ms": round(float(arr.max()), 2), "p99_gap_ms": round(float(np.percentile(arr, 99)), 2),
                "gaps_over_50ms": int((arr > 50.0).sum()), "gaps_over_200ms": int((arr > 200.0).sum())}


class GcPauses:
    """Garbage-collector pauses from ``gc.callbacks``: per generation the count and the longest, and the total."""

    def __init__(self) -> None:
        self.longest = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.total = 0.0  # seconds spent collecting so far (what a gap or a sweep call subtracts)
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        pause = time.perf_counter() - self._started
        self.count[generation] += 1
        self.total += pause
        self.longest[generation] = max(self.longest[generation], pause)

    def report(self) -> dict[str, Any]:
        return {"collections": self.count, "longest_ms": [round(s * 1000.0, 3) for s in self.longest],
                "total_ms": round(self.total * 1000.0, 1)}
