"""ObservationalMemory: the ``observational-memory`` processor (used instead of MessageHistory when OM is on).

Input: the observations go in as a memory system message, and only the unobserved messages as history;
past ``block_after`` unobserved tokens the turn first waits for an observation. Output: the turn is
persisted (same hygiene as MessageHistory) and, past ``message_tokens``, an observation is started in the
background. Reference §8.1.
"""

from __future__ import annotations

from datetime import timedelta

from .._config import ObservationalMemoryConfig
from ..codecs import Message, utc_now
from ..stores import Store
from ._access import MemoryAccess, as_access
from ._history import persist_turn
from ._observation_text import (
    CONTINUATION_ID,
    CONTINUATION_REMINDER,
    ObservationEngine,
    block_after_tokens,
    observations_system_message,
)
from ._protocol import ProcessInputArgs, ProcessInputStepArgs, ProcessOutputArgs
from ._temporal_markers import add_temporal_gap_marker

__all__ = ("ObservationalMemory",)

_UNOBSERVED_KEY = "observational-memory.unobserved"  # run state: the unobserved rows loaded for the turn
_THRESHOLD_KEY = "observational-memory.threshold"  # run state: the turn's message threshold



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
        if tokens > block_after_tokens(config, threshold) and not args.context.memory_config.read_only:
            if await engine.ensure_below_block(config, thread_id, resource_id, tokens):
                record, unobserved = await engine.load(config, thread_id, resource_id, self.storage)
                tokens = engine.counter.count_messages(unobserved)
                threshold = config.message_threshold(record.observation_token_count if record is not None else 0)
        args.context.run_state[_UNOBSERVED_KEY] = unobserved
        args.context.run_state[_THRESHOLD_KEY] = threshold
        own = [m for m in unobserved if m.thread_id in (None, thread_id)]
        if record is not None and record.active_observations.strip():
            args.message_list.add_system(observations_system_message(record.active_observations), "memory")
            # Opens what is left of the history (memory-sourced: never stored); it sorts first.
            first = min((m.created_at for m in own), default=None) or utc_now()
            args.message_list.add(Message.user(CONTINUATION_REMINDER, id=CONTINUATION_ID, thread_id=thread_id,
                                               resource_id=resource_id, created_at=first - timedelta(milliseconds=1)),
                                  "memory")
        if own:
            args.message_list.add(own, "memory")
        return None

    async def process_input_step(self, args: ProcessInputStepArgs) -> None:
        """Before the turn's first model call, with ``temporalMarkers``: the gap since the previous message."""
        thread_id, resource_id = args.ids()
        if args.step_number == 0 and thread_id and self._config(args).temporal_markers \
                and not args.context.memory_config.read_only:
            add_temporal_gap_marker(args.message_list, thread_id, resource_id)
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
        if tokens >= (threshold if isinstance(threshold, int) else config.message_tokens):  # at it, as the reference
            engine.schedule(config, thread_id, resource_id)
        return None
