"""Shared fixtures: asyncio in debug mode, and one OpenTelemetry SDK provider for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_EXPORTER = InMemorySpanExporter()


def _install_provider() -> None:
    # The global provider can be set once per process; every test shares it and clears the exporter.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, bool]]:
    return ("asyncio", {"debug": True})


@pytest.fixture
def span_exporter() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter receiving every span ended during the test."""
    _install_provider()
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture(autouse=True)
def _cached_reads_unless_traced(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread actors answer cached reads at once, and run commands of an idle actor in the caller's task,
    only without an OpenTelemetry SDK; once a test of this session has installed one, every later test
    would take the mailbox path. A test that does not ask for ``span_exporter`` runs the way a process
    without an SDK does (both shortcuts on)."""
    if "span_exporter" not in request.fixturenames:
        monkeypatch.setattr("threadmind.actors._registry.tracing_enabled", lambda: False)
