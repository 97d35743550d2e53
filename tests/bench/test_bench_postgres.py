"""bench_postgres keeps running: a tiny workload on the session's cluster, every figure present and sane."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench import bench_postgres  # noqa: E402

pytestmark = pytest.mark.bench  # benchmark smoke tests: CI's second step (pytest -m 'slow or bench')


def test_bench_postgres_prints_every_figure(pg_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bench_postgres.main(["--threads", "4", "--turns", "3", "--recalls", "10", "--queries", "6", "--dsn",
                         pg_cluster.dsn()])
    report = json.loads(capsys.readouterr().out)
    assert report["workload"]["messages"] == 24
    for phase in ("save_sequential", "save_concurrency_16"):
        for path in ("memory", "store", "plain_asyncpg"):
            figures = report[phase][path]
            assert figures["messages"] == 24 and figures["msgs_per_s"] > 0 and figures["p99_ms"] >= figures["p50_ms"]
        for path in ("memory", "store"):  # the 12 saves, in as many statements or fewer
            groups = report[phase][path]["group_commit"]
            assert groups["saves"] == 12 and 1 <= groups["statements"] <= 12 and groups["largest_group"] >= 1
        assert report[phase]["ratio_store_to_plain_asyncpg"] > 0
    for read in ("memory_recall", "store_thread_with_tail", "plain_asyncpg_last_10"):
        assert report["recall_last_10"][read]["p50_ms"] > 0
    for kind in ("pgvector", "pgvector_hnsw_at_start", "hnsw_over_postgres"):
        semantic = report["semantic"][kind]
        assert semantic["save_concurrency_16"]["msgs_per_s"] > 0
        for scope in ("resource_query", "thread_query"):
            figures = semantic[scope]
            assert figures["queries"] == 6 and figures["recall_at_10"] >= 0.95
            assert figures["index_query_top_10"]["p99_ms"] >= figures["index_query_top_10"]["p50_ms"] > 0
            assert figures["answered_exactly"] + figures["answered_by_ann"] == 6
    databases = pg_cluster.sql("SELECT count(*) FROM pg_database WHERE datname LIKE 'bench%'")
    assert databases.strip() == "0"  # the benchmark dropped what it made
