"""WorkingMemoryState (``workingMemory.useStateSignals``): working memory reaches the model as a state signal, not
in the system prompt, so the prompt stays the same from turn to turn (provider prompt caches keep hitting).

As ``@mastra/memory`` 1.31's ``WorkingMemoryStateProcessor`` with ``@mastra/core`` 1.71's state-signal runner, before
every model call of a turn:

* the stored working memory (trimmed; none: nothing) gets a cache key, ``sha256:`` of its format, a NUL and the
  text;
* the turn's messages are searched for this thread's ``working-memory`` state signals: when one of them is a
  snapshot and the thread's tracking (``metadata.mastra.stateSignals["working-memory"]``) already holds this key,
  the model has it and nothing is sent;
* otherwise a signal is added to the turn (and stored with it, as a ``role: "signal"`` message): in Markdown
  mode, when a snapshot is in the window, a **delta**: the unified-diff hunks (no context lines) from the last
  state the window holds to the new text, with ``patch="unified-diff"``; else a full **snapshot**. The thread's
  tracking gets the new key, mode, version and signal ids.

The hunks are computed with Python's ``difflib`` where Mastra uses jsdiff: the header convention is jsdiff's
(``@@ -old,count +new,count @@``, an insertion numbered by the line it precedes); for an edit with several equally
short diffs the two libraries may choose different hunks, which describe the same change.
"""

from __future__ import annotations

import difflib
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .._config import MemoryConfig
from .._results import WorkingMemoryTemplate
from ..codecs import Message, Thread
from ..codecs._time import to_iso, utc_now
from ._access import MemoryAccess
from ._protocol import ProcessInputStepArgs
from ._signals import add_signal, state_of, state_tracking, with_state_tracking

__all__ = ("WORKING_MEMORY_STATE_ID", "WorkingMemoryState", "markdown_delta", "state_cache_key")

WORKING_MEMORY_STATE_ID = "working-memory"
TemplateProvider = Callable[[MemoryConfig], WorkingMemoryTemplate | None]
TrackingChange = Callable[[Mapping[str, Any] | None], Mapping[str, Any]]
TrackingWriter = Callable[[str, TrackingChange], Awaitable[object]]


def state_cache_key(format_: str, data: str) -> str:
    """Mastra's ``stableWorkingMemoryCacheKey``: ``sha256:`` + hex of the format, a NUL and the text."""
    return "sha256:" + hashlib.sha256(format_.encode() + b"\0" + data.encode("utf-8", "surrogatepass")).hexdigest()


