"""The Reflector's side of observational memory: a reflection computed ahead (``reflection.bufferActivation``),
the reflection the threshold needs (waited for past ``reflection.blockAfter``, else in the background), and a new
generation made of either. Each Reflector call runs once across processes (the engine's ``reflector`` claim)."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from .._config import ObservationalMemoryConfig
from ..codecs._time import utc_now
from ..processors._observation_groups import reconcile_after_reflection, render_groups
from ..processors._observation_text import REFLECTOR_INSTRUCTIONS
from ..stores import OMRecord
from ..stores._om import compare_and_set
from ..tracing import operation_span
from ._om_parts import custom_instructions

if TYPE_CHECKING:
    from ..models import LanguageModel
    from ._observational import ObservationalMemoryEngine

__all__ = ("Reflections",)

_log = logging.getLogger("threadmind.observational")


class Reflections:
    """The engine's reflections (see the module docstring)."""

    def __init__(self, engine: ObservationalMemoryEngine) -> None:
        self._engine = engine

    async def text(self, config: ObservationalMemoryConfig, model: LanguageModel, observations: str) -> str:
        """One Reflector call over ``observations`` (with ``reflection.instruction``); observation groups are shown
        as ``## Group`` sections, so the reflection can keep them."""
        system = REFLECTOR_INSTRUCTIONS + custom_instructions(config.reflection_instruction)
        return await self._engine.call_model(model, system, render_groups(observations) or observations, "reflector")

    async def at_threshold(self, config: ObservationalMemoryConfig, thread_id: str,
                           resource_id: str | None, record: OMRecord, model: LanguageModel) -> None:
        """The observations reached ``reflection.observationTokens``: the reflection computed ahead becomes the next
        generation now; without one, below ``reflection.blockAfter`` (reflections computed ahead: 1.2× by
        default) the Reflector runs in the background, once across processes, and nobody waits for it; past it
        (or with reflections not computed ahead) the caller waits."""
        block_at = config.reflection_block_at
        if record.buffered_reflection is not None:
            await self.now(config, thread_id, resource_id, record, model)  # no model call: nothing to share
            return
        if block_at is None or record.observation_token_count >= block_at:
            # The caller waits: for another holder's Reflector too (then its reflection is read, not made again).
            async with self._engine.claim("reflector", record.lookup_key, wait=True):
                await self.now(config, thread_id, resource_id, record, model)
            return

        async def _in_background() -> None:
            async with self._engine.claim("reflector", record.lookup_key, wait=False) as held:
                if held is not False:
                    await self.now(config, thread_id, resource_id, record, model)

        self._engine.start_background("reflect:" + record.lookup_key, "reflect", _in_background)

    def ahead(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
              record: OMRecord) -> bool:
        """Past ``reflection.bufferActivation`` of the reflection threshold (observations buffered), compute the
        reflection in the background now, so reaching the threshold needs no model call; True when started."""
        at = config.reflection_buffer_at
        if at is None or record.observation_token_count < at or record.buffered_reflection is not None:
            return False
        model = self._engine.model_for(config, thread_id, resource_id, reflector=True) or \
            self._engine.model_for(config, thread_id, resource_id)
        if model is None:
            return False
        return self._engine.start_background("reflect:" + record.lookup_key, "reflect_ahead",
                           lambda: self._ahead_once(config, thread_id, resource_id, record, model))

    async def _ahead_once(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                          base: OMRecord, model: LanguageModel) -> None:
        """Reflect ``base``'s observations and store the result as the buffered reflection, unless the
        observations it read changed meanwhile (under the Reflector's claim: once across processes)."""
        async with self._engine.claim("reflector", base.lookup_key, wait=False) as held:
            if held is not False:
                await self._ahead_claimed(config, thread_id, resource_id, base, model)

    async def _ahead_claimed(self, config: ObservationalMemoryConfig, thread_id: str,
                             resource_id: str | None, base: OMRecord, model: LanguageModel) -> None:
        """:meth:`_ahead_once` with the Reflector's claim held."""
        current = await self._engine.records.current(base.lookup_key)
        if current is None or current.id != base.id or current.buffered_reflection is not None:
            return  # another holder reflected (or a new generation began) meanwhile
        lines = base.active_observations.split("\n")
        condensed = await self.text(config, model, base.active_observations)
        condensed = reconcile_after_reflection(condensed, base.active_observations) or condensed
        records = self._engine.records

        def _with_reflection(current: OMRecord | None) -> OMRecord | None:
            if current is None or current.id != base.id or current.buffered_reflection is not None \
                    or current.active_observations.split("\n")[:len(lines)] != lines:
                return None  # a new generation, or the observations this reflected changed: not this one's
            record = current.copy()
            record.buffered_reflection = condensed
            record.buffered_reflection_tokens = self._engine.counter.count_text(condensed)
            record.buffered_reflection_input_tokens = self._engine.counter.count_text(base.active_observations)
            record.reflected_line_count = len(lines)
            record.updated_at = utc_now()
            return record

        # a chunk added or activated meanwhile leaves this reflection valid: read again rather than drop it
        await compare_and_set(records, base.lookup_key, _with_reflection)

    async def now(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, base: OMRecord,
                  model: LanguageModel | None) -> bool:
        """Condense the observations into a new generation (``originType`` "reflection"): the reflection computed
        ahead when there is one (with the lines observed since after it; no model call), else the Reflector's over
        the generation's newest observations. Lines observed while the Reflector runs follow the reflection in the
        new generation, as they follow one computed ahead; False when the generation ended or another holder
        reflected meanwhile (then no Reflector call is made)."""
        records = self._engine.records
        if model is not None:  # a Reflector call may be needed: not for a generation reflected since ``base``
            current = await records.current(base.lookup_key)
            if current is None or not _continues(current, base, ahead=False):
                return False
            base = current  # the newest observations of this generation (and a reflection computed ahead since)
        lines = base.active_observations.split("\n")
        if base.buffered_reflection is not None and base.reflected_line_count is not None:
            rest = "\n".join(lines[base.reflected_line_count:]).strip()
            condensed = f"{base.buffered_reflection}\n\n{rest}" if rest else base.buffered_reflection
        elif model is None:
            return False
        else:
            try:
                condensed = await self.text(config, model, base.active_observations)
                condensed = reconcile_after_reflection(condensed, base.active_observations) or condensed
            except Exception:
                _log.warning("reflection for %s failed; observations kept as they are", base.lookup_key,
                             exc_info=True)
                return False

        def _reflected(current: OMRecord | None) -> OMRecord | None:
            if current is None or not _continues(current, base):
                return None
            now = utc_now()
            later = "\n".join(current.active_observations.split("\n")[len(lines):]).strip()  # observed meanwhile
            record = current.copy()  # with the chunks buffered meanwhile: they hold messages still to activate
            record.id = str(uuid.uuid4())
            record.origin_type = "reflection"
            record.generation_count = base.generation_count + 1
            record.active_observations = f"{condensed}\n\n{later}" if later else condensed
            record.observation_token_count = self._engine.counter.count_text(record.active_observations)
            record.last_reflection_at = now
            record.created_at = record.updated_at = now
            record.buffered_reflection = record.buffered_reflection_tokens = None
            record.buffered_reflection_input_tokens = record.reflected_line_count = None
            return record

        with operation_span("threadmind.om.commit_reflection", "update_memory", thread_id=thread_id,
                            resource_id=resource_id):
            return await compare_and_set(records, base.lookup_key, _reflected) is not None


def _continues(current: OMRecord, base: OMRecord, *, ahead: bool = True) -> bool:
    """Whether ``current`` is ``base``'s generation with its observations and at most more lines after them (and,
    with ``ahead``, the same reflection computed ahead, if any): a reflection of ``base`` still fits it."""
    lines = base.active_observations.split("\n")
    return (current.id, current.generation_count) == (base.id, base.generation_count) and \
        (not ahead or current.buffered_reflection == base.buffered_reflection) and \
        current.active_observations.split("\n")[:len(lines)] == lines
