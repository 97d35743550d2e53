"""Spans through Memory: the caller's trace carries across mailboxes and group commits; no message text leaks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadmind import Memory
from threadmind.stores import SQLiteStore

from ._support import StoreFactory, msg

SECRET = "the-launch-code-is-0000"


def _by_id(spans: Sequence[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {span.context.span_id: span for span in spans}


def _chain(span: ReadableSpan, index: dict[int, ReadableSpan]) -> list[ReadableSpan]:
    """The span's ancestors, nearest first (only those that were exported)."""
    out: list[ReadableSpan] = []
    parent = span.parent
    while parent is not None and parent.span_id in index:
        span = index[parent.span_id]
        out.append(span)
        parent = span.parent
    return out


def _threadmind(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith("threadmind.")]


async def _started_work_done(exporter: InMemorySpanExporter) -> None:
    """Wait for the work a start begins in the background (the keyword index's catch-up), whose spans are its own
    trace's, not a caller's."""
    with anyio.fail_after(5):
        while not any(s.name == "threadmind.memory.keyword_catch_up"  # noqa: ASYNC110 - spans are polled
                      for s in exporter.get_finished_spans()):
            await anyio.sleep(0.01)


async def test_save_spans_descend_from_caller(tmp_path: Path, span_exporter: InMemorySpanExporter) -> None:
    async with Memory(storage=SQLiteStore(tmp_path / "spans.db")) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await _started_work_done(span_exporter)
        span_exporter.clear()
        tracer = trace.get_tracer("test")
        with tracer.start_as_current_span("caller") as caller:
            await memory.save_messages([msg("a", text=SECRET), msg("b", text=SECRET, ms=1)])
        spans = span_exporter.get_finished_spans()  # before aclose(), whose final flush has no caller
    index = _by_id(spans)
    trace_id = caller.get_span_context().trace_id
    names = {s.name for s in _threadmind(spans)}
    assert {"threadmind.memory.save_messages", "threadmind.actor.SaveMessages",
            "threadmind.store.group_commit"} <= names, names
    for span in _threadmind(spans):
        assert span.context.trace_id == trace_id, span.name
        assert caller.get_span_context().span_id in {a.context.span_id for a in _chain(span, index)}, span.name
    op = next(s for s in spans if s.name == "threadmind.memory.save_messages")
    assert op.attributes is not None
    assert op.attributes["gen_ai.operation.name"] == "upsert_memory"
    assert op.attributes["gen_ai.conversation.id"] == "t1"
    assert op.attributes["threadmind.thread.id"] == "t1"
    actor = next(s for s in spans if s.name == "threadmind.actor.SaveMessages")
    assert op in _chain(actor, index)
    store = next(s for s in spans if s.name == "threadmind.store.group_commit")
    assert store.attributes is not None and store.attributes["db.system.name"] == "sqlite"
    for span in spans:
        for value in (span.attributes or {}).values():
            assert SECRET not in str(value), span.name
        for event in span.events:
            assert SECRET not in str(event.attributes), span.name


async def test_every_public_operation_has_a_span(make_store: StoreFactory,
                                                 span_exporter: InMemorySpanExporter) -> None:
    async with Memory(storage=make_store()) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg("a")])
        await memory.recall("t1")
        await memory.update_messages([{"id": "a", "content": {"content": "b"}}])
        await memory.delete_messages(["a"])
        await memory.delete_thread("t1")
    ops = {s.name: (s.attributes or {}).get("gen_ai.operation.name") for s in span_exporter.get_finished_spans()}
    assert ops["threadmind.memory.create_thread"] == "update_memory"
    assert ops["threadmind.memory.save_messages"] == "upsert_memory"
    assert ops["threadmind.memory.recall"] == "search_memory"
    assert ops["threadmind.memory.update_messages"] == "update_memory"
    assert ops["threadmind.memory.delete_messages"] == "delete_memory"
    assert ops["threadmind.memory.delete_thread"] == "delete_memory"


