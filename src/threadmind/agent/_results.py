"""What a run returns: ``GenerateResult`` and, for a tripwire, ``TripWireInfo``."""

from __future__ import annotations

import msgspec

from .._results import Usage
from ..codecs import Message

__all__ = ("GenerateResult", "TripWireInfo")


class TripWireInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Why a run was aborted and by which processor."""

    reason: str
    processor_id: str | None = None


class GenerateResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one run (``Agent.generate``, or ``await AgentStream.result()``).

    ``finish_reason`` is the model's (``stop``, ``length`` ...), ``tool-calls`` when the run stopped at a
    client tool or ran out of steps, ``tripwire`` when a processor stopped it, ``aborted`` when a stream's
    consumer stopped early.
    """

    text: str
    messages: list[Message]
    tripwire: TripWireInfo | None = None
    usage: Usage | None = None
    finish_reason: str = "stop"
