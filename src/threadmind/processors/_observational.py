"""ObservationalMemory: the ``observational-memory`` processor (used instead of MessageHistory when OM is on).

Input: the observations go in as a memory system message, and only the unobserved messages as history;
past ``block_after`` unobserved tokens the turn first waits for an observation. Output: the turn is
persisted (same hygiene as MessageHistory) and, past ``message_tokens``, an observation is started in the
background. Reference §8.1.
"""

from __future__ import annotations

from .._config import ObservationalMemoryConfig
from .._observational import ObservationalMemoryEngine, block_after_tokens, observations_system_message
from ..stores._protocol import Store
from ._history import persist_turn
from ._protocol import ProcessInputArgs, ProcessOutputArgs

__all__ = ("ObservationalMemory",)

_TOKENS_KEY = "observational-memory.unobserved-tokens"



class ObservationalMemory:
    """Processor ``observational-memory``: observations plus unobserved history in; persist and observe out."""

    id = "observational-memory"
    name = "ObservationalMemory"

    def __init__(self, storage: Store, engine: ObservationalMemoryEngine, config: ObservationalMemoryConfig) -> None:
        self.storage = storage
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
        if tokens > block_after_tokens(config) and not args.context.memory_config.read_only:
            if await engine.ensure_below_block(config, thread_id, resource_id, tokens):
                record, unobserved = await engine.load(config, thread_id, resource_id, self.storage)
                tokens = engine.counter.count_messages(unobserved)
        args.context.run_state[_TOKENS_KEY] = tokens
        if record is not None and record.active_observations.strip():
            args.message_list.add_system(observations_system_message(record.active_observations), "memory")
        own = [m for m in unobserved if m.thread_id in (None, thread_id)]
        if own:
            args.message_list.add(own, "memory")
        return None

    async def process_output_result(self, args: ProcessOutputArgs) -> None:
        context = args.context
        thread_id, resource_id = args.ids()
        kept = await persist_turn(self.storage, args)
        if not kept or thread_id is None:
            return None
        config = self._config(args)
        before = context.run_state.get(_TOKENS_KEY)
        engine = self.engine
        tokens = (before if isinstance(before, int) else 0) + sum(engine.counter.count_message(m) for m in kept)
        if tokens > config.message_tokens:
            engine.schedule(config, thread_id, resource_id)
        return None
