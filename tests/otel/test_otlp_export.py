"""One agent turn with memory, exported over OTLP/HTTP to a real receiver on 127.0.0.1, arrives as one span tree.

The receiver is a small ``http.server`` that decodes ``ExportTraceServiceRequest`` protobufs. The exporter's
``BatchSpanProcessor`` is attached to the session's global provider (tests/conftest.py) through a detachable
wrapper, so it stops receiving spans when this test ends.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadmind.agent import Agent
from threadmind.embedders._hash import HashEmbedder
from threadmind.memory import Memory
from threadmind.models import ModelResponse, ScriptedModel, ToolCall
from threadmind.stores._sqlite import SQLiteStore
from threadmind.stores._vectors._hnsw import HnswVectorStore

THREAD = "thread-otlp"
RESOURCE = "user-otlp"
# Every piece of conversation text: none of it may appear in any exported attribute.
SECRETS = (
    "zebra passport number 4471",
    "I will remember the zebra passport",
    "what was my passport about zebra",
    "marmalade preference",
    "Your passport note is saved",
)


class _Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (a thread running ``ThreadingHTTPServer``)."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.lock = threading.Lock()
        receiver = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    receiver.requests.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    def spans(self) -> list[ProtoSpan]:
        with self.lock:
            return [span for request in self.requests for rs in request.resource_spans for ss in rs.scope_spans
                    for span in ss.spans]


class _Detachable(SpanProcessor):
    """Forwards to ``inner`` until detached; the SDK provider has no API to remove a processor."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner: SpanProcessor | None = inner

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        if self.inner is not None:
            self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self.inner is not None:
            self.inner.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis) if self.inner is not None else True

    def shutdown(self) -> None:
        inner, self.inner = self.inner, None
        if inner is not None:
            inner.shutdown()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    rec = _Receiver()
    rec.thread.start()
    try:
        yield rec
    finally:
        rec.server.shutdown()
        rec.server.server_close()
        rec.thread.join(timeout=10)


@pytest.fixture
def otlp(span_exporter: InMemorySpanExporter, receiver: _Receiver) -> Iterator[_Detachable]:
    """A BatchSpanProcessor exporting to the receiver, attached to the global provider for this test only."""
    provider = trace.get_tracer_provider()  # installed by the span_exporter fixture
    assert isinstance(provider, TracerProvider)
    processor = _Detachable(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, timeout=10)))
    provider.add_span_processor(processor)
    try:
        yield processor
    finally:
        processor.shutdown()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attrs(span: ProtoSpan) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


def _all_strings(span: ProtoSpan) -> list[str]:
    """Every string a span carries: name, attributes, event names and attributes, link attributes, status."""
    out = [span.name, span.status.message]
    for kv in span.attributes:
        out.append(str(_value(kv.value)))
    for event in span.events:
        out.append(event.name)
        out.extend(str(_value(kv.value)) for kv in event.attributes)
    for link in span.links:
        out.extend(str(_value(kv.value)) for kv in link.attributes)
    return out


