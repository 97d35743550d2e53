"""``InMemoryStore``: the ``Store`` protocol in process memory, for tests and ephemeral use.

Same semantics and errors as ``SQLiteStore`` (both go through ``_query``). Messages are frozen msgspec
structs and are kept as given (after normalising ``created_at`` to ms UTC). A store-wide insertion counter
plays the role of SQLite's rowid, so ordering is (``created_at``, insertion sequence) here too. Every method
validates everything before it mutates anything and never awaits in between, so each call is atomic.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

import anyio
import msgspec

from ..codecs import Message, Resource, Thread
from ..codecs._time import utc_now
from ..errors import MessageIdTaken, StorageError, ThreadNotFound, ValidationError
from . import _query as q
from ._keywords import (
    NO_MATCHES,
    KeywordCandidate,
    KeywordMatches,
    Neighbours,
    count_words,
    indexed_text,
    keyword_ranking,
    lexemes_of,
    text_tokens,
)
from ._leases import InProcessLeases
from ._om import InMemoryOMStore
from ._protocol import (
    UNSET,
    Lease,
    MessagePage,
    MessageQuery,
    ResourceChange,
    ThreadChange,
    ThreadPage,
    UnsetType,
)
from ._vector_records_memory import InMemoryVectorRecords
from ._versions import WriteCounts

__all__ = ("InMemoryStore",)

_EXISTS_CODE = "THREADMIND_THREAD_EXISTS"
Key = tuple[datetime, int]


class _Row:
    """A stored message and its insertion sequence."""

    __slots__ = ("message", "seq")

    def __init__(self, message: Message, seq: int) -> None:
        self.message = message
        self.seq = seq

    @property
    def key(self) -> Key:
        return (self.message.created_at, self.seq)


def _row_key(row: _Row) -> Key:
    return (row.message.created_at, row.seq)


class InMemoryStore:
    """Threads, messages and resources in dictionaries; nothing survives the process."""

    def __init__(self) -> None:
        self._threads: dict[str, tuple[Thread, int]] = {}
        self._messages: dict[str, _Row] = {}
        self._by_thread: dict[str, list[_Row]] = {}
        self._resources: dict[str, Resource] = {}
        self._seq = itertools.count(1)
        self._versions = WriteCounts()
        self._resource_versions = WriteCounts()
        self._closed = False
        self._vector_records = InMemoryVectorRecords()
        self._om_records = InMemoryOMStore()
        self._leases = InProcessLeases()
        # Each message's words (keyword search), while the stored message is the same object.
        self._word_cache: dict[str, tuple[Message, list[str]]] = {}

    def __repr__(self) -> str:
        return f"InMemoryStore(threads={len(self._threads)}, messages={len(self._messages)})"

    # -- lifecycle -----------------------------------------------------------------------------------

    async def open(self) -> None:
        """Nothing to open; fails once closed."""
        await self._ready()

    async def aclose(self) -> None:
        """Mark the store closed; later calls raise ``StorageError``."""
        await anyio.lowlevel.checkpoint()
        self._closed = True

    async def __aenter__(self) -> InMemoryStore:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _ready(self) -> None:
        await anyio.lowlevel.checkpoint()
        if self._closed:
            raise StorageError(f"{self!r} is closed")

    # -- threads -----------------------------------------------------------------------------------------

    async def create_thread(self, thread: Thread) -> Thread:
        """Insert a new thread; ``ValidationError`` if the id exists."""
        await self._ready()
        q.validate_thread(thread)
        stored, _ = q.stored_thread(thread)
        if stored.id in self._threads:
            raise ValidationError(f"Thread with id {stored.id} already exists", code=_EXISTS_CODE)
        self._threads[stored.id] = (stored, next(self._seq))
        self._versions.bump((stored.id,))
        return stored

    def vector_records(self) -> InMemoryVectorRecords:
        """This store's vector rows (in process memory, like everything else here)."""
        return self._vector_records

    def observational_records(self, *, ttl: float | None = None) -> InMemoryOMStore:
        """This store's observational-memory records (in process memory)."""
        return self._om_records

    def thread_version(self, thread_id: str) -> int:
        """How many write calls through this store touched the thread (see ``WriteCounts``)."""
        return self._versions.get(thread_id)

    def resource_version(self, resource_id: str) -> int:
        """How many write calls through this store touched the resource (see ``WriteCounts``)."""
        return self._resource_versions.get(resource_id)

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread or None."""
        await self._ready()
        entry = self._threads.get(thread_id)
        return None if entry is None else entry[0]

    async def list_threads(
        self,
        *,
        resource_id: str | None = None,
        page: int = 0,
        per_page: int | bool = 100,
        order_by: Literal["created_at", "updated_at"] = "created_at",
        direction: Literal["ASC", "DESC"] = "DESC",
        metadata: Mapping[str, Any] | None = None,
    ) -> ThreadPage:
        """Threads filtered by owner and scalar metadata equality (reference §5.3)."""
        await self._ready()
        args = q.validate_thread_list(page, per_page, order_by, direction, metadata)
        by_updated = args.order_column == "updatedAt"
        matches = [
            (thread.updated_at if by_updated else thread.created_at, seq, thread)
            for thread, seq in self._threads.values()
            if (resource_id is None or thread.resource_id == resource_id)
            and q.thread_metadata_matches(thread.metadata, args.metadata)
        ]
        matches.sort(key=lambda item: (item[0], item[1]), reverse=args.descending)
        total = len(matches)
        end = None if args.limit is None else args.offset + args.limit
        threads = [thread for _, _, thread in matches[args.offset:end]]
        has_more = args.limit is not None and args.offset + args.limit < total
        return ThreadPage(threads=threads, total=total, page=page, per_page=per_page, has_more=has_more)

    def _thread(self, thread_id: str, *, code: str | None = None, message: str | None = None) -> tuple[Thread, int]:
        entry = self._threads.get(thread_id)
        if entry is None:
            raise ThreadNotFound(thread_id, code=code, message=message)
        return entry

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        """Set the title (when given), shallow-merge metadata, bump ``updated_at``; ``ThreadNotFound``."""
        await self._ready()
        if title is not None and not isinstance(title, str):
            raise ValidationError("title must be a string or None")
        q.encode_metadata(metadata, "metadata")
        old, seq = self._thread(thread_id, code="MASTRA_STORAGE_LIBSQL_UPDATE_THREAD_NOT_FOUND",
                                message=f"Thread {thread_id} not found")
        updated = q.updated_thread(old, title, metadata)
        self._threads[thread_id] = (updated, seq)
        self._versions.bump((thread_id,))
        return updated

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread and its messages (no error when missing)."""
        await self._ready()
        for row in self._by_thread.pop(thread_id, ()):
            del self._messages[row.message.id]
            self._word_cache.pop(row.message.id, None)
        self._threads.pop(thread_id, None)
        self._versions.bump((thread_id,))

    async def update_thread_resource_id(self, thread_id: str, resource_id: str) -> Thread:
        """Move a thread and all its messages to another resource."""
        await self._ready()
        if not isinstance(resource_id, str) or not resource_id.strip():
            raise ValidationError("resource_id must be a non-empty string")
        old, seq = self._thread(thread_id, code="MASTRA_STORAGE_LIBSQL_UPDATE_THREAD_RESOURCE_ID_FAILED")
        moved = msgspec.structs.replace(old, resource_id=resource_id, updated_at=utc_now())
        self._threads[thread_id] = (moved, seq)
        for row in self._by_thread.get(thread_id, ()):
            row.message = msgspec.structs.replace(row.message, resource_id=resource_id)
        self._versions.bump((thread_id,))
        return moved

    async def create_thread_with_messages(self, thread: Thread, messages: Sequence[Message]) -> Thread:
        """Insert a new thread and its messages atomically (used by clone)."""
        await self._ready()
        q.validate_thread(thread)
        messages = q.validate_messages(thread.id, messages)
        q.check_owner(thread.id, thread.resource_id, messages)
        stored, _ = q.stored_thread(thread)
        if stored.id in self._threads:
            raise ValidationError(f"Thread with id {stored.id} already exists", code=_EXISTS_CODE)
        for message in messages:
            existing = self._messages.get(message.id)
            if existing is not None:
                raise MessageIdTaken(message.id, existing.message.thread_id or "")
        self._threads[stored.id] = (stored, next(self._seq))
        self._upsert(stored.id, messages)
        self._versions.bump((stored.id,))
        return stored

    # -- messages ----------------------------------------------------------------------------------------

    def _upsert(self, thread_id: str, messages: Sequence[Message]) -> None:
        rows = self._by_thread.setdefault(thread_id, [])
        for message in messages:
            stored = q.as_stored(message)
            row = self._messages.get(stored.id)
            if row is not None:  # re-save: new content, original created_at and position
                row.message = msgspec.structs.replace(stored, created_at=row.message.created_at)
                continue
            row = _Row(stored, next(self._seq))
            self._messages[stored.id] = row
            if not rows or _row_key(rows[-1]) <= row.key:
                rows.append(row)
            else:
                bisect.insort(rows, row, key=_row_key)

    def _bump(self, thread_ids: Iterable[str]) -> None:
        """Bump ``updated_at`` and the write counter of each thread (a message write)."""
        thread_ids = list(thread_ids)
        self._versions.bump(thread_ids)
        now = utc_now()
        for thread_id in thread_ids:
            entry = self._threads.get(thread_id)
            if entry is not None:
                self._threads[thread_id] = (msgspec.structs.replace(entry[0], updated_at=now), entry[1])

    async def save_messages(
        self, thread_id: str, messages: Sequence[Message], *, mark_pending: bool = False, fence: Lease | None = None
    ) -> list[Message]:
        """Upsert messages of one thread atomically, in order (see the ``Store`` protocol).

        ``mark_pending`` is accepted and ignored: the marks protect vectors across a crash, and nothing of this
        store outlives its process.
        """
        await self._ready()
        messages = q.validate_messages(thread_id, messages)
        self._leases.check(fence)
        if not messages:
            return []
        kept = self._check_part(thread_id, messages, {})
        self._upsert(thread_id, messages)
        self._bump((thread_id,))
        return q.saved(messages, kept)

    async def save_messages_many(
        self, by_thread: Mapping[str, Sequence[Message]], *, mark_pending: bool = False, fence: Lease | None = None
    ) -> dict[str, list[Message]]:
        """Upsert the messages of several threads at once: every part is checked before any is written."""
        await self._ready()
        self._leases.check(fence)
        by_thread = {thread_id: q.validate_messages(thread_id, messages) for thread_id, messages in by_thread.items()}
        claimed: dict[str, str] = {}  # ids new to the store, by the thread an earlier part gave them
        kept = {thread_id: self._check_part(thread_id, messages, claimed)
                for thread_id, messages in by_thread.items() if messages}
        for thread_id in kept:
            self._upsert(thread_id, by_thread[thread_id])
        self._bump(kept)
        return {thread_id: q.saved(messages, kept.get(thread_id, {})) for thread_id, messages in by_thread.items()}

    def _check_part(
        self, thread_id: str, messages: Sequence[Message], claimed: dict[str, str]
    ) -> dict[str, datetime]:
        """Refuse one thread's part of a save (missing thread, owner, an id of another thread, including one
        ``claimed`` by an earlier part); return the stored ``created_at`` of its re-saved ids."""
        thread, _ = self._thread(thread_id)
        q.check_owner(thread_id, thread.resource_id, messages)
        kept: dict[str, datetime] = {}
        for message in messages:
            row = self._messages.get(message.id)
            other = row.message.thread_id if row is not None else claimed.setdefault(message.id, thread_id)
            if other != thread_id:
                raise MessageIdTaken(message.id, other or "", thread_id)
            if row is not None:
                kept[message.id] = row.message.created_at
        return kept

    def _thread_rows(self, thread_id: str, resource_id: str | None) -> list[_Row]:
        rows = self._by_thread.get(thread_id, [])
        if resource_id is None:
            return rows
        return [row for row in rows if row.message.resource_id == resource_id]

    def _matches(self, row: _Row, flt: q.MessageFilter) -> bool:
        created = row.message.created_at
        if flt.start is not None and (created <= flt.start if flt.start_exclusive else created < flt.start):
            return False
        if flt.end is not None and (created >= flt.end if flt.end_exclusive else created > flt.end):
            return False
        return not flt.metadata or q.content_metadata_matches(row.message.content, flt.metadata)

    async def get_thread_with_tail(self, thread_id: str, size: int) -> tuple[Thread | None, MessagePage]:
        """The thread row and its newest ``size`` messages (newest first), as ``SQLiteStore`` offers it."""
        thread = await self.get_thread(thread_id)
        return thread, await self.list_messages(MessageQuery(thread_id=thread_id, per_page=size, direction="DESC"))

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        """Page through messages (reference §5.3), with include windows and filters."""
        await self._ready()
        flt = q.validate_message_query(query)
        page: list[tuple[Key, Message]] = []
        total = 0
        if flt.limit != 0:
            selected = [
                row for thread_id in flt.thread_ids for row in self._thread_rows(thread_id, flt.resource_id)
                if self._matches(row, flt)
            ]
            selected.sort(key=_row_key, reverse=flt.descending)
            total = len(selected)
            end = None if flt.limit is None else flt.offset + flt.limit
            page = [(row.key, row.message) for row in selected[flt.offset:end]]
        extra: list[tuple[Key, Message]] = []
        for inc in flt.include:
            target = self._messages.get(inc.id)
            if target is None or (flt.resource_id is not None and target.message.resource_id != flt.resource_id):
                continue
            rows = self._thread_rows(str(target.message.thread_id), flt.resource_id)
            index = bisect.bisect_left(rows, target.key, key=_row_key)
            window = rows[max(0, index - inc.with_previous_messages):index + 1 + inc.with_next_messages]
            extra.extend((row.key, row.message) for row in window)
        messages = q.assemble(page, extra, flt.descending)
        return MessagePage(messages=messages, total=total, page=query.page, per_page=query.per_page,
                           has_more=q.messages_has_more(flt, len(page), total, messages))

    async def get_messages_by_id(self, ids: Sequence[str]) -> list[Message]:
        """Messages with these ids in any thread, ascending by (created_at, sequence); unknown ids skipped."""
        await self._ready()
        rows = [self._messages[i] for i in dict.fromkeys(ids) if isinstance(i, str) and i in self._messages]
        return q.assemble(((row.key, row.message) for row in rows), (), False)

    async def created_times(self, message_ids: Sequence[str], *, resource_id: str | None = None,
                            thread_id: str | None = None) -> dict[str, datetime]:
        """When each message was created (unknown ids left out; the scope is not needed)."""
        await self._ready()
        messages = self._messages
        return {i: messages[i].message.created_at for i in dict.fromkeys(message_ids)
                if isinstance(i, str) and i in messages}

    async def update_messages(self, updates: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Partial updates by id (content merged one level, content.metadata merged); bumps the threads."""
        await self._ready()
        parsed = q.parse_updates(updates)
        current: dict[str, Message] = {}
        for update in parsed:
            row = self._messages.get(update.id)
            if row is None:
                raise ValidationError(f"message {update.id!r} not found; update_messages needs existing ids")
            current[update.id] = q.apply_update(current.get(update.id, row.message), update)
        for mid, message in current.items():  # every check passed: apply
            row = self._messages[mid]
            moved = message.created_at != row.message.created_at
            rows = self._by_thread[str(row.message.thread_id)]
            if moved:
                rows.remove(row)
            row.message = message
            if moved:
                bisect.insort(rows, row, key=_row_key)
        self._bump({m.thread_id for m in current.values() if m.thread_id})
        return q.assemble(((self._messages[mid].key, m) for mid, m in current.items()), (), False)

    async def delete_messages(self, ids: Sequence[str]) -> set[str]:
        """Delete messages by id; return the affected thread ids (their ``updated_at`` bumped)."""
        await self._ready()
        wanted = q.validate_delete_ids(ids)
        threads: set[str] = set()
        for mid in wanted:
            row = self._messages.pop(mid, None)
            self._word_cache.pop(mid, None)
            if row is None:
                continue
            thread_id = str(row.message.thread_id)
            threads.add(thread_id)
            self._by_thread[thread_id].remove(row)
        self._bump(threads)
        return threads

    # -- keyword index -------------------------------------------------------------------------------------

    async def keyword_search(self, terms: Sequence[str], *, resource_id: str | None, thread_id: str | None,
                             limit: int, neighbours_of: Sequence[str] | None = None,
                             counts: bool = True) -> KeywordMatches:
        """The scope's statistics and its best ``limit`` messages holding any of ``terms`` (see ``KeywordSearch``;
        candidates always carry their counts):
        every message of the scope is read (its words cut as the SQLite index cuts them, kept until it changes)."""
        await self._ready()
        found = self._keyword_matches(terms, resource_id, thread_id, limit)
        if neighbours_of is None:
            return found
        ids = [candidate.message_id for candidate in found.candidates] + list(neighbours_of)
        return msgspec.structs.replace(found, neighbours=self._neighbours(ids))

    def _keyword_matches(self, terms: Sequence[str], resource_id: str | None, thread_id: str | None,
                         limit: int) -> KeywordMatches:
        lexemes = lexemes_of(terms)
        if not lexemes or limit <= 0 or (resource_id is None and thread_id is None):
            return NO_MATCHES
        if thread_id is not None:
            rows = list(self._by_thread.get(thread_id, ()))
        else:
            rows = [row for rows in self._by_thread.values() for row in rows]
        docs = words = 0
        frequencies = dict.fromkeys(lexemes, 0)
        found: list[KeywordCandidate] = []
        for row in rows:
            message = row.message
            owner = message.resource_id or self._owner(message.thread_id)
            if resource_id is not None and owner != resource_id:
                continue
            tokens = self._tokens(message)
            if not tokens:
                continue
            docs += 1
            words += len(tokens)
            counts = count_words(tokens, frequencies.keys())
            for lexeme in counts:
                frequencies[lexeme] += 1
            if counts:
                found.append(KeywordCandidate(message.id, message.thread_id or "", owner, len(tokens), counts))
        every = KeywordMatches(docs, words / docs if docs else 0.0, frequencies, found)
        return msgspec.structs.replace(every, candidates=keyword_ranking(every, limit))

    async def neighbours(self, message_ids: Sequence[str]) -> Neighbours:
        """The messages just before and after each one in its thread."""
        await self._ready()
        return self._neighbours(message_ids)

    def _neighbours(self, message_ids: Sequence[str]) -> Neighbours:
        out: Neighbours = {}
        for mid in message_ids:
            row = self._messages.get(mid)
            if row is None:
                continue
            siblings = self._by_thread.get(str(row.message.thread_id), [])
            at = bisect.bisect_left(siblings, row.key, key=_row_key)
            before = siblings[at - 1].message.id if at > 0 else None
            after = siblings[at + 1].message.id if at + 1 < len(siblings) else None
            out[mid] = (before, after)
        return out

    async def keyword_backlog(self) -> int:
        """Always 0: every message is searchable by its words as stored."""
        await self._ready()
        return 0

    async def build_keyword_index(self, progress: Callable[[int, int], object] | None = None) -> int:
        """Nothing to build (words are read from the messages themselves): 0."""
        await self._ready()
        return 0

    def _owner(self, thread_id: str | None) -> str:
        entry = self._threads.get(thread_id or "")
        return entry[0].resource_id if entry is not None else ""

    def _tokens(self, message: Message) -> list[str]:
        cached = self._word_cache.get(message.id)
        if cached is not None and cached[0] is message:
            return cached[1]
        tokens = text_tokens(indexed_text(message))
        self._word_cache[message.id] = (message, tokens)
        return tokens

    # -- resources ---------------------------------------------------------------------------------------

    async def get_resource(self, resource_id: str) -> Resource | None:
        """The resource or None."""
        await self._ready()
        return self._resources.get(resource_id)

    async def update_resource(
        self,
        resource_id: str,
        *,
        working_memory: str | None | UnsetType = UNSET,
        metadata: Mapping[str, Any] | None = None,
    ) -> Resource:
        """Create the resource if missing (metadata ``{}``), else set the given fields (metadata merged)."""
        await self._ready()
        q.check_resource_args(resource_id, working_memory, metadata)
        new = q.updated_resource(resource_id, self._resources.get(resource_id), working_memory, metadata)
        self._resources[resource_id] = new
        self._resource_versions.bump((resource_id,))
        return new

    # -- read-modify-writes and leases -------------------------------------------------------------------

    async def modify_thread(
        self, thread_id: str, change: Callable[[Thread], ThreadChange | None], *, fence: Lease | None = None
    ) -> Thread | None:
        """Read the thread and write what ``change`` makes of it (atomic: nothing awaits in between)."""
        await self._ready()
        old, seq = self._thread(thread_id)
        self._leases.check(fence)
        wanted = change(old)
        if wanted is None:
            return None
        if wanted.title is not None and not isinstance(wanted.title, str):
            raise ValidationError("title must be a string or None")
        q.encode_metadata(wanted.metadata, "metadata")
        updated = q.updated_thread(old, wanted.title, wanted.metadata)
        self._threads[thread_id] = (updated, seq)
        self._versions.bump((thread_id,))
        return updated

    async def modify_resource(
        self, resource_id: str, change: Callable[[Resource | None], ResourceChange | None], *,
        fence: Lease | None = None,
    ) -> Resource | None:
        """Read the resource (None when missing) and write what ``change`` makes of it, atomically."""
        await self._ready()
        self._leases.check(fence)
        old = self._resources.get(resource_id)
        wanted = change(old)
        if wanted is None:
            return None
        q.check_resource_args(resource_id, wanted.working_memory, wanted.metadata)
        new = q.updated_resource(resource_id, old, wanted.working_memory, wanted.metadata)
        self._resources[resource_id] = new
        self._resource_versions.bump((resource_id,))
        return new

    async def acquire_lease(self, key: str, *, owner: str, ttl: float, wait: bool) -> Lease:
        """Hold ``key`` (every holder of this store is in this process)."""
        await self._ready()
        return await self._leases.acquire(key, owner=owner, ttl=ttl, wait=wait)

    async def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` back."""
        await self._leases.release(lease)

    async def renew_leases(self, owner: str, ttl: float) -> None:
        """Extend ``owner``'s leases."""
        await self._leases.renew(owner, ttl)

    # -- CLI helpers -------------------------------------------------------------------------------------

    async def stats(self) -> dict[str, int]:
        """Row counts (``file_bytes`` is 0: nothing is on disk)."""
        await self._ready()
        return {"threads": len(self._threads), "messages": len(self._messages), "resources": len(self._resources),
                "file_bytes": 0}

    async def iter_messages(self, thread_ids: Sequence[str] | None = None) -> AsyncIterator[Message]:
        """Every message of the given threads (default: all threads by creation), ascending per thread."""
        await self._ready()
        if thread_ids is None:
            ordered = sorted(self._threads.values(), key=lambda entry: (entry[0].created_at, entry[1]))
            thread_ids = [thread.id for thread, _ in ordered]
        for thread_id in list(thread_ids):
            for row in list(self._by_thread.get(thread_id, ())):
                yield row.message
