"""The actor runtime: bounded mailboxes, a registry with passivation, and the thread/resource/index actors.

``ActorSystem`` is what a ``Memory`` owns; the command records (``SaveMessages``, ``LoadWindow``...) are how
the memory package talks to thread actors. Other packages import these names from here only.
"""

from __future__ import annotations

from .._public import present_as
from ._actor import ActorStatistics as ActorStatistics
from ._index_actor import IndexStatistics as IndexStatistics
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._registry import RegistryStatistics as RegistryStatistics
from ._system import ActorSystem as ActorSystem
from ._system import TurnPolicy as TurnPolicy

__all__ = (
    "ActorStatistics",
    "ActorSystem",
    "IndexStatistics",
    "MailboxStatistics",
    "RegistryStatistics",
    "TurnPolicy",
)

present_as(globals(), __name__)
