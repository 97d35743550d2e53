"""ObservationalMemory: the ``observational-memory`` processor (used instead of MessageHistory when OM is on).

Input: the observations go in as a memory system message, and only the unobserved messages as history;
past ``block_after`` unobserved tokens the turn first waits for an observation. Output: the turn is
persisted (same hygiene as MessageHistory) and, past ``message_tokens``, an observation is started in the
background. Reference §8.1.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from .._config import ObservationalMemoryConfig, WorkingMemoryConfig
from ..codecs import Message
from ..codecs._time import to_iso, utc_now
from ..stores import OMRecord, Store
from ._access import MemoryAccess, as_access
from ._history import persist_turn
from ._observation_groups import retrieval_instructions
from ._observation_text import (
    CONTINUATION_ID,
    CONTINUATION_REMINDER,
    ObservationEngine,
    block_after_tokens,
    observations_system_message,
)
from ._om_triggers import activation_trigger, projected_removal
from ._protocol import ProcessInputArgs, ProcessInputStepArgs, ProcessOutputArgs
from ._temporal_markers import add_temporal_gap_marker

__all__ = ("ObservationalMemory",)

_UNOBSERVED_KEY = "observational-memory.unobserved"  # run state: the unobserved rows loaded for the turn
_THRESHOLD_KEY = "observational-memory.threshold"  # run state: the turn's message threshold
_RECORD_KEY = "observational-memory.record"  # run state: the record the turn read


def _managed(args: ProcessInputArgs | ProcessOutputArgs,
             config: ObservationalMemoryConfig) -> WorkingMemoryConfig | None:
    """The working memory the Observer also writes (``observation.manageWorkingMemory``), or None."""
    working_memory = args.context.memory_config.working_memory
    return working_memory if config.manage_working_memory and working_memory.enabled else None


class _Cycle:
    """The data parts of an observation a turn waits for (Mastra's observation start, end and failed markers)."""

    def __init__(self, args: ProcessInputArgs, config: ObservationalMemoryConfig, thread_id: str,
                 record: OMRecord | None, tokens: int) -> None:
        self.context = args.context
        self.thread_id = thread_id
        self.id = str(uuid.uuid4())
        self.started = utc_now()
        self.tokens = tokens
        self.context.write_data("data-om-observation-start", {
            "cycleId": self.id, "operationType": "observation", "startedAt": to_iso(self.started),
            "tokensToObserve": tokens, "recordId": record.id if record is not None else None, "threadId": thread_id,
            "config": _marker_config(config)})

    def _elapsed(self) -> tuple[str, int]:
        now = utc_now()
        return to_iso(now), int((now - self.started).total_seconds() * 1000)

    def ended(self, record: OMRecord | None) -> None:
        at, duration = self._elapsed()
        self.context.write_data("data-om-observation-end", {
            "cycleId": self.id, "operationType": "observation", "completedAt": at, "durationMs": duration,
            "tokensObserved": self.tokens, "observationTokens": record.observation_token_count if record else 0,
            "observations": record.active_observations if record else "",
            "recordId": record.id if record else None, "threadId": self.thread_id})

    def failed(self, error: BaseException | None) -> None:
        at, duration = self._elapsed()
        self.context.write_data("data-om-observation-failed", {
            "cycleId": self.id, "operationType": "observation", "failedAt": at, "durationMs": duration,
            "tokensAttempted": self.tokens, "error": str(error) if error is not None else "observation failed",
            "threadId": self.thread_id})



def _marker_config(config: ObservationalMemoryConfig) -> dict[str, object]:
    """The thresholds a marker part carries (Mastra's ``getObservationMarkerConfig``)."""
    return {"messageTokens": config.message_tokens, "observationTokens": config.observation_tokens,
            "scope": config.scope}


class ObservationalMemory:
    """Processor ``observational-memory``: observations plus unobserved history in; persist and observe out."""

    id = "observational-memory"
    name = "ObservationalMemory"

    def __init__(self, storage: Store | MemoryAccess, engine: ObservationEngine,
                 config: ObservationalMemoryConfig) -> None:
        self.storage = as_access(storage)

        self.engine = engine
        self.config = config

    def _config(self, args: ProcessInputArgs | ProcessOutputArgs) -> ObservationalMemoryConfig:
        return args.context.memory_config.observational_memory_config or self.config

    async def process_input(self, args: ProcessInputArgs) -> None:
        thread_id, resource_id = args.ids()
        if not thread_id:
            return None
        config = self._config(args)
        engine = self.engine
        record, unobserved = await engine.load(config, thread_id, resource_id, self.storage)
        tokens = engine.counter.count_messages(unobserved)
        threshold = config.message_threshold(record.observation_token_count if record is not None else 0)
        writable = not args.context.memory_config.read_only
        pending = tokens + engine.counter.count_messages(args.message_list.get_input())  # the turn's input too
        model_id = args.context.model_id
        if writable and record is not None and record.buffered_chunks:
            # Observations computed ahead become active, with no model call, at the threshold, or before it after
            # the thread sat idle (activateAfterIdle) or under another model (activateOnProviderChange).
            trigger = "threshold" if pending >= threshold else activation_trigger(
                unobserved, model_id, config.idle_ttl, config.activate_on_provider_change)
            if trigger is not None:
                if await engine.activate(config, thread_id, resource_id, pending,
                                         working_memory=_managed(args, config)):
                    args.context.write_data("data-om-activation", {
                        "operationType": "observation", "activatedAt": to_iso(utc_now()), "tokensBefore": pending,
                        "recordId": record.id, "threadId": thread_id, "triggeredBy": trigger})
                # Read again either way: when another turn (in any process) activated these chunks first, this
                # turn's activation found nothing left to do, and the record read above is stale.
                record, unobserved = await engine.load(config, thread_id, resource_id, self.storage)
                tokens = engine.counter.count_messages(unobserved)
                threshold = config.message_threshold(record.observation_token_count if record is not None else 0)
        if writable and record is not None and record.buffered_reflection is not None:
            trigger = activation_trigger(unobserved, model_id, config.reflection_idle_ttl,
                                         config.reflection_activate_on_provider_change)
            if trigger is not None and await engine.activate_reflection(config, thread_id, resource_id):
                args.context.write_data("data-om-activation", {
                    "operationType": "reflection", "activatedAt": to_iso(utc_now()), "recordId": record.id,
                    "threadId": thread_id, "triggeredBy": trigger})
                record, unobserved = await engine.load(config, thread_id, resource_id, self.storage)
                tokens = engine.counter.count_messages(unobserved)
                threshold = config.message_threshold(record.observation_token_count if record is not None else 0)
        if tokens > block_after_tokens(config, threshold) and writable:
            cycle = _Cycle(args, config, thread_id, record, tokens)
            failures: list[BaseException] = []
            if await engine.ensure_below_block(config, thread_id, resource_id, tokens, failures=failures,
                                               working_memory=_managed(args, config)):
                record, unobserved = await engine.load(config, thread_id, resource_id, self.storage)
                tokens = engine.counter.count_messages(unobserved)
                threshold = config.message_threshold(record.observation_token_count if record is not None else 0)
                cycle.ended(record)
            else:
                cycle.failed(failures[-1] if failures else None)
        args.context.run_state[_UNOBSERVED_KEY] = unobserved
        args.context.run_state[_THRESHOLD_KEY] = threshold
        args.context.run_state[_RECORD_KEY] = record
        if record is not None and record.last_observed_at is not None:
            # The turn's new input is dated after every stored row, observed ones included: dated before the
            # cursor, it would be neither loaded nor ever observed.
            args.message_list.keep_generated_after(record.last_observed_at)
        own = [m for m in unobserved if m.thread_id in (None, thread_id)]
        retrieval, scope, search, extra = config.retrieval_options
        guidance = retrieval_instructions(scope, extra, search) if retrieval else None
        if record is not None and record.active_observations.strip():
            args.message_list.add_system(observations_system_message(record.active_observations, guidance),
                                         "memory")
            # Opens what is left of the history (memory-sourced: never stored); it sorts first.
            first = min((m.created_at for m in own), default=None) or utc_now()
            args.message_list.add(Message.user(CONTINUATION_REMINDER, id=CONTINUATION_ID, thread_id=thread_id,
                                               resource_id=resource_id, created_at=first - timedelta(milliseconds=1)),
                                  "memory")
        elif guidance is not None and scope == "resource":  # other threads may hold it: say how to look
            args.message_list.add_system(guidance, "memory")
        if own:
            args.message_list.add(own, "memory")
        return None

    async def process_input_step(self, args: ProcessInputStepArgs) -> None:
        """Before each model call: the windows' status for the stream's consumer (``data-om-status``); before the
        first, with ``temporalMarkers``, the gap since the previous message."""
        thread_id, resource_id = args.ids()
        if not thread_id:
            return None
        config = self._config(args)
        if args.step_number == 0 and config.temporal_markers and not args.context.memory_config.read_only:
            add_temporal_gap_marker(args.message_list, thread_id, resource_id)
        record = args.context.run_state.get(_RECORD_KEY)
        record = record if isinstance(record, OMRecord) else None
        observed = record.observation_token_count if record is not None else 0
        context = {m.id for m in args.message_list.get_context()}
        pending = self.engine.counter.count_messages(
            [m for m in args.message_list.get_all() if m.id != CONTINUATION_ID and m.id not in context])
        threshold = config.message_threshold(observed)
        chunks = record.buffered_chunks if record is not None else []
        observing, reflecting = self.engine.buffering(config, thread_id, resource_id)
        reflection = record.buffered_reflection if record is not None else None
        args.context.write_data("data-om-status", {
            "windows": {
                "active": {"messages": {"tokens": pending, "threshold": threshold},
                           "observations": {"tokens": observed, "threshold": config.observation_tokens}},
                "buffered": {
                    "observations": {
                        "chunks": len(chunks),
                        "messageTokens": min(sum(int(c.get("messageTokens") or 0) for c in chunks), pending),
                        "projectedMessageRemoval": projected_removal(chunks, pending, threshold,
                                                                     config.activation_ratio),
                        "observationTokens": sum(int(c.get("tokenCount") or 0) for c in chunks),
                        "status": "running" if observing else "complete" if chunks else "idle"},
                    "reflection": {
                        "inputObservationTokens": (record.buffered_reflection_input_tokens or 0) if record else 0,
                        "observationTokens": (record.buffered_reflection_tokens or 0) if record else 0,
                        "status": "running" if reflecting else "complete" if reflection else "idle"}},
            },
            "recordId": record.id if record is not None else None, "threadId": thread_id,
            "stepNumber": args.step_number,
            "generationCount": record.generation_count if record is not None else 0,
        })
        return None

    async def process_output_result(self, args: ProcessOutputArgs) -> None:
        context = args.context
        thread_id, resource_id = args.ids()
        kept = await persist_turn(self.storage, args)
        if not kept or thread_id is None:
            return None
        config = self._config(args)
        before = context.run_state.get(_UNOBSERVED_KEY)
        engine = self.engine
        # Counted as the observation round counts its snapshot (each row once), so a turn that schedules one
        # is one it runs.
        rows = {m.id: m for m in (*(before if isinstance(before, list) else ()), *kept)}
        tokens = engine.counter.count_messages(rows.values())
        threshold = context.run_state.get(_THRESHOLD_KEY)
        limit = threshold if isinstance(threshold, int) else config.message_tokens
        record = context.run_state.get(_RECORD_KEY)
        record = record if isinstance(record, OMRecord) else None
        managed = _managed(args, config)
        if config.buffer_size is not None:
            cycle = f"buffer-obs-{uuid.uuid4()}"
            # observations computed ahead, in chunks
            buffering = engine.should_buffer(config, record, tokens) and engine.buffer(
                config, thread_id, resource_id, tokens, working_memory=managed, cycle_id=cycle)
            if buffering:
                context.write_data("data-om-buffering-start", {
                    "cycleId": cycle, "operationType": "observation", "startedAt": to_iso(utc_now()),
                    "tokensToBuffer": tokens - (record.last_buffered_at_tokens if record is not None else 0),
                    "recordId": record.id if record is not None else None, "threadId": thread_id,
                    "threadIds": [thread_id], "config": _marker_config(config)})
            # Nothing to activate at the next turn, and no chunk on its way: observe now. (A chunk being computed
            # is activated by the next turn at the threshold, with no model call; observing its messages as well
            # would race it for the Observer's lease and do the work twice.)
            if tokens >= limit and not buffering and (record is None or not record.buffered_chunks):
                engine.schedule(config, thread_id, resource_id, working_memory=managed)
            return None
        if tokens >= limit:  # at it, as the reference
            engine.schedule(config, thread_id, resource_id, working_memory=managed)
        return None
