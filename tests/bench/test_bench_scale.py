"""bench_scale keeps running: a tiny workload from 1 and 2 worker processes on SQLite and on the session's cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench import bench_scale  # noqa: E402

pytestmark = pytest.mark.bench  # benchmark smoke tests: CI's second step (pytest -m 'slow or bench')


def test_bench_scale_prints_every_figure(pg_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bench_scale.main(["--procs", "1,2", "--threads", "4", "--turns", "2", "--agent-turns", "4", "--shared-turns", "4",
                      "--queries", "4", "--concurrency", "2", "--dsn", pg_cluster.dsn()])
    report = json.loads(capsys.readouterr().out)
    assert report["workload"]["messages"] == 16
    for kind in ("sqlite", "postgres"):
        for procs in ("1_procs", "2_procs"):
            row = report[kind][procs]
            for rate in ("save_msgs_per_s", "agent_turns_per_s", "shared_thread_turns_per_s",
                         "semantic_save_msgs_per_s", "plain_asyncpg_msgs_per_s", "ratio_to_plain_asyncpg"):
                assert row[rate] > 0, (kind, procs, rate)
            for latency in ("save", "agent_turn", "lease_acquire", "shared_thread_lease_acquire", "recall_last_10",
                            "semantic_query"):
                assert row[latency]["p99_ms"] >= row[latency]["p50_ms"] > 0, (kind, procs, latency)
    databases = pg_cluster.sql("SELECT count(*) FROM pg_database WHERE datname LIKE 'bench%'")
    assert databases.strip() == "0"  # the benchmark dropped what it made
