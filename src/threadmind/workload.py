"""The shared deterministic benchmark workload (a written specification with check values), ported exactly.

Benchmarks, ``threadmind demo`` and the reference measurements of other memory systems all draw their
messages and queries from here, so their figures compare on identical data.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple

from threadmind.codecs import Message, Role, Thread
from threadmind.codecs._json import content_from_text

__all__ = (
    "BASE_TIME",
    "STREAM_MESSAGES",
    "STREAM_RESOURCE_QUERIES",
    "STREAM_THREAD_QUERIES",
    "WORDS",
    "Turn",
    "Workload",
    "WorkloadQuery",
    "fnv1a32",
    "gen_text",
    "lcg_next",
    "seed",
)

_MASK32 = 0xFFFFFFFF
_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619

#: The 128 words, index = position (WORKLOAD.md §1).
WORDS: tuple[str, ...] = tuple(
    """
    agent memory thread resource message search vector index
    query result context window token budget model prompt
    user assistant system tool call return value error
    retry timeout cache store table column row schema
    travel flight hotel booking paris london tokyo berlin
    monday tuesday friday weekend morning evening today tomorrow
    project deadline meeting report invoice expense team manager
    recipe dinner coffee garden music movie book chapter
    please thanks maybe really quickly slowly again later
    the a and or but with from about
    should could would will can must might does
    remember forget recall summarize explain compare schedule cancel
    red green blue small large early late new
    price ticket seat upgrade aisle gate bag passport
    python typescript node sqlite libsql server client request
    alpha bravo charlie delta echo foxtrot golf india
    """.split()
)

#: Stream numbers (WORKLOAD.md §3).
STREAM_MESSAGES = 1
STREAM_RESOURCE_QUERIES = 2
STREAM_THREAD_QUERIES = 3

#: Message ``n`` is created at ``BASE_TIME + n`` seconds.
BASE_TIME = datetime(2025, 1, 1, tzinfo=UTC)

_MESSAGE_MIN_CHARS = 200
_ROLES: tuple[tuple[int, Role, str], ...] = ((0, "user", "u"), (1, "assistant", "a"))
_QUERY_MIN_CHARS = 80


def lcg_next(s: int) -> int:
    """One LCG step: ``(1664525 * s + 1013904223) mod 2^32``."""
    return (1664525 * s + 1013904223) & _MASK32


def seed(stream: int, n: int) -> int:
    """The seed of text ``n`` in ``stream``: ``(n * 2654435761 + stream * 97531 + 12345) mod 2^32``."""
    return (n * 2654435761 + stream * 97531 + 12345) & _MASK32


def gen_text(stream: int, n: int, min_chars: int) -> str:
    """Words drawn from the LCG (one discarded step), space-joined, until at least ``min_chars`` long."""
    s = lcg_next(seed(stream, n))
    words: list[str] = []
    length = -1  # the running length of the joined text, counting one separator per word after the first
    while length < min_chars:
        s = (1664525 * s + 1013904223) & _MASK32
        word = WORDS[(s >> 16) & 127]
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def fnv1a32(text: str, h: int = _FNV_OFFSET) -> int:
    """FNV-1a-32 over the UTF-16 code units of ``text``; pass ``h`` to continue a running hash."""
    if text.isascii():
        units: bytes | list[int] = text.encode("ascii")
    else:
        raw = text.encode("utf-16-le", "surrogatepass")
        units = [raw[i] | (raw[i + 1] << 8) for i in range(0, len(raw), 2)]
    for c in units:
        h = ((h ^ c) * _FNV_PRIME) & _MASK32
    return h


class Turn(NamedTuple):
    """One save call: thread index ``t``, turn index ``k`` and its ``[user, assistant]`` messages."""

    t: int
    k: int
    messages: list[Message]


class WorkloadQuery(NamedTuple):
    """Query ``q`` of a stream: its text and the thread (``q mod T``) and resource it targets."""

    q: int
    stream: int
    text: str
    thread_id: str
    resource_id: str


class Workload:
    """T threads under R resources with M turns each, plus Q queries per query stream (WORKLOAD.md §5–6)."""

    def __init__(self, threads: int = 200, resources: int = 20, turns: int = 25, queries: int = 500) -> None:
        for name, value in (("threads", threads), ("resources", resources), ("turns", turns)):
            if value < 1:
                raise ValueError(f"`{name}` must be >= 1, got {value}")
        if queries < 0:
            raise ValueError(f"`queries` must be >= 0, got {queries}")
        self.threads = threads
        self.resources = resources
        self.turns = turns
        self.queries = queries

    @property
    def message_count(self) -> int:
        """Total number of messages: ``2 * T * M``."""
        return 2 * self.threads * self.turns

    def thread_id(self, t: int) -> str:
        """``thread-{t}``."""
        return f"thread-{t}"

    def resource_id(self, t: int) -> str:
        """The resource owning thread ``t``: ``resource-{t mod R}``."""
        return f"resource-{t % self.resources}"

    def thread_title(self, t: int) -> str:
        """``Thread {t}``."""
        return f"Thread {t}"

    def thread_ids(self) -> list[str]:
        """Every thread id, in creation order."""
        return [self.thread_id(t) for t in range(self.threads)]

    def resource_ids(self) -> list[str]:
        """Every resource id that owns at least one thread."""
        return [f"resource-{r}" for r in range(min(self.resources, self.threads))]

    def thread_records(self) -> list[Thread]:
        """The threads to create before any message, titled ``Thread {t}``, stamped at ``BASE_TIME``."""
        return [
            Thread(id=self.thread_id(t), resource_id=self.resource_id(t), title=self.thread_title(t),
                   created_at=BASE_TIME, updated_at=BASE_TIME)
            for t in range(self.threads)
        ]

    def ordinal(self, t: int, k: int, r: Literal[0, 1]) -> int:
        """Message ordinal ``n = (t*M + k)*2 + r`` (0 user, 1 assistant)."""
        return (t * self.turns + k) * 2 + r

    def message_text(self, n: int) -> str:
        """The text of message ordinal ``n``."""
        return gen_text(STREAM_MESSAGES, n, _MESSAGE_MIN_CHARS)

    def messages_for_turn(self, t: int, k: int) -> list[Message]:
        """The ``[user, assistant]`` pair saved by one call for thread ``t``, turn ``k``."""
        if not (0 <= t < self.threads and 0 <= k < self.turns):
            raise IndexError(f"turn ({t}, {k}) is outside {self.threads} threads x {self.turns} turns")
        thread_id = self.thread_id(t)
        resource_id = self.resource_id(t)
        out: list[Message] = []
        for r, role, suffix in _ROLES:
            n = (t * self.turns + k) * 2 + r
            out.append(Message(
                id=f"msg-{t}-{k}-{suffix}",
                role=role,
                content=content_from_text(self.message_text(n)),
                created_at=BASE_TIME + timedelta(seconds=n),
                thread_id=thread_id,
                resource_id=resource_id,
            ))
        return out

    def turns_for_thread(self, t: int) -> Iterator[Turn]:
        """The turns of one thread, oldest first."""
        for k in range(self.turns):
            yield Turn(t, k, self.messages_for_turn(t, k))

    def iter_turns(self) -> Iterator[Turn]:
        """Every turn, thread-major (thread 0's turns first), i.e. in message ordinal order."""
        for t in range(self.threads):
            yield from self.turns_for_thread(t)

    def query(self, stream: int, q: int) -> WorkloadQuery:
        """Query ``q`` of ``stream`` (2 resource scope, 3 thread scope): ``gen_text(stream, q, 80)``."""
        if not 0 <= q < self.queries:
            raise IndexError(f"query {q} is outside [0, {self.queries})")
        t = q % self.threads
        return WorkloadQuery(q, stream, gen_text(stream, q, _QUERY_MIN_CHARS), self.thread_id(t), self.resource_id(t))

    def query_text(self, stream: int, q: int) -> str:
        """The text of query ``q`` of ``stream``."""
        return self.query(stream, q).text

    def iter_queries(self, stream: int) -> Iterator[WorkloadQuery]:
        """Every query of ``stream``, in order."""
        for q in range(self.queries):
            yield self.query(stream, q)
