"""Tracing: every operation, mailbox hop and store transaction is an OpenTelemetry span."""

import os

import anyio
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadmind import Memory, Message
from threadmind.stores import SQLiteStore

provider = TracerProvider()
if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):  # a collector, e.g. http://127.0.0.1:4318
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
recorded = InMemorySpanExporter()  # here: keep the spans to print them
provider.add_span_processor(SimpleSpanProcessor(recorded))
trace.set_tracer_provider(provider)


async def main() -> None:
    async with Memory(storage=SQLiteStore("traced.db")) as memory:
        with trace.get_tracer("my-app").start_as_current_span("handle request"):
            await memory.create_thread(thread_id="t1", resource_id="ada")
            await memory.save_messages([Message.user("Hello", thread_id="t1", resource_id="ada")])
    spans = {span.context.span_id: span for span in recorded.get_finished_spans()}
    for span in sorted(spans.values(), key=lambda s: s.start_time or 0):
        depth, parent = 0, span.parent
        while parent is not None and parent.span_id in spans:
            depth, parent = depth + 1, spans[parent.span_id].parent
        print("  " * depth + span.name, dict(span.attributes or {}).get("gen_ai.conversation.id", ""))


anyio.run(main)
