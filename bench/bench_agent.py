"""Per-turn memory overhead of the agent pipeline, on a 1 000-message thread.

Run: ``python -m bench.bench_agent [--turns 300] [--history 1000] [--deltas 500]``. Prints JSON for last-10 history (at
``synchronous=FULL`` and NORMAL), a token budget, working memory, semantic recall and observational memory:

* ``p50_ms``/``p95_ms``/``p99_ms``: the whole ``generate()`` call minus the model's own time. This also
  counts the agent's own work (building the request, assembling the response), which a turn without
  memory pays too; ``agent_without_memory`` reports that alone.
* ``memory_steps``: what the issue calls the memory overhead, measured directly: the time a turn spends in
  the input processors, the output processors (the persist) and making sure the thread exists.
* ``concurrent_64_conversations``: 64 threads talking at once (last-10 history), turns/s and the latency of
  each whole turn (model included; it answers at once).
* ``last_10_after_a_pause``: one turn on each of many threads idle past the actors' 2 s cache TTL, the
  usual case in a real chat (the back-to-back turns above find the thread row and window cached);
  ``..._single_process``: the same with ``Memory(cache_ttl=None)``, for a file no other process writes.
* ``stream``: ``Agent.stream()`` over a model that streams ``deltas`` text deltas instantly, without memory and
  with last-10 history. ``added_first_token_ms``: the time from ``stream()`` to the first ``text-delta`` event
  minus the model's own time to its first chunk (measured inside each run); ``first_event_ms``: to the ``start``
  event; ``per_event_overhead_us``: the time per ``text-delta`` while the reply streams, minus the model's own
  time per chunk read alone; ``ui_events_per_s``: events through ``ui_message_stream`` (SSE bytes) per second while
  the reply streams (``..._whole_runs``: over whole runs, memory's reads and the save included).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

import anyio
import numpy as np

import threadmind.agent._run as agent_module
import threadmind.memory._turn as turn_module
from threadmind import Memory, Message
from threadmind.agent import Agent
from threadmind.embedders import HashEmbedder
from threadmind.events import StartEvent, TextDeltaEvent
from threadmind.models import ModelChunk, ModelRequest, ModelResponse
from threadmind.stores import HnswVectorStore, SQLiteStore
from threadmind.ui import ui_message_stream
from threadmind.workload import Workload


class _TimedModel:
    """Answers instantly and records how long the model step itself took (to subtract it)."""

    model_id = "bench/instant"

    def __init__(self) -> None:
        self.seconds = 0.0
        self.context_sizes: list[int] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        self.context_sizes.append(len(request.messages))
        response = ModelResponse(text="ok, noted")
        self.seconds += time.perf_counter() - started
        return response


class _MemorySteps:
    """Times the memory steps of each turn: input processors, output processors (persist), thread check
    (``ensure_thread`` as ``Memory.turn`` calls it).

    Wraps the functions ``Agent`` calls for them while the context is open; every processor in this
    benchmark is one of memory's, so their sum is the memory overhead.
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    _WRAPPED = ((agent_module, "run_input_processors"), (agent_module, "run_output_processors"),
                (turn_module, "ensure_thread"))

    def __enter__(self) -> _MemorySteps:
        self._saved = [getattr(owner, name) for owner, name in self._WRAPPED]
        for (owner, name), original in zip(self._WRAPPED, self._saved, strict=True):
            setattr(owner, name, self._timed(original))
        return self

    def __exit__(self, *exc: object) -> None:
        for (owner, name), original in zip(self._WRAPPED, self._saved, strict=True):
            setattr(owner, name, original)

    def _timed(self, fn: Any) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


class _InstantStream:
    """Streams ``deltas`` one-word text deltas at once; notes when each stream was asked for and gave its first."""

    model_id = "bench/instant-stream"

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas
        self.called = 0.0
        self.first_chunk = 0.0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=" ".join(["word"] * self.deltas))

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelChunk, None]:
        self.called = time.perf_counter()
        self.first_chunk = 0.0
        for _ in range(self.deltas):
            if not self.first_chunk:
                self.first_chunk = time.perf_counter()
            yield ModelChunk(text=" word")
        yield ModelChunk(finish_reason="stop")


