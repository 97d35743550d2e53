"""What the observational-memory tests share: long turns, scripted Observer/Reflector models that answer every
call, a Memory with observational memory on, and the records an engine keeps for a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from threadmind.memory import Memory, MemoryConfig, ObservationalMemoryConfig
from threadmind.models import ModelRequest
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._observation_text import OBSERVER_INSTRUCTIONS, REFLECTOR_INSTRUCTIONS
from threadmind.stores._om import OMRecord
from threadmind.testing import observational_engine

__all__ = ["endless", "long_text", "observer_step", "om_memory", "om_records"]


def long_text(tag: str, words: int = 30) -> str:
    """A user turn of ``words`` words after ``tag``: enough tokens for low thresholds to be crossed."""
    return f"{tag}: " + " ".join(f"word{i}" for i in range(words))


def endless(step: Callable[[ModelRequest], Any], model_id: str = "scripted") -> ScriptedModel:
    """A scripted model answering every call with ``step``."""
    return ScriptedModel(iter(lambda: step, None), model_id=model_id)


def observer_step(calls: list[str], *, reflection: str = "* condensed") -> Callable[[ModelRequest], str]:
    """An Observer/Reflector step that records each call (the observed text, or ``"reflect"``) in ``calls``."""

    def step(request: ModelRequest) -> str:
        if request.system[0] == REFLECTOR_INSTRUCTIONS:
            calls.append("reflect")
            return reflection
        assert request.system[0] == OBSERVER_INSTRUCTIONS
        calls.append(request.messages[0].text)
        return f"* 🔴 observation {len(calls)}"

    return step


def om_memory(store: Any, model: Any, **om: Any) -> Memory:
    """A Memory on ``store`` with observational memory by ``model`` (``message_tokens`` 50 unless given;
    ``extra``: more MemoryConfig options)."""
    extra = om.pop("extra", {})
    config = ObservationalMemoryConfig(model=model, message_tokens=om.pop("message_tokens", 50), **om)
    return Memory(storage=store, options=MemoryConfig(observational_memory=config, **extra))


async def om_records(memory: Memory, key: str = "thread:t1") -> list[OMRecord]:
    """Every generation of the record ``key``, oldest first."""
    engine = observational_engine(memory)
    assert engine is not None
    return await engine.records.history(key)