def _lines(text: str) -> list[str]:
    """Lines as jsdiff's ``diffLines`` cuts them: each with its ``\\n``, the last one without when it has none."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def markdown_delta(prior: str, contents: str) -> str:
    """The ``@@`` hunks (no context, no file header, no end-of-file notes) that turn ``prior`` into ``contents``."""
    old, new = _lines(prior), _lines(contents)
    hunks: list[str] = []
    pending: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            _flush(pending, old, new, hunks)
        else:
            pending.append((tag, i1, i2, j1, j2))
    _flush(pending, old, new, hunks)
    return "\n".join(hunks)


def _flush(pending: list[tuple[str, int, int, int, int]], old: list[str], new: list[str], hunks: list[str]) -> None:
    if not pending:
        return
    start_old, start_new = pending[0][1], pending[0][3]
    removed = [line for _, i1, i2, _, _ in pending for line in old[i1:i2]]
    added = [line for _, _, _, j1, j2 in pending for line in new[j1:j2]]
    body = ["-" + line.removesuffix("\n") for line in removed] + ["+" + line.removesuffix("\n") for line in added]
    hunks.append("\n".join([f"@@ -{start_old + 1},{len(removed)} +{start_new + 1},{len(added)} @@", *body]))
    pending.clear()


class WorkingMemoryState:
    """Processor ``working-memory-state`` (see the module docstring).

    :param storage: reads the thread and the resource (the memory's actor access).
    :param scope: ``resource`` or ``thread`` working memory.
    :param template_provider: the template (its format) for the run's config.
    :param write_tracking: records the thread's new tracking under the thread's owner: given the thread id and a
        function from the metadata as stored to the metadata patch.
    """

    id = "working-memory-state"
    name = "WorkingMemoryState"

    def __init__(self, storage: MemoryAccess, scope: str, template_provider: TemplateProvider,
                 write_tracking: TrackingWriter) -> None:
        self.storage = storage
        self.scope = scope
        self.template_provider = template_provider
        self.write_tracking = write_tracking

    async def process_input_step(self, args: ProcessInputStepArgs) -> None:
        context = args.context
        thread_id = context.thread_id or args.message_list.thread_id
        resource_id = context.resource_id or args.message_list.resource_id
        template = self.template_provider(context.memory_config)
        if not thread_id or not resource_id or template is None:
            return None
        thread = await self.storage.get_thread(thread_id)
        contents = (await self._stored(thread, resource_id) or "").strip()
        if not contents:
            return None
        key = state_cache_key(template.format, contents)
        window = [(m, state) for m in args.message_list.get_all()
                  if (state := state_of(m, WORKING_MEMORY_STATE_ID, thread_id)) is not None]
        snapshot_at = max((i for i, (_, state) in enumerate(window) if state.get("mode") == "snapshot"), default=-1)
        tracking = state_tracking(thread.metadata if thread is not None else None, WORKING_MEMORY_STATE_ID) or {}
        if snapshot_at >= 0 and tracking.get("currentCacheKey") == key:
            return None
        mode, text, extra = "snapshot", contents, {}
        if template.format == "markdown" and snapshot_at >= 0:
            prior = _prior(window, snapshot_at)
            if prior is not None:
                delta = markdown_delta(prior, contents)
                mode, text, extra = "delta", delta, {"delta": delta}
        # Mastra's applyStateSignal: the same state as the tracking's, with a copy in the window, is not resent.
        copied = any(state.get("cacheKey") == key and state.get("mode") == mode for _, state in window)
        same = tracking.get("currentCacheKey") == key and (
            tracking.get("currentMode") == mode or (not tracking.get("currentMode") and copied))
        if same and copied:
            return None
        stored = tracking.get("version")
        previous: int = stored if isinstance(stored, int) else 0
        version = (previous or 1) if same else previous + 1
        attributes: dict[str, Any] = {"format": template.format, "scope": self.scope}
        if mode == "delta":
            attributes["patch"] = "unified-diff"
        state = {"id": WORKING_MEMORY_STATE_ID, "cacheKey": key, "mode": mode, "threadId": thread_id,
                 "version": version}
        signal = add_signal(args.message_list, str(uuid.uuid4()), thread_id, resource_id, text, {
            "type": "state", "tagName": WORKING_MEMORY_STATE_ID, "attributes": attributes,
            "metadata": {"state": state, "value": contents, **extra}})
        new_tracking = {
            "currentCacheKey": key, "currentMode": mode, "version": version, "lastSignalId": signal.id,
            "lastSnapshotSignalId": signal.id if mode == "snapshot" else tracking.get("lastSnapshotSignalId"),
            "updatedAt": to_iso(utc_now()),
            "activeCopies": [_copy(m) for m, _ in window] + [_copy(signal)],
        }
        await self.write_tracking(thread_id, lambda metadata: with_state_tracking(
            metadata, WORKING_MEMORY_STATE_ID, new_tracking))
        return None

    async def _stored(self, thread: Thread | None, resource_id: str) -> str | None:
        if self.scope == "thread":
            value = (thread.metadata or {}).get("workingMemory") if thread is not None else None
            return value if isinstance(value, str) else None
        if thread is not None and thread.resource_id != resource_id:
            return None
        resource = await self.storage.get_resource(resource_id)
        return resource.working_memory if resource is not None else None


def _prior(window: list[tuple[Message, dict[str, Any]]], snapshot_at: int) -> str | None:
    """The state the window's signals leave the model with: the last delta's value, else the snapshot's value,
    else the snapshot's text."""
    for message, state in reversed(window[snapshot_at + 1:]):
        if state.get("mode") == "delta":
            value = _value(message)
            if isinstance(value, str):
                return value
            break
    snapshot = window[snapshot_at][0]
    value = _value(snapshot)
    if isinstance(value, str):
        return value
    texts = [getattr(p, "text", None) for p in snapshot.content.parts]
    return "".join(t for t in texts if isinstance(t, str)) or None


def _value(message: Message) -> object:
    signal = (message.content.metadata or {}).get("signal")
    inner = signal.get("metadata") if isinstance(signal, dict) else None
    return inner.get("value") if isinstance(inner, dict) else None


def _copy(message: Message) -> dict[str, Any]:
    signal = (message.content.metadata or {}).get("signal")
    inner = signal.get("metadata") if isinstance(signal, dict) else None
    state = inner.get("state") if isinstance(inner, dict) else None
    state = state if isinstance(state, dict) else {}
    out: dict[str, Any] = {"id": message.id}
    if isinstance(state.get("cacheKey"), str):
        out["cacheKey"] = state["cacheKey"]
    if state.get("mode") in ("snapshot", "delta"):
        out["mode"] = state["mode"]
    if isinstance(state.get("version"), int):
        out["version"] = state["version"]
    return out
