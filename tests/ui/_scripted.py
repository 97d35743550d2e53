"""A scripted event stream: what an ``AgentStream`` looks like to ``ui_message_stream``, with its exits recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from types import TracebackType
from typing import Union

import anyio

from threadmind.events import StreamEvent

__all__ = ("ScriptedEventStream", "Step")

Step = Union[StreamEvent, BaseException, anyio.Event]
"""An event to yield, an exception to raise, or an ``anyio.Event`` to wait for (a model that is still thinking)."""


class ScriptedEventStream:
    """Plays ``script`` when iterated; records how its context was left and whether its iterator was closed."""

    def __init__(self, script: Iterable[Step], *, fail_on_enter: BaseException | None = None) -> None:
        self.script = list(script)
        self.fail_on_enter = fail_on_enter
        self.entered = False
        self.exit_type: type[BaseException] | None = None
        self.exited = anyio.Event()
        self.iterator_closed = False
        self.waiting = anyio.Event()  # set when the script waits on an anyio.Event step

    async def __aenter__(self) -> ScriptedEventStream:
        if self.fail_on_enter is not None:
            raise self.fail_on_enter
        self.entered = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.exit_type = exc_type
        self.exited.set()

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._play()

    async def _play(self) -> AsyncIterator[StreamEvent]:
        try:
            for step in self.script:
                if isinstance(step, BaseException):
                    raise step
                if isinstance(step, anyio.Event):
                    self.waiting.set()
                    await step.wait()
                    continue
                yield step
        except GeneratorExit:
            self.iterator_closed = True
            raise