async def _model_alone(model: _InstantStream, runs: int) -> float:
    """Seconds the model's own stream takes to be read to its end (the best of ``runs``)."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        async with aclosing(model.stream(ModelRequest())) as chunks:
            async for _chunk in chunks:
                pass
        best = min(best, time.perf_counter() - started)
    return best


async def _stream_runs(agent: Agent, model: _InstantStream, runs: int, ids: tuple[str, str] | None) -> dict[str, Any]:
    first_event: list[float] = []
    added_first_token: list[float] = []
    streaming: list[float] = []  # first text delta to last, per delta
    thread_id, resource_id = ids or (None, None)
    for i in range(runs):
        started = time.perf_counter()
        stream = agent.stream(f"question number {i} about the tokyo flight", thread_id=thread_id,
                              resource_id=resource_id)
        first = last = 0.0
        async with stream:
            async for event in stream:
                if isinstance(event, StartEvent):
                    first_event.append(time.perf_counter() - started)
                elif isinstance(event, TextDeltaEvent):
                    last = time.perf_counter()
                    if not first:
                        first = last
                        added_first_token.append(first - started - (model.first_chunk - model.called))
        streaming.append((last - first) / (model.deltas - 1))
    alone = await _model_alone(model, min(runs, 20)) / model.deltas
    overhead_ms_as_us = [(per_delta - alone) * 1000 for per_delta in streaming]  # _pcts scales by 1000 again
    return {"runs": runs, "deltas": model.deltas,
            "first_event_ms": _pcts(first_event), "added_first_token_ms": _pcts(added_first_token),
            "per_event_overhead_us": {k.replace("_ms", "_us"): v for k, v in _pcts(overhead_ms_as_us).items()},
            "model_alone_per_delta_us": round(alone * 1e6, 4)}


async def _ui_throughput(agent: Agent, runs: int, ids: tuple[str, str] | None) -> dict[str, int]:
    """Events per second through ``ui_message_stream`` (each event framed as SSE bytes): while the reply streams
    (first ``text-delta`` frame to the last), and over whole runs (the turn's own work included)."""
    frames = streamed = 0
    streaming_seconds = 0.0
    thread_id, resource_id = ids or (None, None)
    started = time.perf_counter()
    for i in range(runs):
        stream = agent.stream(f"question {i}", thread_id=thread_id, resource_id=resource_id)
        first = last = 0.0
        deltas = 0
        async with aclosing(ui_message_stream(stream)) as body:
            async for frame in body:
                frames += 1
                if b'"text-delta"' in frame:
                    last = time.perf_counter()
                    first = first or last
                    deltas += 1
        streamed += deltas - 1
        streaming_seconds += last - first
    whole = time.perf_counter() - started
    return {"ui_events_per_s": round(streamed / streaming_seconds),
            "ui_events_per_s_whole_runs": round((frames - runs) / whole)}  # [DONE] is not an event


async def _streaming(workdir: str, turns: int, deltas: int) -> dict[str, Any]:
    """``Agent.stream()`` against the model's own stream: first-token latency and per-event overhead."""
    runs = max(4, turns)
    out: dict[str, Any] = {}
    model = _InstantStream(deltas)
    agent = Agent("bench", "You are a benchmark.", model)
    out["without_memory"] = await _stream_runs(agent, model, runs, None)
    out["without_memory"].update(await _ui_throughput(agent, max(2, runs // 10), None))
    path = os.path.join(workdir, "stream.db")
    async with Memory(storage=SQLiteStore(path), options={"lastMessages": 10}) as memory:
        workload = Workload(threads=1, resources=1, turns=10)
        ids = (workload.thread_id(0), workload.resource_id(0))
        await memory.create_thread(thread_id=ids[0], resource_id=ids[1])
        await memory.save_messages([m for k in range(workload.turns) for m in workload.messages_for_turn(0, k)])
        agent = Agent("bench", "You are a benchmark.", model, memory=memory)
        out["memory_last_10"] = await _stream_runs(agent, model, runs, ids)
        out["memory_last_10"].update(await _ui_throughput(agent, max(2, runs // 10), ids))
    return out


def _pcts(samples: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(samples, dtype=np.float64) * 1000.0
    return {f"p{q}_ms": round(float(np.percentile(arr, q)), 4) for q in (50, 95, 99)}


async def _scenario(name: str, options: dict[str, Any], workdir: str, history: int, turns: int,
                    semantic: bool = False, synchronous: str = "FULL") -> dict[str, Any]:
    path = os.path.join(workdir, f"{name}.db")
    memory = Memory(
        storage=SQLiteStore(path, synchronous=synchronous),
        vector=HnswVectorStore(path + ".vectors") if semantic else None,
        embedder=HashEmbedder(dim=384) if semantic else None,
        options=options,
    )
    workload = Workload(threads=1, resources=1, turns=history // 2)
    async with memory:
        await memory.create_thread(thread_id=workload.thread_id(0), resource_id=workload.resource_id(0))
        batch: list[Message] = []
        for k in range(workload.turns):
            batch.extend(workload.messages_for_turn(0, k))
        for start in range(0, len(batch), 500):
            await memory.save_messages(batch[start:start + 500])
        model = _TimedModel()
        agent = Agent("bench", "You are a benchmark.", model, memory=memory)
        overheads: list[float] = []
        memory_steps: list[float] = []
        with _MemorySteps() as steps:
            for i in range(turns):
                before, steps_before = model.seconds, steps.seconds
                started = time.perf_counter()
                await agent.generate(f"question number {i} about the tokyo flight",
                                     thread_id=workload.thread_id(0), resource_id=workload.resource_id(0))
                overheads.append(time.perf_counter() - started - (model.seconds - before))
                memory_steps.append(steps.seconds - steps_before)
    return {"turns": turns, "history_messages": history, **_pcts(overheads), "memory_steps": _pcts(memory_steps),
            "context_messages_p50": int(np.median(model.context_sizes))}


async def _cold_turns(workdir: str, threads: int, cache_ttl: float | None = 2.0) -> dict[str, Any]:
    """One turn on each of ``threads`` threads idle for longer than the actors' cache TTL (last-10 history).

    What a real chat sees: people take seconds to answer and models seconds to reply, so the cached thread
    row and history window have usually expired by the next turn and are read from the store again.
    """
    from threadmind.actors._thread_actor import TAIL_TTL

    path = os.path.join(workdir, f"cold-{cache_ttl}.db")
    workload = Workload(threads=threads, resources=min(threads, 20), turns=10)
    model = _TimedModel()
    overheads: list[float] = []
    memory_steps: list[float] = []
    async with Memory(storage=SQLiteStore(path), options={"lastMessages": 10}, cache_ttl=cache_ttl) as memory:
        for t in range(threads):
            await memory.create_thread(thread_id=workload.thread_id(t), resource_id=workload.resource_id(t))
            await memory.save_messages([m for k in range(workload.turns) for m in workload.messages_for_turn(t, k)])
        agent = Agent("bench", "You are a benchmark.", model, memory=memory)
        await anyio.sleep(TAIL_TTL + 0.2)
        with _MemorySteps() as steps:
            for t in range(threads):
                before, steps_before = model.seconds, steps.seconds
                started = time.perf_counter()
                await agent.generate(f"back after a pause, question on thread {t}", thread_id=workload.thread_id(t),
                                     resource_id=workload.resource_id(t))
                overheads.append(time.perf_counter() - started - (model.seconds - before))
                memory_steps.append(steps.seconds - steps_before)
    return {"turns": threads, **_pcts(overheads), "memory_steps": _pcts(memory_steps)}


async def _concurrent(workdir: str, conversations: int, turns: int) -> dict[str, Any]:
    """``conversations`` threads talking at once, ``turns`` each (last-10 history): throughput and latency.

    One event loop carries every turn's Python and the store's group commit carries their saves, so this
    is the per-process capacity: what thousands of live conversations share.
    """
    path = os.path.join(workdir, f"concurrent{conversations}.db")
    latencies: list[float] = []
    async with Memory(storage=SQLiteStore(path), options={"lastMessages": 10}) as memory:
        agent = Agent("bench", "You are a benchmark.", _TimedModel(), memory=memory)
        for n in range(conversations):
            await memory.create_thread(thread_id=f"thread-{n}", resource_id=f"resource-{n % 20}")

        async def converse(n: int) -> None:
            for i in range(turns):
                started = time.perf_counter()
                await agent.generate(f"question {i} on thread {n} about the tokyo flight", thread_id=f"thread-{n}",
                                     resource_id=f"resource-{n % 20}")
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for n in range(conversations):
                tg.start_soon(converse, n)
        seconds = time.perf_counter() - started
    done = conversations * turns
    return {"conversations": conversations, "turns": done, "seconds": round(seconds, 3),
            "turns_per_s": round(done / seconds), "msgs_per_s": round(2 * done / seconds), **_pcts(latencies)}


async def _without_memory(turns: int) -> dict[str, Any]:
    """The same turn with no memory at all: the agent's own share of ``generate()``."""
    model = _TimedModel()
    agent = Agent("bench", "You are a benchmark.", model)
    overheads: list[float] = []
    for i in range(turns):
        before = model.seconds
        started = time.perf_counter()
        await agent.generate(f"question number {i} about the tokyo flight")
        overheads.append(time.perf_counter() - started - (model.seconds - before))
    return {"turns": turns, **_pcts(overheads)}


async def _long_conversation(memory: Memory, turns: int, thread_id: str, pause: float = 0.0) -> list[float]:
    """``turns`` turns on one thread, ``pause`` s apart: each turn's time without the agent model's own."""
    model = _TimedModel()
    agent = Agent("bench", "You are a benchmark.", model, memory=memory)
    overheads: list[float] = []
    for i in range(turns):
        before = model.seconds
        started = time.perf_counter()
        await agent.generate(f"turn {i}: " + "please remember the tokyo flight and the hotel " * 3,
                             thread_id=thread_id, resource_id="om-resource")
        overheads.append(time.perf_counter() - started - (model.seconds - before))
        if pause:
            await anyio.sleep(pause)
    return overheads


async def _observational(workdir: str, turns: int) -> dict[str, Any]:
    """Observational memory with a scripted Observer: per-turn overhead and how long each observation takes."""
    from threadmind.memory import ObservationalMemoryEngine

    observations: list[float] = []
    original = ObservationalMemoryEngine._observe_once

    async def timed(self: ObservationalMemoryEngine, *args: Any) -> bool:
        started = time.perf_counter()
        try:
            return await original(self, *args)
        finally:
            observations.append(time.perf_counter() - started)

    ObservationalMemoryEngine._observe_once = timed  # type: ignore[method-assign,assignment]
    try:
        observer = _TimedModel()
        path = os.path.join(workdir, "om.db")
        options = {"observationalMemory": {"model": observer, "observation": {"messageTokens": 300}}}
        async with Memory(storage=SQLiteStore(path), options=options) as memory:
            overheads = await _long_conversation(memory, turns, "om-thread")
    finally:
        ObservationalMemoryEngine._observe_once = original  # type: ignore[method-assign]
    return {"turns": turns, **_pcts(overheads), "observations": len(observations),
            "observation": _pcts(observations) if observations else {}}


class _SlowObserver:
    """An Observer that takes ``delay`` seconds a call (a remote model's latency) and notes when each call ran."""

    model_id = "bench/observer"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls: list[tuple[float, float]] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        started = time.perf_counter()
        await anyio.sleep(self.delay)
        self.calls.append((started, time.perf_counter()))
        return ModelResponse(text=f"* 🔴 (10:00) observation {len(self.calls)} of the tokyo trip")


async def _observational_buffering(workdir: str, turns: int, buffered: bool, delay: float = 0.025,
                                   pause: float = 0.01) -> dict[str, Any]:
    """A long conversation crossing ``messageTokens`` (600) many times, ``pause`` s between turns, with an Observer
    taking ``delay`` s a call: each turn's latency without the agent model's own time, and how many turns waited
    for an Observer call (took over half a call). ``buffered``: ``bufferTokens`` 0.2 (chunks computed ahead,
    activated at the threshold), else ``false`` (observation at the threshold, in the background; a turn waits
    past ``blockAfter``)."""
    observer = _SlowObserver(delay)
    options = {"observationalMemory": {"model": observer, "observation": {
        "messageTokens": 600, "bufferTokens": 0.2 if buffered else False}}}
    path = os.path.join(workdir, f"om_{'buffered' if buffered else 'unbuffered'}_{int(pause * 1000)}ms.db")
    async with Memory(storage=SQLiteStore(path), options=options) as memory:
        latencies = await _long_conversation(memory, turns, "om-buffering", pause)
        await memory.settled()
    return {"turns": turns, **_pcts(latencies), "max_ms": round(max(latencies) * 1000, 3),
            "observer_calls": len(observer.calls), "observer_delay_ms": delay * 1000, "pause_ms": pause * 1000,
            "turns_waiting": sum(latency > delay / 2 for latency in latencies)}


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"synchronous": "FULL"}
    with tempfile.TemporaryDirectory(prefix="threadmind-bench-agent-") as workdir:
        report["last_10"] = await _scenario("last10", {"lastMessages": 10}, workdir, args.history, args.turns)
        # The same turn when commits do not wait for the disk (WAL with NORMAL: a power loss may drop the
        # newest commits, never corrupts): what the fsync costs a turn on this machine.
        report["last_10_synchronous_normal"] = await _scenario(
            "last10n", {"lastMessages": 10}, workdir, args.history, args.turns, synchronous="NORMAL")
        report["token_budget_2000"] = await _scenario(
            "tokens", {"messageHistory": {"maxTokens": 2000}}, workdir, args.history, args.turns)
        report["last_10_working_memory"] = await _scenario(
            "wm", {"lastMessages": 10, "workingMemory": {"enabled": True}}, workdir, args.history, args.turns)
        report["last_10_semantic_recall"] = await _scenario(
            "semantic", {"lastMessages": 10, "semanticRecall": {"topK": 4, "messageRange": 1}}, workdir,
            args.history, args.turns, semantic=True)
        report["observational_memory"] = await _observational(workdir, min(args.turns, 100))
        # The same long conversation with observations computed ahead (Mastra's default) and without.
        report["observational_memory_buffered"] = await _observational_buffering(workdir, min(args.turns, 150), True)
        report["observational_memory_unbuffered"] = await _observational_buffering(
            workdir, min(args.turns, 150), False)
        # Turns back to back: a conversation faster than its Observer (each call 25 ms), either way.
        report["observational_memory_buffered_no_pause"] = await _observational_buffering(
            workdir, min(args.turns, 150), True, pause=0.0)
        report["observational_memory_unbuffered_no_pause"] = await _observational_buffering(
            workdir, min(args.turns, 150), False, pause=0.0)
        report["agent_without_memory"] = await _without_memory(args.turns)
        report["concurrent_64_conversations"] = await _concurrent(workdir, 64, max(1, args.turns // 10))
        report["last_10_after_a_pause"] = await _cold_turns(workdir, min(args.turns, 200))
        # The same with cache_ttl=None: a database only this process writes keeps its caches.
        report["last_10_after_a_pause_single_process"] = await _cold_turns(workdir, min(args.turns, 200), None)
        report["stream"] = await _streaming(workdir, min(args.turns, 300), args.deltas)
    base = report["last_10"]["p50_ms"]
    report["working_memory_extra_p50_ms"] = round(report["last_10_working_memory"]["p50_ms"] - base, 4)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--deltas", type=int, default=500, help="text deltas per streamed reply")
    args = parser.parse_args(argv)
    print(json.dumps(anyio.run(_main, args), indent=2))


if __name__ == "__main__":
    main()
