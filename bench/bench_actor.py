"""Benchmark of one actor hop: microseconds per ``ask`` round trip on the shared ``Actor`` base.

Run: ``python -m bench.bench_actor [--asks 500] [--repeat 3]``. One actor whose handler returns its command;
one caller asks it ``--asks`` times in a row, ``--repeat`` times. Prints one JSON document: the best run
(what the hop costs without interference), the median run, and every run, in µs per round trip. asyncio runs
without debug mode (which costs about 20x per hop).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import anyio

from threadmind.actors._actor import Actor


class _Echo(Actor[int]):
    async def handle(self, command: int) -> int:
        return command


async def _round_trips(actor: _Echo, asks: int) -> float:
    """µs per round trip over ``asks`` back-to-back asks."""
    started = time.perf_counter()
    for i in range(asks):
        await actor.ask(i)
    return (time.perf_counter() - started) / asks * 1e6


async def _main(asks: int, repeat: int) -> dict[str, Any]:
    actor = _Echo("bench")
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run)
        try:
            await actor.ask(0)  # the first hop pays for the loop's start
            runs = [await _round_trips(actor, asks) for _ in range(repeat)]
        finally:
            actor.close()
    processed = actor.statistics().processed
    if processed != 1 + asks * repeat:
        raise RuntimeError(f"the actor handled {processed} commands, expected {1 + asks * repeat}")
    return {
        "ask_round_trip_us": {
            "asks": asks,
            "best": round(min(runs), 2),
            "median": round(statistics.median(runs), 2),
            "runs": [round(r, 2) for r in runs],
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--asks", type=int, default=500, help="back-to-back asks per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs (the best and the median are reported)")
    args = parser.parse_args(argv)
    if args.asks < 1:
        parser.error("--asks must be at least 1")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    report = anyio.run(_main, args.asks, args.repeat, backend="asyncio", backend_options={"debug": False})
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
