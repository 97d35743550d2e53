"""Without a tracer provider no span is made at all; installing one later turns tracing on."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from threadmind import Memory, Message
from threadmind.stores import InMemoryStore
from threadmind.tracing import tracing_enabled

async def main():
    async with Memory(storage=InMemoryStore()) as memory:
        assert not tracing_enabled()
        await memory.create_thread(thread_id="t", resource_id="r")
        await memory.save_messages([Message.user("hi", thread_id="t", resource_id="r")])
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        assert tracing_enabled()
        await memory.save_messages([Message.user("again", thread_id="t", resource_id="r")])
        names = sorted({s.name for s in exporter.get_finished_spans()})
        print(",".join(names))

anyio.run(main)
"""


def test_spans_appear_once_a_provider_is_installed() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    names = done.stdout.strip().split(",")
    assert "threadmind.memory.save_messages" in names
    assert "threadmind.actor.SaveMessages" in names
