"""bench_mastra keeps running: a tiny workload through threadmind and the real Mastra packages on the session's
cluster, every phase compared, Mastra's side checked to have done the work (see ``bench_mastra._mastra``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench import bench_mastra  # noqa: E402

pytestmark = [pytest.mark.bench, pytest.mark.timeout(600)]  # a cold npm install; warm runs take seconds


def test_bench_mastra_compares_every_phase(pg_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bench_mastra.main(["--threads", "4", "--turns", "3", "--queries", "6", "--recalls", "10", "--repeat", "1",
                       "--dsn", pg_cluster.dsn()])
    report = json.loads(capsys.readouterr().out)
    assert report["workload"]["messages"] == 24
    expected = {"save_sequential": {"save_msgs_per_s", "save_p50_ms"},
                "save_concurrency_16": {"save_msgs_per_s", "save_p50_ms"},
                "recall_last_10": {"recall_p50_ms"},
                "semantic": {"save_msgs_per_s", "save_p50_ms", "resource_query_p50_ms", "thread_query_p50_ms"}}
    for phase, keys in expected.items():
        assert set(report[phase]["threadmind_advantage"]) == keys
        for system in ("threadmind", "mastra"):
            (run,) = report[phase]["runs"][system]
            assert set(run) == keys and all(value > 0 for value in run.values())
    assert report["versions"]["mastra"]["@mastra/memory"]
    databases = pg_cluster.sql("SELECT count(*) FROM pg_database WHERE datname LIKE 'bench%'")
    assert databases.strip() == "0"  # the benchmark dropped what it made


def test_bench_mastra_on_sqlite_compares_both_durabilities(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    bench_mastra.main(["--backend", "sqlite", "--threads", "4", "--turns", "3", "--queries", "6", "--recalls", "10",
                       "--repeat", "1", "--dir", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "sqlite" and report["workload"]["messages"] == 24
    for phase in ("save_sequential", "save_concurrency_16", "recall_last_10", "semantic"):
        keys = set(report[phase]["runs"]["mastra"][0])
        for system in ("threadmind", "threadmind_full"):
            assert set(report[phase][f"{system}_advantage"]) == keys
            (run,) = report[phase]["runs"][system]
            assert set(run) == keys and all(value > 0 for value in run.values())
    assert set(report["semantic"]["runs"]["mastra"][0]) >= {"resource_query_p50_ms", "thread_query_p50_ms"}
    assert report["versions"]["mastra"]["@mastra/libsql"]
    assert list(tmp_path.iterdir()) == []  # every file it made is gone
