"""Observational memory: an Observer condenses old messages into a dated log, a Reflector condenses the log.

With ``observation.bufferTokens`` the Observer also works ahead: :meth:`ObservationalMemoryEngine.buffer` adds
chunks to the record (``bufferedObservationChunks``) in the background, each under the owner's compare-and-set
(a chunk whose messages were observed meanwhile is dropped, never duplicated), and :meth:`~ObservationalMemoryEngine.
activate` makes them active when a turn reaches the threshold, with no model call.

Reference §8.1. The record (``mastra_observational_memory``, see ``stores/_om.py``) holds the observations
and a cursor (``lastObservedAt`` + ``observedMessageIds``); messages past the cursor are "unobserved" and
still sent verbatim. When they exceed ``message_tokens`` an observation runs in the memory's background
task group; only past ``block_after`` does a turn wait for it. Every change to a record is a compare-and-set in one
store transaction (a record changed since the cycle read it is never overwritten: the cycle reads it again and
commits its result only if it still fits, see ``stores._om.compare_and_set``), and the model calls
run between reading and committing, so a turn is never held up by a slow Observer unless it has to be. The steps run
beside the thread's own commands, not inside its actor: the compare-and-set and the lease below are what keep two
cycles, two tasks or two processes apart, and a snapshot reads only committed rows.

Each Observer cycle (buffering a chunk, or observing) holds the lease ``om-observer:<key>`` on the store from its
snapshot to its commit (:meth:`~ObservationalMemoryEngine.claim`): one cycle at a time per key in every process on
the store, renewed by the heartbeat, released at once when its process dies, so the next turn takes the cycle up.
A cycle that finds the key claimed leaves the work to its holder (a turn past ``block_after`` waits for it).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .._config import MemoryConfig, ObservationalMemoryConfig, WorkingMemoryConfig
from .._history_window import is_transient_signal
from ..actors._system import forget_fences
from ..codecs import FilePart, Message, Thread
from ..codecs._time import from_iso, to_iso, utc_now
from ..errors import ThreadBusy, ThreadmindError, ThreadNotFound, ValidationError
from ..processors import MemoryAccess
from ..processors._observation_groups import message_range, wrap_in_group
from ..processors._observation_text import (
    OBSERVER_INSTRUCTIONS,
    THREAD_TITLE_INSTRUCTIONS,
    date_header,
    observer_attachments,
    observer_transcript,
    sealed_updates,
    split_observer_output,
)
from ..processors._om_triggers import chunks_to_activate
from ..stores import DateRange, MessageQuery, ObservationalMemoryStore, OMRecord, ThreadChange
from ..stores._om import compare_and_set, lookup_key, same_record
from ..tokens import DefaultTokenCounter, TokenCounter
from ..tracing import operation_span
from ._om_parts import ManagedWorkingMemory, custom_instructions, newest_within
from ._om_reflection import Reflections
from ._working_memory import read_working_memory, scope_key, write_working_memory

if TYPE_CHECKING:
    from ..models import LanguageModel
    from ._gateway import Door

__all__ = ("ObservationalMemoryEngine",)

_log = logging.getLogger("threadmind.observational")

_MAX_ROUNDS = 8  # observation rounds one background job may run before yielding to the next trigger
_ACTIVATION_ROUNDS = 8  # activations an observation round tries while turns activate the same chunks


class _Snapshot(msgspec.Struct, kw_only=True):
    record: OMRecord | None
    messages: list[Message]
    tokens: int
    title: str | None = None  # the title the Observer gave last (``observation.threadTitle``)


class ObservationalMemoryEngine:
    """Observation state of one ``Memory``: records, in-flight observations, and the Observer/Reflector calls."""

    def __init__(
        self,
        door: Door,
        *,
        token_counter: TokenCounter | None = None,
        retries: int = 3,
        backoff: float = 0.05,
    ) -> None:
        self._door = door
        self._records: ObservationalMemoryStore | None = None
        self.counter: TokenCounter = token_counter or DefaultTokenCounter()
        self.retries = retries
        self.backoff = backoff
        self._inflight: dict[str, anyio.Event] = {}
        self._agent_models: dict[str, LanguageModel] = {}
        self.observer_failures = 0
        #: The Reflector's side: reflections computed ahead, at the threshold, and made active.
        self.reflections = Reflections(self)

    # -- plumbing ------------------------------------------------------------------------------------
    @property
    def records(self) -> ObservationalMemoryStore:
        """The OM record store (the SQLite table, or a dictionary)."""
        if self._records is None:
            self._records = self._door.observational_records()
        return self._records

    @property
    def _store(self) -> Door:
        return self._door

    @staticmethod
    def key(config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None) -> str:
        """The record's lookup key for this scope."""
        return lookup_key(config.scope, thread_id, resource_id)

    def note_agent_model(self, thread_id: str, resource_id: str | None, model: LanguageModel) -> None:
        """Remember the agent's model: the Observer's fallback when the options name none."""
        self._agent_models[f"thread:{thread_id}"] = model
        if resource_id:
            self._agent_models[f"resource:{resource_id}"] = model

    def model_for(
        self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, *, reflector: bool = False
    ) -> LanguageModel | None:
        model = (config.reflection_model or config.model) if reflector else config.model
        if isinstance(model, str):
            from ..models import resolve_model

            return resolve_model(model)
        if model is not None:
            result: LanguageModel = model
            return result
        return self._agent_models.get(f"thread:{thread_id}") or (
            self._agent_models.get(f"resource:{resource_id}") if resource_id else None)

    @asynccontextmanager
    async def claim(self, role: str, key: str, *, wait: bool) -> AsyncIterator[bool | None]:
        """Hold the lease ``om-<role>:<key>`` against every process on the store (and every task of this one) while
        an Observer (``role`` "observer": buffering and observing) or Reflector cycle runs, so each runs once; the
        heartbeat renews it, a dead holder's lapses within seconds. Yields True when taken at once, None when taken
        after waiting for another holder (``wait``), False when another holds it (not ``wait``)."""
        store, name = self._store, f"om-{role}:{key}"
        waited = False
        try:
            lease = await store.acquire_lease(name, wait=False)
        except ThreadBusy:
            if not wait:
                yield False
                return
            lease = await store.acquire_lease(name, wait=True)
            waited = True
        try:
            yield None if waited else True
        finally:
            with anyio.CancelScope(shield=True):
                await store.release_lease(lease)

    # -- reading -------------------------------------------------------------------------------------
    async def _unobserved(
        self, store: MemoryAccess | Door, config: ObservationalMemoryConfig, thread_id: str,
        resource_id: str | None, record: OMRecord | None,
    ) -> list[Message]:
        cursor = record.last_observed_at if record is not None else None
        seen = set(record.observed_message_ids) if record is not None else set()
        threads: str | list[str] = thread_id
        if config.scope == "resource" and resource_id:
            page = await store.list_threads(resource_id=resource_id, per_page=False)
            threads = [t.id for t in page.threads] or [thread_id]
        query = MessageQuery(
            thread_id=threads,
            resource_id=resource_id if config.scope == "resource" else None,
            per_page=False,
            direction="ASC",
            date_range=DateRange(start=cursor) if cursor is not None else None,
            include_total=False,
        )
        page_ = await store.list_messages(query)
        return [m for m in page_.messages
                if m.id not in seen and m.role != "system" and not is_transient_signal(m)]

    async def load(
        self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, store: MemoryAccess
    ) -> tuple[OMRecord | None, list[Message]]:
        """The current record and the unobserved messages (read through ``store``, e.g. the routed store)."""
        record = await self.records.current(self.key(config, thread_id, resource_id))
        return record, await self._unobserved(store, config, thread_id, resource_id, record)

    # -- scheduling ----------------------------------------------------------------------------------
    def schedule(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, *,
                 working_memory: WorkingMemoryConfig | None = None) -> bool:
        """Start a background observation for this key unless one is running; True when started."""
        async def _observe() -> None:
            for _ in range(_MAX_ROUNDS):
                if not await self._observe_once(config, thread_id, resource_id, working_memory, wait=False):
                    break

        return self.start_background(self.key(config, thread_id, resource_id), "observe", _observe)

    def start_background(self, key: str, what: str, job: Callable[[], Awaitable[object]]) -> bool:
        """Run ``job`` in the background unless work under ``key`` is in flight; True when started. A failure is
        logged: the turn that reaches the threshold does the work itself."""
        if key in self._inflight:
            return False
        done = self._inflight[key] = anyio.Event()
        if self._door.spawn(self._run_started, key, done, what, job, name=f"threadmind.om.{what}[{key}]"):
            return True
        self._finish(key, done)
        return False

    async def _run_started(self, key: str, done: anyio.Event, what: str,
                           job: Callable[[], Awaitable[object]]) -> None:
        forget_fences()  # spawned from a turn that ends before this does: its lease is not this job's
        try:
            await job()
        except Exception:
            _log.warning("observational memory (%s) for %s failed; the threshold does it instead", what, key,
                         exc_info=True)
        finally:
            self._finish(key, done)

    def _finish(self, key: str, done: anyio.Event) -> None:
        """Release ``key`` (unless a newer run holds it) and wake whoever waits on ``done``."""
        if self._inflight.get(key) is done:
            del self._inflight[key]
        done.set()

    async def ensure_below_block(
        self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, tokens: int,
        *, failures: list[BaseException] | None = None, working_memory: WorkingMemoryConfig | None = None,
    ) -> bool:
        """Called by a turn whose unobserved tokens exceed ``block_after``: wait for (or run) an observation.

        Returns True when an observation completed (the caller reloads). After the Observer's retries fail,
        returns False (the error appended to ``failures``) and the turn proceeds on raw history.
        """
        key = self.key(config, thread_id, resource_id)
        running = self._inflight.get(key)
        if running is not None:
            await running.wait()
            return True
        done = self._inflight[key] = anyio.Event()
        try:
            return await self._observe_once(config, thread_id, resource_id, working_memory, wait=True)
        except Exception as exc:
            _log.warning("observational memory for %s failed; the turn proceeds on raw history", key,
                         exc_info=True)
            if failures is not None:
                failures.append(exc)
            return False
        finally:
            self._finish(key, done)

    # -- buffering (observation.bufferTokens) ---------------------------------------------------------
    @staticmethod
    def should_buffer(config: ObservationalMemoryConfig, record: OMRecord | None, tokens: int) -> bool:
        """Whether ``tokens`` unobserved tokens crossed a new ``bufferTokens`` interval since the last buffering
        (Mastra's ``shouldTriggerAsyncObservation``: intervals halve within 1.1 intervals of the threshold)."""
        size = config.buffer_size
        if size is None:
            return False
        last = record.last_buffered_at_tokens if record is not None else 0
        threshold = config.message_threshold(record.observation_token_count if record is not None else 0)
        step = size / 2 if tokens >= threshold - size * 1.1 else size
        return int(tokens // step) > int(last // step)

    def buffer(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None, tokens: int,
               working_memory: WorkingMemoryConfig | None = None, cycle_id: str | None = None) -> bool:
        """Start computing the next buffered chunk (its ``cycleId``: ``cycle_id``) in the background unless one is
        being computed; True when started."""
        cycle = cycle_id or str(uuid.uuid4())
        return self.start_background("buffer:" + self.key(config, thread_id, resource_id), "buffer",
                           lambda: self._buffer_once(config, thread_id, resource_id, tokens, working_memory, cycle))

    def buffering(self, config: ObservationalMemoryConfig, thread_id: str,
                  resource_id: str | None) -> tuple[bool, bool]:
        """Whether a chunk of observations, and a reflection, are being computed ahead in this process now."""
        key = self.key(config, thread_id, resource_id)
        return f"buffer:{key}" in self._inflight, f"reflect:{key}" in self._inflight

    async def _buffer_once(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                           tokens: int, working_memory: WorkingMemoryConfig | None = None,
                           cycle: str | None = None) -> bool:
        """Observe the unobserved messages no chunk holds yet into a new buffered chunk (not yet active): snapshot
        under the owner, the Observer outside it, then a compare-and-set of the record. True if a chunk was
        added."""
        async with self.claim("observer", self.key(config, thread_id, resource_id), wait=False) as held:
            if held is False:
                return False  # another process (or task) runs the Observer for this key now: this cycle is theirs
            return await self._buffer_claimed(config, thread_id, resource_id, tokens, working_memory, cycle)

    async def _buffer_claimed(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                              tokens: int, working_memory: WorkingMemoryConfig | None, cycle: str | None) -> bool:
        """:meth:`_buffer_once` with the Observer's claim held."""
        key = self.key(config, thread_id, resource_id)
        store = self._store
        records = self.records

        async def _snapshot() -> _Snapshot:
            record = await records.current(key)
            held = {mid for chunk in (record.buffered_chunks if record is not None else ())
                    for mid in chunk.get("messageIds") or ()}
            messages = [m for m in await self._unobserved(store, config, thread_id, resource_id, record)
                        if m.id not in held]
            return _Snapshot(record=record, messages=messages, tokens=self.counter.count_messages(messages))

        snap = await _snapshot()
        model = self.model_for(config, thread_id, resource_id)
        if not snap.messages or model is None:
            return False
        record = snap.record
        previous = "\n\n".join(part for part in (
            record.active_observations if record is not None else "",
            *(str(c.get("observations") or "") for c in (record.buffered_chunks if record is not None else ())))
            if part.strip())
        observed, extras, new_working_memory = await self._ask_observer(
            config, thread_id, resource_id, model, previous, snap.messages, None, working_memory)
        last = max(snap.messages, key=lambda m: m.created_at)
        cycle = cycle or str(uuid.uuid4())
        chunk: dict[str, Any] = {  # Mastra's BufferedObservationChunk
            "id": f"ombuf-{uuid.uuid4()}", "cycleId": cycle,
            "observations": _grouped(config, f"{date_header(snap.messages)}\n{observed}", snap.messages),
            "tokenCount": self.counter.count_text(observed), "messageIds": [m.id for m in snap.messages],
            # the messages' own tokens (no per-conversation overhead), so chunks add up as the messages do
            "messageTokens": sum(self.counter.count_message(m) for m in snap.messages),
            "lastObservedAt": to_iso(last.created_at), "createdAt": to_iso(utc_now()),
            **({"currentTask": extras["currentTask"]} if "currentTask" in extras else {}),
            **({"suggestedContinuation": extras["suggestedResponse"]} if "suggestedResponse" in extras else {}),
            **({"threadTitle": extras["threadTitle"]} if "threadTitle" in extras else {}),
            # Mastra keeps what the chunk's extractors found; the working memory is written when it activates
            **({"extractedValues": {"working-memory": new_working_memory}} if new_working_memory is not None
               else {}),
        }

        def _with_chunk(current: OMRecord | None) -> OMRecord | None:
            if not same_record(current, snap.record) and not _still_unobserved(current, snap.messages):
                return None  # observed meanwhile (the chunk would overlap): dropped, never duplicated
            now = utc_now()
            fresh = current.copy() if current is not None else OMRecord(
                id=str(uuid.uuid4()), lookup_key=key, scope=config.scope, resource_id=resource_id,
                thread_id=thread_id, origin_type="initialization", config=_config_json(config), created_at=now,
                updated_at=now)
            fresh.buffered_chunks = [*fresh.buffered_chunks, chunk]
            fresh.last_buffered_at_tokens = tokens
            fresh.updated_at = now
            return fresh

        with operation_span("threadmind.om.commit_buffer", "update_memory", thread_id=thread_id,
                            resource_id=resource_id):
            return await compare_and_set(records, key, _with_chunk) is not None

    async def activate(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                       tokens: int | None, working_memory: WorkingMemoryConfig | None = None) -> bool:
        """Make buffered chunks active, with no model call (Mastra's ``swapBufferedToActive``): the oldest chunks
        whose messages bring the unobserved ``tokens`` nearest ``(1 - bufferActivation)`` × the threshold (None:
        every chunk, before an observation of what follows them); their messages become observed. True if any
        chunk was activated."""
        key = self.key(config, thread_id, resource_id)
        records = self.records
        store = self._store

        seen: list[tuple[str, int, object]] = []  # the cursor this activation first read
        taken: list[dict[str, Any]] = []

        def _activated(current: OMRecord | None) -> OMRecord | None:
            if current is None or not current.buffered_chunks:
                return None
            cursor = (current.id, current.generation_count, current.last_observed_at)
            if seen and seen[0] != cursor:
                return None  # another activation moved the cursor meanwhile: ``tokens`` no longer counts what is left
            seen[:] = [cursor]
            chunks = current.buffered_chunks
            threshold = config.message_threshold(current.observation_token_count)
            count = len(chunks) if tokens is None else \
                chunks_to_activate(chunks, tokens, threshold, config.activation_ratio)
            taken[:], left = chunks[:count], chunks[count:]
            content = "\n\n".join(str(c.get("observations") or "") for c in taken)
            last_seen = max((from_iso(str(c["lastObservedAt"])) for c in taken if c.get("lastObservedAt")),
                            default=utc_now())
            record = current.copy()
            boundary = f"\n\n--- message boundary ({to_iso(last_seen)}) ---\n\n"
            record.active_observations = f"{record.active_observations}{boundary}{content}" \
                if record.active_observations else content
            record.observation_token_count = self.counter.count_text(record.active_observations)
            record.observed_message_ids = [str(mid) for c in taken for mid in c.get("messageIds") or ()]
            record.last_observed_at = last_seen
            moved = sum(int(c.get("messageTokens") or 0) for c in taken)
            record.total_tokens_observed += moved
            record.buffered_chunks = left
            if tokens is None or tokens - moved < record.last_buffered_at_tokens * 0.5:  # a stale boundary: anew
                record.last_buffered_at_tokens = 0
            if record.origin_type == "initialization":
                record.origin_type = "observation"
            record.updated_at = utc_now()
            return record

        async def _swap() -> tuple[OMRecord, list[str]] | None:
            # A chunk a buffering cycle adds meanwhile makes the first compare-and-set fail: read again and activate
            record = await compare_and_set(records, key, _activated)
            if record is None:
                return None
            extras: dict[str, str] = {}
            hints = taken[-1]
            if isinstance(hints.get("currentTask"), str):
                extras["currentTask"] = hints["currentTask"]
            if isinstance(hints.get("suggestedContinuation"), str):
                extras["suggestedResponse"] = hints["suggestedContinuation"]
            titles = [c["threadTitle"] for c in taken if isinstance(c.get("threadTitle"), str)]
            if titles:
                extras["threadTitle"] = titles[-1]
            observed = await store.get_messages_by_id(record.observed_message_ids)
            if observed:
                await self._mark_observed(store, thread_id, observed, extras, retitle=config.thread_title)
            documents = [v["working-memory"] for c in taken if isinstance(v := c.get("extractedValues"), dict)
                         and isinstance(v.get("working-memory"), str)]
            return record, documents[-1:]

        with operation_span("threadmind.om.activate", "update_memory", thread_id=thread_id, resource_id=resource_id):
            swapped = await _swap()
        if swapped is None:
            return False
        record, documents = swapped
        if documents and working_memory is not None:  # the newest working memory the activated chunks hold
            await self._write_working_memory(working_memory, thread_id, resource_id, documents[0])
        if record.observation_token_count >= config.observation_tokens:
            model = self.model_for(config, thread_id, resource_id, reflector=True) or \
                self.model_for(config, thread_id, resource_id)
            if model is not None:
                await self.reflections.at_threshold(config, thread_id, resource_id, record, model)
        else:
            self.reflections.ahead(config, thread_id, resource_id, record)
        return True

    async def activate_reflection(self, config: ObservationalMemoryConfig, thread_id: str,
                                  resource_id: str | None) -> bool:
        """Make the reflection computed ahead the next generation before the reflection threshold (the thread
        sat idle, or the agent's model changed): no model call. True if a new generation was made."""
        record = await self.records.current(self.key(config, thread_id, resource_id))
        if record is None or record.buffered_reflection is None or record.reflected_line_count is None:
            return False
        return await self.reflections.now(config, thread_id, resource_id, record, None)

    def inflight(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None) -> bool:
        """Whether an observation for this key is running now."""
        return self.key(config, thread_id, resource_id) in self._inflight

    # -- the Observer and the Reflector -------------------------------------------------------------
    async def call_model(self, model: LanguageModel, system: str, prompt: str, what: str,
                    attachments: Sequence[FilePart] = ()) -> str:
        """One model call with bounded retries (exponential backoff); raises the last error. ``attachments``
        follow the prompt in its user message."""
        from ..models import ModelRequest

        asked = Message.user(prompt)
        if attachments:
            asked = msgspec.structs.replace(asked, content=msgspec.structs.replace(
                asked.content, parts=[*asked.content.parts, *attachments]))
        delay = self.backoff
        for attempt in range(1, self.retries + 1):
            try:
                with operation_span(f"threadmind.om.{what}", "chat", gen_ai__request__model=model.model_id):
                    response = await model.generate(ModelRequest(system=[system], messages=[asked]))
                text = (response.text or "").strip()
                if not text:
                    raise ThreadmindError(f"the {what} returned no text", code="THREADMIND_OM_EMPTY")
                return text
            except Exception:
                self.observer_failures += 1
                if attempt == self.retries:
                    raise
                await anyio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ask_observer(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                            model: LanguageModel, previous: str, messages: Sequence[Message], title: str | None,
                            working_memory: WorkingMemoryConfig | None) -> tuple[str, dict[str, str], str | None]:
        """One Observer call over ``messages`` after ``previous`` observations: its observation lines, the tagged
        extras (the title only with ``threadTitle``; ``title``: the one it gave last), and the working memory it
        rewrote (``working_memory``: managed by observational memory)."""
        previous = newest_within(previous, config.previous_observer_tokens, self.counter)
        prompt = (f"Previous observations:\n{previous or '(none)'}\n\n"
                  f"New messages to observe:\n{observer_transcript(messages)}")
        system = OBSERVER_INSTRUCTIONS
        if config.thread_title:
            system += THREAD_TITLE_INSTRUCTIONS
            if title:
                prompt = f"Prior thread-title: {title}\n\n{prompt}"
        managed = ManagedWorkingMemory(working_memory, await self._current_working_memory(
            working_memory, thread_id, resource_id)) if working_memory is not None else None
        if managed is not None:
            system += "\n\n" + managed.section()
        output = await self.call_model(model, system + custom_instructions(config.instruction), prompt, "observer",
                                  observer_attachments(messages, config.observe_attachments))
        new_working_memory = managed.take(output) if managed is not None else None
        if managed is not None:
            output = managed.strip(output)
        observed, extras = split_observer_output(output)
        if not config.thread_title:
            extras.pop("threadTitle", None)
        return observed, extras, new_working_memory

    async def _observe_once(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                            working_memory: WorkingMemoryConfig | None = None, *, wait: bool = True) -> bool:
        """One observation round, under the Observer's claim: buffered chunks made active first, then snapshot →
        Observer → commit (→ Reflector → new generation). True if observed, or (``wait``) if another holder's
        cycle left nothing to observe. With ``working_memory`` the Observer also rewrites it
        (``observation.manageWorkingMemory``)."""
        async with self.claim("observer", self.key(config, thread_id, resource_id), wait=wait) as held:
            if held is False:
                return False
            # Buffered chunks hold the oldest messages: they go first. A turn activating some of them at once (it
            # takes no claim) makes this activation's compare-and-set fail: read again and activate what is left.
            for _ in range(_ACTIVATION_ROUNDS):
                current = await self.records.current(self.key(config, thread_id, resource_id))
                if current is None or not current.buffered_chunks:
                    break
                await self.activate(config, thread_id, resource_id, None, working_memory)
            observed = await self._observe_claimed(config, thread_id, resource_id, working_memory)
            return observed or held is None

    async def _observe_claimed(self, config: ObservationalMemoryConfig, thread_id: str, resource_id: str | None,
                               working_memory: WorkingMemoryConfig | None) -> bool:
        """:meth:`_observe_once` with the Observer's claim held."""
        key = self.key(config, thread_id, resource_id)
        store = self._store
        records = self.records

        async def _snapshot() -> _Snapshot:
            record = await records.current(key)
            messages = await self._unobserved(store, config, thread_id, resource_id, record)
            title = None
            if config.thread_title:
                thread = await store.get_thread(thread_id)
                mastra = (thread.metadata or {}).get("mastra") if thread is not None else None
                om = mastra.get("om") if isinstance(mastra, dict) else None
                prior = om.get("threadTitle") if isinstance(om, dict) else None
                title = prior if isinstance(prior, str) else None
            return _Snapshot(record=record, messages=messages, tokens=self.counter.count_messages(messages),
                             title=title)

        snap = await _snapshot()
        if snap.record is not None and snap.record.buffered_chunks:
            return False  # chunks still hold some of these messages (they were given to the Observer once already)
        threshold = config.message_threshold(snap.record.observation_token_count if snap.record is not None else 0)
        if snap.tokens < threshold or not snap.messages:  # observe at the threshold (reference: >=)
            return False
        model = self.model_for(config, thread_id, resource_id)
        if model is None:
            _log.warning("observational memory for %s has no model (set observationalMemory.model)", key)
            return False
        previous = snap.record.active_observations if snap.record is not None else ""
        observed, extras, new_working_memory = await self._ask_observer(
            config, thread_id, resource_id, model, previous, snap.messages, snap.title, working_memory)
        block = _grouped(config, f"{date_header(snap.messages)}\n{observed}", snap.messages)

        def _observed(current: OMRecord | None) -> OMRecord | None:
            if not same_record(current, snap.record) and (
                    current is None or current.buffered_chunks or not _still_unobserved(current, snap.messages)):
                return None  # someone else observed meanwhile: drop this result, never duplicate
            now = utc_now()
            last = max(m.created_at for m in snap.messages)
            ids = [m.id for m in snap.messages]
            if current is not None and current.last_observed_at == last:
                ids = [*current.observed_message_ids, *ids]  # ties at the cursor stay excluded by id
            text = f"{current.active_observations.rstrip()}\n\n{block}" if current and current.active_observations \
                else block
            if current is None:
                record = OMRecord(id=str(uuid.uuid4()), lookup_key=key, scope=config.scope,
                                  resource_id=resource_id, thread_id=thread_id if config.scope == "thread" else None,
                                  origin_type="observation", config=_config_json(config), created_at=now,
                                  updated_at=now)
            else:
                record = current.copy()
                if record.origin_type == "initialization":
                    record.origin_type = "observation"
            record.active_observations = text
            record.last_observed_at = last
            record.observed_message_ids = ids
            record.observation_token_count = self.counter.count_text(text)
            record.total_tokens_observed += snap.tokens
            record.pending_message_tokens = 0
            record.updated_at = now
            return record

        with operation_span("threadmind.om.commit_observation", "update_memory", thread_id=thread_id,
                            resource_id=resource_id):
            committed = await compare_and_set(records, key, _observed)
            if committed is None:
                return False
            await self._mark_observed(store, thread_id, snap.messages, extras, retitle=config.thread_title)
        if new_working_memory is not None and working_memory is not None:
            await self._write_working_memory(working_memory, thread_id, resource_id, new_working_memory)
        if committed.observation_token_count >= config.observation_tokens:
            reflector = self.model_for(config, thread_id, resource_id, reflector=True) or model
            await self.reflections.at_threshold(config, thread_id, resource_id, committed, reflector)
        else:
            self.reflections.ahead(config, thread_id, resource_id, committed)
        return True

    async def _current_working_memory(self, working_memory: WorkingMemoryConfig, thread_id: str,
                                      resource_id: str | None) -> str | None:
        """The working memory the Observer is shown (None when there is none, or no resource to read it by)."""
        try:
            return await read_working_memory(self._door, MemoryConfig(working_memory=working_memory), thread_id,
                                             resource_id)
        except ValidationError:  # resource scope without a resource id
            return None

    async def _write_working_memory(self, working_memory: WorkingMemoryConfig, thread_id: str,
                                    resource_id: str | None, text: str) -> None:
        """The Observer's working memory, written through its owner as the tool writes it (never lost)."""
        config = MemoryConfig(working_memory=working_memory)
        try:
            scope, key = scope_key(config, thread_id, resource_id)
            await write_working_memory(self._door, scope, key, lambda old: None if old == text else text,
                                       owner=resource_id, thread_id=thread_id)
        except (ValidationError, ThreadmindError):
            _log.warning("the Observer's working memory for %s was not written", thread_id, exc_info=True)

    async def _mark_observed(
        self, store: Door, thread_id: str, messages: Sequence[Message], extras: dict[str, str], *,
        retitle: bool = False,
    ) -> None:
        """After an observation: seal the observed messages and note the cursor (and the Observer's extras) in
        ``thread.metadata.mastra.om`` (reference §8.1); with ``retitle`` (``observation.threadTitle``), the title
        the Observer gave becomes the thread's as Mastra's ``resolveThreadTitleUpdate`` decides (trimmed, 3
        characters or more, not the current one, the title not pinned). Straight to the store, each a
        read-modify-write in one transaction: the write counts make the thread actors drop their caches."""
        updates = sealed_updates(messages)
        if updates:
            await store.update_messages(updates)
        last = max(messages, key=lambda m: m.created_at)

        def note(thread: Thread) -> ThreadChange:
            mastra = (thread.metadata or {}).get("mastra")
            mastra = dict(mastra) if isinstance(mastra, dict) else {}
            om = mastra.get("om")
            om = dict(om) if isinstance(om, dict) else {}
            om.update(extras)
            om["lastObservedAt"] = to_iso(last.created_at)
            om["lastObservedMessageCursor"] = {"createdAt": to_iso(last.created_at), "id": last.id}
            mastra["om"] = om
            title = extras.get("threadTitle", "").strip() if retitle else ""
            pinned = (thread.metadata or {}).get("titlePinned") is True
            if len(title) < 3 or pinned or title == (thread.title or "").strip():
                return ThreadChange(metadata={"mastra": mastra})
            return ThreadChange(title=title, metadata={"mastra": mastra})

        try:
            await store.modify_thread(thread_id, note)  # one transaction: no other metadata write is lost
        except ThreadNotFound:
            return


def _still_unobserved(record: OMRecord | None, messages: Sequence[Message]) -> bool:
    """Whether a chunk of ``messages`` computed before ``record`` changed still fits it: none of them became observed
    (behind its cursor) or part of another chunk meanwhile. A turn activating older chunks, or a reflection, leaves
    a chunk of newer messages valid; it is added instead of being computed again."""
    if record is None:
        return False
    held = {mid for chunk in record.buffered_chunks for mid in chunk.get("messageIds") or ()}
    cursor, seen = record.last_observed_at, set(record.observed_message_ids)
    return all(m.id not in held and (cursor is None or m.created_at > cursor or
                                     (m.created_at == cursor and m.id not in seen)) for m in messages)


def _grouped(config: ObservationalMemoryConfig, block: str, messages: Sequence[Message]) -> str:
    """In ``retrieval`` mode, a new block of observations as an observation group naming its messages."""
    return wrap_in_group(block, message_range(messages)) if config.retrieval_options[0] and messages else block


def _config_json(config: ObservationalMemoryConfig) -> dict[str, Any]:
    model = config.model
    model_id = model if isinstance(model, str) else getattr(model, "model_id", None)
    return {
        "scope": config.scope,
        "model": model_id,
        "observation": {"messageTokens": config.message_tokens, "bufferTokens": config.buffer_tokens,
                        "blockAfter": config.block_after},
        "reflection": {"observationTokens": config.observation_tokens},
    }
