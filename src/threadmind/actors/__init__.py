"""The actor runtime: bounded mailboxes, a registry with passivation, and the thread/resource/index actors."""

from __future__ import annotations

from ._actor import Actor as Actor
from ._actor import ActorStatistics as ActorStatistics
from ._mailbox import Mailbox as Mailbox
from ._mailbox import MailboxClosed as MailboxClosed
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._registry import ActorRegistry as ActorRegistry
from ._registry import RegistryStatistics as RegistryStatistics
from ._resource_actor import ResourceActor as ResourceActor
from ._thread_actor import ThreadActor as ThreadActor

__all__ = (
    "Actor",
    "ActorRegistry",
    "ActorStatistics",
    "Mailbox",
    "MailboxClosed",
    "MailboxStatistics",
    "RegistryStatistics",
    "ResourceActor",
    "ThreadActor",
)
