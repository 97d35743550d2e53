"""The actor runtime: bounded mailboxes, a registry with passivation, and the thread/resource/index actors.

``ActorSystem`` is what a ``Memory`` owns; the command records (``SaveMessages``, ``LoadWindow``...) are how
the memory package talks to thread actors. Other packages import these names from here only.
"""

from __future__ import annotations

from ._actor import Actor as Actor
from ._actor import ActorStatistics as ActorStatistics
from ._index_actor import IndexActor as IndexActor
from ._index_actor import IndexStatistics as IndexStatistics
from ._index_actor import VectorHit as VectorHit
from ._index_actor import chunk_text as chunk_text
from ._mailbox import Mailbox as Mailbox
from ._mailbox import MailboxClosed as MailboxClosed
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._registry import ActorRegistry as ActorRegistry
from ._registry import RegistryStatistics as RegistryStatistics
from ._resource_actor import GetResource as GetResource
from ._resource_actor import ResourceActor as ResourceActor
from ._system import ActorSystem as ActorSystem
from ._system import TurnPolicy as TurnPolicy
from ._system import current_fence as current_fence
from ._system import forget_fences as forget_fences
from ._thread_actor import TAIL_MAX as TAIL_MAX
from ._thread_actor import TAIL_TTL as TAIL_TTL
from ._thread_actor import CreateThread as CreateThread
from ._thread_actor import DeleteMessages as DeleteMessages
from ._thread_actor import DeleteThread as DeleteThread
from ._thread_actor import Exclusive as Exclusive
from ._thread_actor import GetThread as GetThread
from ._thread_actor import LoadMessages as LoadMessages
from ._thread_actor import LoadWindow as LoadWindow
from ._thread_actor import PatchThreadMetadata as PatchThreadMetadata
from ._thread_actor import SaveMessages as SaveMessages
from ._thread_actor import ThreadActor as ThreadActor
from ._thread_actor import UpdateThread as UpdateThread

__all__ = (
    "TAIL_MAX",
    "TAIL_TTL",
    "Actor",
    "ActorRegistry",
    "ActorStatistics",
    "ActorSystem",
    "CreateThread",
    "DeleteMessages",
    "DeleteThread",
    "Exclusive",
    "GetResource",
    "GetThread",
    "IndexActor",
    "IndexStatistics",
    "LoadMessages",
    "LoadWindow",
    "Mailbox",
    "MailboxClosed",
    "MailboxStatistics",
    "PatchThreadMetadata",
    "RegistryStatistics",
    "ResourceActor",
    "SaveMessages",
    "ThreadActor",
    "TurnPolicy",
    "UpdateThread",
    "VectorHit",
    "chunk_text",
    "current_fence",
    "forget_fences",
)
