"""The actor that serializes resource-scoped read-modify-writes (working memory shared by many threads)."""

from __future__ import annotations

from typing import Any

from ._actor import Actor
from ._thread_actor import Exclusive

__all__ = ("ResourceActor",)


class ResourceActor(Actor[Exclusive]):
    """Runs exclusive operations on one resource, one at a time, in arrival order."""

    async def handle(self, command: Exclusive) -> Any:
        return await command.fn()
