"""MessageList: the per-turn message container with sources and Mastra's merge-by-id rules (reference §4)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, Literal, TypeAlias

import msgspec

from ..codecs import Message, ToolInvocationPart
from ..codecs._json import new_id
from ..codecs._time import to_epoch_ms, to_utc_ms, utc_now
from ..errors import ValidationError
from ._convert import ConvertContext, missing, stamp_parts, to_message
from ._merge import (
    CLIENT_UPDATE_STATES,
    LIVE_SOURCES,
    TOOL_STATE_RANK,
    after_sealed,
    is_sealed,
    is_system_reminder,
    layer_stored_over_input,
    layer_stored_over_live,
    merge_assistant,
    messages_equal,
    should_merge,
    split_after_seal,
    strip_provider_metadata,
    tool_parts,
)

__all__ = (
    "CLIENT_UPDATE_STATES",
    "TOOL_STATE_RANK",
    "MessageInput",
    "MessageList",
    "Source",
    "is_system_reminder",
    "strip_provider_metadata",
    "tool_parts",
)

Source: TypeAlias = Literal["memory", "input", "response", "context", "system"]
MessageInput: TypeAlias = "str | Message | Mapping[str, Any]"

_SOURCES: frozenset[str] = frozenset({"memory", "input", "response", "context", "system"})
_ONE_MS = timedelta(milliseconds=1)
_CREATED_AT = attrgetter("created_at")  # the sort key (C level; the list is re-sorted on every add)


def _normalize_source(source: str) -> str:
    if source == "user":
        return "input"
    if source not in _SOURCES:
        raise ValidationError(f"`source` must be one of memory, input, response, context, system (or user); "
                              f"got {source!r}")
    return source


def _system_text(message: str | Message | Mapping[str, Any]) -> str:
    if isinstance(message, str):
        return message
    if isinstance(message, Message):
        return message.text
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        text = content.get("content")
        if isinstance(text, str) and text:
            return text
        content = content.get("parts")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    raise ValidationError("a system message needs `content` as a string or text parts")


class MessageList:
    """The messages of one agent turn, each tagged with the sources it came from.

    Messages are frozen; every change builds a new message and swaps it in by id. The conversation is kept
    sorted by ``created_at`` (stable), system texts live apart in untagged and tagged buckets.
    """

    def __init__(
        self,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        generate_id: Callable[[], str] | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self._thread_id = thread_id
        self._resource_id = resource_id
        self._generate_id = generate_id or new_id
        self._now = now or utc_now
        self._messages: list[Message] = []
        self._appended = False  # set by _append: the last _place only added a row at the end
        self._sources: dict[str, set[str]] = {}
        self._system: list[str] = []
        self._tagged: dict[str, list[str]] = {}
        self._watermark: datetime | None = None
        # Ids of live messages whose created_at this list generated, the earliest such time (a lower bound once
        # they move), and how many times the list generated one.
        self._generated: set[str] = set()
        self._generated_floor: datetime | None = None
        self._generated_count = 0

    # --- properties -------------------------------------------------------------------------------------------

    @property
    def thread_id(self) -> str | None:
        """The thread this list belongs to (fills messages without one)."""
        return self._thread_id

    @property
    def resource_id(self) -> str | None:
        """The resource this list belongs to (fills messages without one)."""
        return self._resource_id

    # --- clock ------------------------------------------------------------------------------------------------

    def _next_time(self) -> datetime:
        """A generated created_at: now, but at least 1 ms after the newest time the list has seen."""
        value = to_utc_ms(self._now())
        if self._watermark is not None and value <= self._watermark:
            value = self._watermark + _ONE_MS
        self._watermark = value
        self._generated_count += 1
        return value

    def _see(self, when: datetime) -> None:
        if self._watermark is None or when > self._watermark:
            self._watermark = when

    # --- adding -----------------------------------------------------------------------------------------------

    def add(
        self,
        messages: MessageInput | Sequence[MessageInput],
        source: Source | Literal["user"],
        *,
        merge: bool = True,
    ) -> MessageList:
        """Convert and add messages under ``source`` applying the same-id rules; returns the list.

        :raises ValidationError: a live message names another thread or resource.
        :raises InvalidMessage: a message has no usable content.
        """
        src = _normalize_source(source)
        items: Sequence[MessageInput]
        if isinstance(messages, (str, Message, Mapping)):
            items = [messages]
        else:
            items = messages
        ctx = ConvertContext(src, self._thread_id, self._resource_id, self._generate_id, self._next_time,
                             self._find_tool_args)
        batch: list[Message] = []
        generated: list[Message] = []
        newest_stored: datetime | None = None
        for item in items:
            count = self._generated_count
            message = to_message(item, ctx, batch)
            if message.role != "system":
                if src == "memory":
                    if newest_stored is None or message.created_at > newest_stored:
                        newest_stored = message.created_at
                else:
                    self._check_memory_info(message)
                    if self._generated_count != count:
                        generated.append(message)
            self._see(message.created_at)
            batch.append(message)
        for message in generated:
            self._generated.add(message.id)
            if self._generated_floor is None or message.created_at < self._generated_floor:
                self._generated_floor = message.created_at
        # Everything converted and checked first, so a bad message leaves the list untouched.
        # Stored rows with new ids are plain appends: they are sorted in once at the end of the batch (the same
        # order as sorting after each, since the sort is stable), not once per row. Any other step sees a sorted
        # list first.
        unsorted = False
        defer = src == "memory"
        sources = self._sources
        for message in batch:
            if defer and message.id not in sources and message.role != "system":
                unsorted = self._append_stored(message) or unsorted
                continue
            if unsorted and message.id in sources:  # not a plain append: it must see the sorted list
                self._messages.sort(key=_CREATED_AT)
                unsorted = False
            unsorted = self._add_one(message, src, merge, defer_sort=defer) or unsorted
        if unsorted:
            self._messages.sort(key=_CREATED_AT)
        floor = self._generated_floor
        if newest_stored is not None and floor is not None and newest_stored >= floor:
            self._keep_generated_last(newest_stored)
        return self

    def _keep_generated_last(self, newest: datetime) -> None:
        """Generated times sort after stored rows, even rows added after them (reference §4.3).

        An agent adds its input before memory loads the history, so a stored row dated at or after the
        input's generated time (the previous response, bumped 1 ms past its input in the same millisecond,
        or a row from a clock that runs ahead) would otherwise sort after the new input, in the prompt and
        in storage. Such live messages move to just after the newest stored row, keeping their order;
        explicit times and messages a stored copy took over keep theirs.
        """
        floor = newest
        moved = False
        messages = self._messages
        for index, message in enumerate(messages):
            if message.id not in self._generated or "memory" in self._sources.get(message.id, ()):
                continue
            if message.created_at <= floor:
                floor += _ONE_MS
                messages[index] = msgspec.structs.replace(message, created_at=floor)
                moved = True
            else:
                floor = message.created_at
        if moved:
            messages.sort(key=_CREATED_AT)
            self._see(floor)

    def keep_generated_after(self, stored: datetime) -> None:
        """Generated times sort after ``stored``, the time of a stored row the list did not load (observational
        memory loads only what its observations do not cover: the newest stored row may be an observed one)."""
        if self._generated_floor is not None and self._generated_floor <= stored:
            self._keep_generated_last(stored)

    def date_now(self, ids: Iterable[str]) -> None:
        """Give the live messages ``ids`` generated times, in their order in the list, as if they had come
        without one: now, after every other message of the list, and kept after stored rows added later.

        A turn dates its new input this way once it holds the thread, so a time a client sent (its clock, or the
        moment its request arrived, before the turn ahead of it finished) never orders a thread. Messages a stored
        copy took over keep their stored time.
        """
        wanted = {i for i in ids if "memory" not in self._sources.get(i, ())}
        if not wanted:
            return
        messages = self._messages
        # The clock restarts from the messages that keep their times: a client's time in the future must not
        # carry over into the generated ones.
        self._watermark = max((m.created_at for m in messages if m.id not in wanted), default=None)
        for index, message in enumerate(messages):
            if message.id in wanted:
                when = self._next_time()
                messages[index] = msgspec.structs.replace(message, created_at=when)
                self._generated.add(message.id)
                if self._generated_floor is None or when < self._generated_floor:
                    self._generated_floor = when
        messages.sort(key=_CREATED_AT)

    def add_system(self, message: str | Message | Mapping[str, Any], tag: str | None = None) -> MessageList:
        """Add a system text to the untagged bucket or the ``tag`` bucket (de-duplicated within the bucket)."""
        text = _system_text(message)
        bucket = self._system if tag is None else self._tagged.setdefault(tag, [])
        if text not in bucket:
            bucket.append(text)
        return self

    def _find_tool_args(self, call_id: str) -> Any:
        for message in reversed(self._messages):
            for part in reversed(message.content.parts):
                if isinstance(part, ToolInvocationPart) and part.tool_invocation.tool_call_id == call_id:
                    return part.tool_invocation.args
        return missing()

    def _check_memory_info(self, message: Message) -> None:
        if self._thread_id is not None and message.thread_id is not None and message.thread_id != self._thread_id:
            raise ValidationError(f"Received input message with wrong threadId. Input {message.thread_id}, "
                                  f"expected {self._thread_id}")
        if (self._resource_id is not None and message.resource_id is not None
                and message.resource_id != self._resource_id):
            raise ValidationError(f"Received input message with wrong resourceId. Input {message.resource_id}, "
                                  f"expected {self._resource_id}")

    def _add_one(self, message: Message, source: str, merge: bool, *, defer_sort: bool = False) -> bool:
        """Place one message; True when it was appended out of order and ``defer_sort`` left the sort to the caller."""
        if message.role == "system":
            if source != "memory":
                self.add_system(message)
            return False
        if source != "memory":
            message = stamp_parts(message, to_epoch_ms(self._now()))
        self._appended = False
        self._place(message, source, merge)
        messages = self._messages
        # The list was sorted before this message. An append no older than the last row leaves it sorted, just
        # as the stable sort would (equal times keep arrival order); anything else re-sorts.
        if self._appended and (len(messages) < 2 or messages[-2].created_at <= messages[-1].created_at):
            return False
        if self._appended and defer_sort:
            return True
        messages.sort(key=_CREATED_AT)
        return False

    def _append_stored(self, message: Message) -> bool:
        """A stored row with an id the list does not hold: rule 5, a plain append (stored rows never merge).

        What :meth:`_add_one` does for it, without the steps that cannot apply; True when it landed out of
        order (the caller sorts once at the end of the batch).
        """
        messages = self._messages
        messages.append(message)
        self._sources[message.id] = {"memory"}
        self._see(message.created_at)
        return len(messages) > 1 and messages[-2].created_at > message.created_at

    def _index(self, message_id: str) -> int | None:
        for index in range(len(self._messages) - 1, -1, -1):
            if self._messages[index].id == message_id:
                return index
        return None

    def _last_sealed_index(self) -> int:
        for index in range(len(self._messages) - 1, -1, -1):
            if is_sealed(self._messages[index]):
                return index
        return -1

    def _tag(self, message_id: str, source: str) -> None:
        tags = self._sources.setdefault(message_id, set())
        if source == "response":
            tags.discard("memory")
            tags.discard("input")
        tags.add(source)

    def _append(self, message: Message, source: str) -> None:
        self._messages.append(message)
        self._appended = True
        self._sources[message.id] = set()
        self._tag(message.id, source)
        self._see(message.created_at)

    def _place(self, new: Message, source: str, merge: bool) -> None:
        """Apply reference §4.4 rules 1-5 for one converted message."""
        index = self._index(new.id) if new.id in self._sources else None  # every listed id has a sources entry
        old = self._messages[index] if index is not None else None
        if old is not None and index is not None:
            old_sources = self._sources.get(old.id, set())
            # Rule 1: a stored copy arriving over a live copy becomes the base, in the live copy's slot.
            if source == "memory" and old_sources & LIVE_SOURCES and not is_sealed(new):
                if "input" in old_sources and not old_sources & {"response", "context"}:
                    layered = layer_stored_over_input(new, old)
                else:
                    layered = layer_stored_over_live(new, old)
                self._messages[index] = layered
                self._tag(old.id, "memory")
                return
            # Rule 2: repeated stored rows are idempotent.
            if source == "memory" and messages_equal(old, new):
                return
        # Rule 3: fold into the latest assistant message when allowed.
        if self._messages and merge:
            latest_index = len(self._messages) - 1
            latest = self._messages[latest_index]
            # should_merge first: it is cheap and false for stored rows, so the sealed scan rarely runs.
            if (should_merge(latest, new, source) and (old is None or not is_sealed(old))
                    and latest_index > self._last_sealed_index()):
                self._messages[latest_index] = merge_assistant(latest, new)
                self._tag(latest.id, source)
                return
        if old is None or index is None:
            self._append(new, source)  # Rule 5
            return
        # Rule 4: same id, not merged.
        if is_sealed(old):
            split = split_after_seal(old, new, self._generate_id())
            if split is not None:
                self._append(split, source)
            return
        if index <= self._last_sealed_index():
            self._append(after_sealed(old, new, self._generate_id()), source)
            return
        if merge and should_merge(old, new, source):
            self._messages[index] = merge_assistant(old, new)
            self._tag(old.id, source)
            return
        self._messages[index] = new
        self._sources[new.id] = set()
        self._tag(new.id, source)

    # --- removing ---------------------------------------------------------------------------------------------

    def remove_by_ids(self, ids: Iterable[str]) -> list[Message]:
        """Remove messages by id from the list and every source; returns the removed messages."""
        wanted = set(ids)
        removed = [m for m in self._messages if m.id in wanted]
        self._messages = [m for m in self._messages if m.id not in wanted]
        for message in removed:
            self._sources.pop(message.id, None)
        return removed

    def clear_source(self, source: Source | Literal["user"]) -> list[Message]:
        """Remove the messages tagged only with ``source`` (returned); others just lose that tag."""
        src = _normalize_source(source)
        removed: list[Message] = []
        kept: list[Message] = []
        for message in self._messages:
            tags = self._sources.get(message.id, set())
            if tags == {src}:
                removed.append(message)
                del self._sources[message.id]
            else:
                tags.discard(src)
                kept.append(message)
        self._messages = kept
        return removed

    def replace(self, message: Message) -> None:
        """Swap in a new version of a message by id, keeping its sources and slot (re-sorted if its time moved).

        :raises ValidationError: no message with that id is in the list.
        """
        index = self._index(message.id)
        if index is None:
            raise ValidationError(f"`message.id` {message.id!r} is not in the MessageList; use add() for new ones")
        self._messages[index] = message
        self._see(message.created_at)
        self._messages.sort(key=_CREATED_AT)

    # --- reading ----------------------------------------------------------------------------------------------

    def sources_of(self, message_id: str) -> frozenset[str]:
        """The sources a message is tagged with (empty when unknown or drained)."""
        return frozenset(self._sources.get(message_id, ()))

    def _with(self, source: str) -> list[Message]:
        return [m for m in self._messages if source in self._sources.get(m.id, ())]

    def get_all(self) -> list[Message]:
        """The conversation (no system texts), sorted by created_at."""
        return list(self._messages)

    def get_remembered(self) -> list[Message]:
        """Messages tagged ``memory``."""
        return self._with("memory")

    def get_input(self) -> list[Message]:
        """Messages tagged ``input``."""
        return self._with("input")

    def get_response(self) -> list[Message]:
        """Messages tagged ``response``."""
        return self._with("response")

    def get_context(self) -> list[Message]:
        """Messages tagged ``context``."""
        return self._with("context")

    def get_system_messages(self) -> list[str]:
        """System texts in prompt order: untagged first, then tagged buckets in insertion order."""
        texts = list(self._system)
        for bucket in self._tagged.values():
            texts.extend(bucket)
        return texts

    def get_system_messages_by_tag(self, tag: str) -> list[str]:
        """The system texts of one tagged bucket."""
        return list(self._tagged.get(tag, ()))

    def is_new(self, message_id: str) -> bool:
        """True when the message is tagged ``input`` or ``response`` (not yet saved)."""
        tags = self._sources.get(message_id, ())
        return "input" in tags or "response" in tags

    def drain_unsaved(self) -> list[Message]:
        """The input and response messages (sorted); clears those tags so a second drain is empty."""
        drained: list[Message] = []
        for message in self._messages:
            tags = self._sources.get(message.id)
            if tags and ("input" in tags or "response" in tags):
                drained.append(message)
                tags.discard("input")
                tags.discard("response")
        return drained

    def get(self, message_id: str) -> Message | None:
        """The message with that id, or None."""
        index = self._index(message_id)
        return None if index is None else self._messages[index]

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(list(self._messages))

    def __contains__(self, message_id: object) -> bool:
        return isinstance(message_id, str) and self._index(message_id) is not None

    def __repr__(self) -> str:
        return f"MessageList(thread_id={self._thread_id!r}, messages={len(self._messages)})"