async def test_concurrent_saves_no_threadmind_root(tmp_path: Path, span_exporter: InMemorySpanExporter) -> None:
    async with Memory(storage=SQLiteStore(tmp_path / "spans.db")) as memory:
        for i in range(16):
            await memory.create_thread(resource_id="r1", thread_id=f"t{i}")
        await _started_work_done(span_exporter)
        span_exporter.clear()
        tracer = trace.get_tracer("test")
        callers: dict[int, int] = {}

        async def _caller(i: int) -> None:
            with tracer.start_as_current_span(f"caller-{i}") as span:
                callers[span.get_span_context().span_id] = span.get_span_context().trace_id
                await memory.save_messages([msg(f"m{i}-{j}", f"t{i}", ms=j, text=SECRET) for j in range(3)])

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(_caller, i)
        spans = span_exporter.get_finished_spans()  # before aclose(), whose final flush has no caller
    index = _by_id(spans)
    ours = _threadmind(spans)
    assert ours
    linked: set[int] = set()
    for span in ours:
        assert span.parent is not None, f"{span.name} is a root"
        ancestors = {a.context.span_id for a in _chain(span, index)}
        assert ancestors & set(callers), f"{span.name} does not descend from a caller"
        assert span.context.trace_id in set(callers.values())
        if span.name == "threadmind.store.group_commit":
            for link in span.links:
                linked.add(link.context.span_id)
                assert link.context.trace_id in set(callers.values())
            assert SECRET not in str(span.attributes)
    # every caller's own actor span is in that caller's trace
    actor_spans = [s for s in ours if s.name == "threadmind.actor.SaveMessages"]
    assert len(actor_spans) == 16
    assert {next(a.context.span_id for a in _chain(s, index) if a.context.span_id in callers)
            for s in actor_spans} == set(callers)
    # group commits shared by several callers link to the callers' (descendant) spans
    groups = [s for s in ours if s.name == "threadmind.store.group_commit"]
    shared = [g for g in groups if len(g.links) > 1]
    assert shared, "16 concurrent saves on 16 threads should share at least one group commit"
    for group in shared:
        linked_callers = set()
        for link in group.links:
            assert link.context.span_id in index
            linked_callers |= {a.context.span_id for a in _chain(index[link.context.span_id], index)} & set(callers)
        assert len(linked_callers) == len(group.links)


async def test_background_vector_work_never_starts_a_new_root(
    tmp_path: Path, span_exporter: InMemorySpanExporter
) -> None:
    """Write-behind vector rows and vector deletes run in the index actor's own task; under a caller span they
    still belong to the caller's trace (SPEC §8: no new root while a caller span exists)."""
    from threadmind.embedders import HashEmbedder
    from threadmind.stores import HnswVectorStore

    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), vector=HnswVectorStore(tmp_path / "v"),
                      embedder=HashEmbedder(dim=32), options={"semanticRecall": True}) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await _started_work_done(span_exporter)
        span_exporter.clear()
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            await memory.save_messages([msg("a", text="hello there"), msg("b", text="general kenobi", ms=1)])
            await memory.delete_messages(["a"])  # its vectors go in the index actor's task
            # the write-behind delay passes while the caller's span is open
            background = {"threadmind.index.write_behind", "threadmind.index.delete_messages"}
            with anyio.fail_after(5):
                while not background <= {s.name for s in span_exporter.get_finished_spans()}:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            spans = span_exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert "threadmind.index.write_behind" in names and "threadmind.index.delete_messages" in names, names
    trace_id = caller.get_span_context().trace_id
    for span in _threadmind(spans):
        assert span.parent is not None, f"{span.name} started a new root"
        assert span.context.trace_id == trace_id, span.name
    index = _by_id(spans)
    behind = next(s for s in spans if s.name == "threadmind.index.write_behind")
    batches = {s.context.span_id for s in spans if s.name == "threadmind.index.batch"}
    assert {link.context.span_id for link in behind.links} & batches  # linked to the batches it carries
    delete = next(s for s in spans if s.name == "threadmind.index.delete_messages")
    assert delete.attributes is not None and delete.attributes["gen_ai.operation.name"] == "delete_memory"
    commits = [s for s in spans if s.name == "threadmind.store.group_commit" and delete in _chain(s, index)]
    assert commits, "the vector delete's commit descends from its span"


async def test_actor_store_and_operation_spans_name_their_thread_and_resource(
    tmp_path: Path, span_exporter: InMemorySpanExporter
) -> None:
    options = {"workingMemory": {"enabled": True}}
    async with Memory(storage=SQLiteStore(tmp_path / "m.db"), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        span_exporter.clear()
        await memory.save_messages([msg("a")])
        await memory.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# Notes")
        await memory.recall("t1", per_page=5, page=1)  # a page the actor's tail does not hold: a store read
        assert await memory.get_system_message(thread_id="t1", resource_id="r1")
        spans = span_exporter.get_finished_spans()
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    save = by_name["threadmind.actor.SaveMessages"][0].attributes or {}
    assert (save["threadmind.thread.id"], save["gen_ai.conversation.id"]) == ("t1", "t1")
    resource = by_name["threadmind.actor.ModifyResource"]
    assert any((s.attributes or {}).get("threadmind.resource.id") == "r1" for s in resource)
    op = by_name["threadmind.memory.save_messages"][0].attributes or {}
    assert op["threadmind.resource.id"] == "r1"
    reads = by_name["threadmind.store.read"]
    assert reads and all((s.attributes or {})["db.system.name"] == "sqlite" for s in reads)
    system = by_name["threadmind.memory.get_system_message"][0].attributes or {}
    assert (system["gen_ai.operation.name"], system["threadmind.thread.id"]) == ("search_memory", "t1")


def _op_spans(spans: Sequence[ReadableSpan], operation: str) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == operation]


