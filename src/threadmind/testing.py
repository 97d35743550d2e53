"""Hooks for tests and diagnostics: the runtime behind a :class:`~threadmind.Memory`, kept off its own surface
(``trio.testing``'s pattern). Nothing here is needed to use threadmind; it is stable enough for a test suite."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .actors import ActorSystem
    from .memory import Memory, ObservationalMemoryEngine
    from .processors import MemoryAccess

__all__ = ("actor_system", "observational_engine", "processor_access")


def actor_system(memory: Memory) -> ActorSystem:
    """The runtime that serializes the memory's threads and resources (registries, the index actor).

    :raises ~threadmind.errors.ConfigError: the memory has no store.
    """
    return memory._core.door.actors(background=True)


def processor_access(memory: Memory) -> MemoryAccess:
    """What the memory's processors read and write through (every thread operation via its actor)."""
    return memory._pipeline.access


def observational_engine(memory: Memory) -> ObservationalMemoryEngine | None:
    """The observational-memory engine (records, observations in flight), once anything used it."""
    return memory._core.door.observational