async def test_agent_turn_exports_one_span_tree(otlp: _Detachable, receiver: _Receiver, tmp_path: Path) -> None:
    memory = Memory(
        storage=SQLiteStore(tmp_path / "memory.db"),
        vector=HnswVectorStore(tmp_path / "vectors"),
        embedder=HashEmbedder(dim=64),
        options={
            "lastMessages": 6,
            "semanticRecall": {"topK": 2, "messageRange": 1, "scope": "resource"},
            "workingMemory": {"enabled": True, "scope": "resource"},
        },
    )
    model = ScriptedModel([
        "I will remember the zebra passport",
        ModelResponse(tool_calls=[ToolCall(tool_call_id="call-wm-1", tool_name="updateWorkingMemory",
                                           args={"memory": "# Notes\n- marmalade preference"})],
                      finish_reason="tool-calls"),
        "Your passport note is saved",
    ])
    agent = Agent("otlp-agent", "You are terse.", model, memory=memory)
    tracer = trace.get_tracer("tests.otel")
    async with memory:
        await memory.create_thread(thread_id=THREAD, resource_id=RESOURCE)
        await agent.generate("zebra passport number 4471", thread_id=THREAD, resource_id=RESOURCE)
        assert otlp.force_flush()
        before = {span.span_id for span in receiver.spans()}
        with tracer.start_as_current_span("test.turn") as root_span:
            result = await agent.generate("what was my passport about zebra", thread_id=THREAD, resource_id=RESOURCE)
        root_context = root_span.get_span_context()
        assert result.text == "Your passport note is saved"
        # the model saw history, semantic recall and working memory
        seen = model.requests[-1]
        assert any("zebra passport number 4471" in m.text for m in seen.messages)
        assert await memory.get_working_memory(thread_id=THREAD, resource_id=RESOURCE) == \
            "# Notes\n- marmalade preference"
    assert otlp.force_flush()

    trace_id = root_context.trace_id.to_bytes(16, "big")
    root_id = root_context.span_id.to_bytes(8, "big")
    spans = [s for s in receiver.spans() if s.span_id not in before]
    ours = [s for s in spans if s.trace_id == trace_id]
    by_id = {s.span_id: s for s in ours}

    # one root: the test's span; every other span of the trace hangs under it
    roots = [s for s in ours if not s.parent_span_id]
    assert [(r.name, r.span_id) for r in roots] == [("test.turn", root_id)]
    for span in ours:
        depth = 0
        while span.parent_span_id:
            assert span.parent_span_id in by_id, f"{span.name} has a parent that was not exported"
            span = by_id[span.parent_span_id]
            depth += 1
            assert depth < 50
        assert span.span_id == root_id

    def named(prefix: str) -> list[ProtoSpan]:
        return [s for s in ours if s.name.startswith(prefix)]

    (generate,) = named("threadmind.agent.generate")
    assert generate.parent_span_id == root_id
    gen_attrs = _attrs(generate)
    assert gen_attrs["gen_ai.operation.name"] == "chat"
    assert gen_attrs["gen_ai.conversation.id"] == THREAD
    assert gen_attrs["threadmind.thread.id"] == THREAD
    assert gen_attrs["threadmind.resource.id"] == RESOURCE
    assert gen_attrs["gen_ai.agent.name"] == "otlp-agent"

    # the memory operations: history loads and the save (actor hops), semantic recall, the model, the WM tool
    operations = {_attrs(s).get("gen_ai.operation.name") for s in ours}
    assert {"chat", "search_memory"} <= operations
    (query,) = named("threadmind.index.query")
    assert _attrs(query)["threadmind.resource.id"] == RESOURCE
    assert len(named("threadmind.model.generate")) == 2  # the tool-call step and the final text
    (tool,) = named("threadmind.tool.execute")
    assert _attrs(tool)["gen_ai.tool.name"] == "updateWorkingMemory"
    hops = named("threadmind.actor.")
    assert {h.name for h in hops} >= {"threadmind.actor.LoadMessages", "threadmind.actor.SaveMessages"}
    for hop in hops:
        assert isinstance(_attrs(hop)["threadmind.mailbox.depth"], int)
        assert hop.parent_span_id != root_id  # hops are descendants of memory operations, not siblings of them
    stores = named("threadmind.store.")
    assert stores, "the save's group commit is exported"
    assert all(_attrs(s)["db.system.name"] == "sqlite" for s in stores)
    save = next(h for h in hops if h.name == "threadmind.actor.SaveMessages")
    assert any(s.parent_span_id == save.span_id for s in stores)
    # working memory was written under the tool's span (resource actor hop and its commit)
    under_tool = [s for s in ours if s.parent_span_id == tool.span_id]
    assert under_tool

    # shared work (the embedding batch) links to every caller and is a child of its first caller: never a root
    batches = [s for s in spans if s.name == "threadmind.index.batch"]
    assert batches
    for span in batches:
        assert span.links and span.parent_span_id == span.links[0].span_id
        assert span.trace_id == span.links[0].trace_id
        assert _attrs(span)["gen_ai.operation.name"] == "embeddings"
    assert any(link.trace_id == trace_id and link.span_id in by_id for span in batches for link in span.links)

    # no message text anywhere
    for span in spans:
        for text in _all_strings(span):
            for secret in SECRETS:
                assert secret not in text, (span.name, secret)
        assert not any(key.startswith("gen_ai.prompt") or key.startswith("gen_ai.completion")
                       for key in _attrs(span))