async def test_semantic_recall_spans_name_the_conversation(tmp_path: Path,
                                                           span_exporter: InMemorySpanExporter) -> None:
    """Resource-scoped semantic recall searches by resource, but the call names a thread: every span says so."""
    from threadmind.embedders import HashEmbedder
    from threadmind.stores import HnswVectorStore

    options = {"semanticRecall": {"topK": 2, "messageRange": 0, "scope": "resource"}}
    async with Memory(storage=SQLiteStore(tmp_path / "s.db"), vector=HnswVectorStore(tmp_path / "v"),
                      embedder=HashEmbedder(dim=32), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.create_thread(resource_id="r1", thread_id="t2")
        await memory.save_messages([msg("a", "t2", text="flights to tokyo in april")])
        span_exporter.clear()
        await memory.recall("t1", resource_id="r1", vector_search_string="tokyo flights")
        spans = span_exporter.get_finished_spans()
    searches = _op_spans(spans, "search_memory")
    assert {s.name for s in searches} >= {"threadmind.memory.recall", "threadmind.index.query"}
    for span in searches:
        attributes = span.attributes or {}
        assert attributes.get("gen_ai.conversation.id") == "t1", span.name
        assert attributes.get("threadmind.resource.id") == "r1", span.name
    for span in spans:
        if span.name.startswith("threadmind.actor."):
            assert (span.attributes or {}).get("gen_ai.conversation.id") == "t1", span.name


async def test_every_write_of_an_agent_turn_has_its_span(tmp_path: Path,
                                                         span_exporter: InMemorySpanExporter) -> None:
    """Persist, working memory, the token boundary and the title of one turn each show as a memory operation
    inside the caller's trace, with the conversation and resource ids."""
    from threadmind.agent import Agent
    from threadmind.models import ModelResponse, ScriptedModel, ToolCall

    options = {"lastMessages": 20, "messageHistory": {"maxTokens": 120, "atMaxRemoveTokens": 40},
               "workingMemory": {"enabled": True}, "generateTitle": True}
    model = ScriptedModel([
        ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory", {"memory": "# User\n- name: Ada\n"})]),
        "Nice to meet you, Ada. " + "word " * 40,
        "A title",
    ])
    async with Memory(storage=SQLiteStore(tmp_path / "a.db"), options=options) as memory:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        await memory.save_messages([msg(f"old{i}", text="older history " * 20, ms=i) for i in range(6)])
        span_exporter.clear()
        with trace.get_tracer("test").start_as_current_span("request") as caller:
            await Agent("a", "Be brief.", model, memory=memory).generate("Hi, I'm Ada", thread_id="t1",
                                                                         resource_id="r1")
        await memory.aclose()  # waits for the title
        spans = span_exporter.get_finished_spans()
    index = _by_id(spans)
    writes = {s.name: s for s in _op_spans(spans, "upsert_memory") + _op_spans(spans, "update_memory")}
    assert {"threadmind.memory.save_messages", "threadmind.memory.update_working_memory",
            "threadmind.memory.advance_boundary", "threadmind.memory.set_title"} <= set(writes), sorted(writes)
    for name in ("threadmind.memory.save_messages", "threadmind.memory.update_working_memory",
                 "threadmind.memory.advance_boundary", "threadmind.memory.set_title"):
        span = writes[name]
        attributes = span.attributes or {}
        assert attributes.get("gen_ai.conversation.id") == "t1", name
        assert attributes.get("threadmind.resource.id") == "r1", name
        assert caller.get_span_context().span_id in {a.context.span_id for a in _chain(span, index)}, name
    saved = writes["threadmind.memory.save_messages"]
    actor = [s for s in spans if s.name == "threadmind.actor.SaveMessages"]
    assert any(saved in _chain(s, index) for s in actor)


async def test_observations_are_traced_as_memory_writes(tmp_path: Path,
                                                        span_exporter: InMemorySpanExporter) -> None:
    from threadmind.agent import Agent
    from threadmind.memory import MemoryConfig, ObservationalMemoryConfig
    from threadmind.models import ScriptedModel

    observer = ScriptedModel(iter(lambda: "* observed", None))
    config = MemoryConfig(observational_memory=ObservationalMemoryConfig(model=observer, message_tokens=30))
    async with Memory(storage=SQLiteStore(tmp_path / "om.db"), options=config) as memory:
        span_exporter.clear()
        with trace.get_tracer("test").start_as_current_span("request") as caller:
            agent = Agent("a", "Be brief.", ScriptedModel(["ok " * 30, "ok " * 30]), memory=memory)
            await agent.generate("tell me " * 30, thread_id="t1", resource_id="r1")
            await agent.generate("more " * 30, thread_id="t1", resource_id="r1")
        await memory.aclose()
        spans = span_exporter.get_finished_spans()
    index = _by_id(spans)
    commits = [s for s in _op_spans(spans, "update_memory") if s.name == "threadmind.om.commit_observation"]
    assert commits
    for span in commits:
        assert (span.attributes or {}).get("gen_ai.conversation.id") == "t1"
        assert caller.get_span_context().span_id in {a.context.span_id for a in _chain(span, index)}
