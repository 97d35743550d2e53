"""What the machine under the figures can do: CPU count, load, the interpreter's speed and the disk's fsync time.

Run: ``python -m bench.bench_machine [--dir DIR] [--syncs 400]``. Prints JSON: cores, the load average, the
best time of a million additions in a Python loop, and p50/p90/p99 of one 24 KiB overwrite + ``fdatasync`` in
``DIR`` (default: the current folder), which is what a SQLite commit at ``synchronous=FULL`` waits for. Label
benchmark figures with it: it moves more than the code.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

_BLOCK = 24 * 1024


def fsync_times_ms(folder: str, syncs: int) -> list[float]:
    """Milliseconds per 24 KiB overwrite followed by ``fdatasync`` (``fsync`` where it is missing)."""
    sync = getattr(os, "fdatasync", os.fsync)
    payload = os.urandom(_BLOCK)
    fd, path = tempfile.mkstemp(dir=folder, prefix="bench-fsync-")
    try:
        os.write(fd, payload)
        sync(fd)
        times: list[float] = []
        for _ in range(syncs):
            os.lseek(fd, 0, os.SEEK_SET)
            started = time.perf_counter()
            os.write(fd, payload)
            sync(fd)
            times.append((time.perf_counter() - started) * 1000.0)
        return times
    finally:
        os.close(fd)
        os.unlink(path)


def python_loop_ms(repeat: int = 5) -> float:
    """Best of ``repeat`` timings of one million additions in a Python loop: the interpreter's speed here."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best * 1000.0, 1)


def describe(folder: str = ".", syncs: int = 400) -> dict[str, Any]:
    """The machine's figures as a JSON-ready dict."""
    times = np.asarray(fsync_times_ms(folder, syncs))
    return {
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "fsync_24k_ms": {f"p{p}": round(float(np.percentile(times, p)), 3) for p in (50, 90, 99)},
        "python_loop_1m_adds_ms": python_loop_ms(),
        "syncs": syncs,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=".", help="folder on the disk to probe (default: the current one)")
    parser.add_argument("--syncs", type=int, default=400, help="fsyncs to time (default: 400)")
    args = parser.parse_args(argv)
    if args.syncs < 1:
        parser.error("--syncs must be at least 1")
    print(json.dumps(describe(args.dir, args.syncs), indent=2))


if __name__ == "__main__":
    main()
