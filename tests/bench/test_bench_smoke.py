"""The benchmarks keep running: a tiny workload through bench_memory, bench_agent and bench_actor, figures checked
for shape."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench import bench_actor, bench_agent, bench_hnsw_segments, bench_machine, bench_memory  # noqa: E402

pytestmark = pytest.mark.bench  # benchmark smoke tests: CI's second step (pytest -m 'slow or bench')


def test_bench_memory_prints_every_phase(capsys: pytest.CaptureFixture[str]) -> None:
    bench_memory.main(["--threads", "6", "--turns", "3", "--queries", "8", "--recalls", "12", "--repeat", "2",
                       "--no-baselines"])
    report = json.loads(capsys.readouterr().out)
    assert report["workload"]["messages"] == 36
    for phase in ("a_save_sequential", "a_save_concurrency_16", "c_save_semantic_concurrency_16"):
        assert report[phase]["messages"] == 36 and report[phase]["msgs_per_s"] > 0
        assert len(report[phase]["runs_msgs_per_s"]) == 2
        assert report[phase]["msgs_per_s"] in report[phase]["runs_msgs_per_s"]
    assert report["b_recall_last_10"]["calls"] == 12
    build = report["c_index_build"]
    assert build["vectors"] == 36 and build["inserted"] == 36 and build["estimated_mb"] > 0
    for scope in ("resource", "thread"):
        figures = report["d_semantic_query"][scope]
        assert figures["queries"] == 8 and 0.0 <= figures["recall_at_10"] <= 1.0
        assert figures["index_query"]["p50_ms"] > 0


def test_bench_memory_runs_its_raw_baselines(capsys: pytest.CaptureFixture[str]) -> None:
    """The baselines run in processes of their own, from scripts in strings: a broken import there surfaces only as
    an ``error`` in the report, so the report is checked for the figures themselves."""
    bench_memory.main(["--threads", "4", "--turns", "2", "--queries", "4", "--recalls", "4", "--phases", "ac"])
    report = json.loads(capsys.readouterr().out)
    raw, ceiling = report["baseline_aiosqlite"], report["ceiling_plain_sqlite3_same_schema"]
    assert "error" not in raw and "error" not in ceiling and "error" not in report["baseline_hnswlib"]
    assert raw["commit_per_save"]["msgs_per_s"] > 0 and ceiling["sequential_commit_per_save"]["msgs_per_s"] > 0
    assert report["ratio_sequential_to_ceiling"] > 0 and report["ratio_semantic_to_ceiling"] > 0
    assert report["baseline_hnswlib"]["knn_query_p50_ms"] > 0


def test_bench_memory_refuses_a_zero_repeat(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_memory.main(["--repeat", "0"])
    assert "--repeat" in capsys.readouterr().err


def test_bench_agent_prints_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    bench_agent.main(["--turns", "4", "--history", "40"])
    report = json.loads(capsys.readouterr().out)
    for scenario in ("last_10", "last_10_synchronous_normal", "token_budget_2000", "last_10_working_memory",
                     "last_10_semantic_recall",
                     "observational_memory"):
        assert report[scenario]["turns"] == 4 and report[scenario]["p50_ms"] > 0
    for scenario in ("last_10", "token_budget_2000", "last_10_semantic_recall"):
        steps = report[scenario]["memory_steps"]
        assert 0 < steps["p50_ms"] <= steps["p99_ms"]
        assert steps["p50_ms"] <= report[scenario]["p99_ms"]  # a part of the whole turn
    for name in ("observational_memory_buffered", "observational_memory_unbuffered",
                 "observational_memory_buffered_no_pause", "observational_memory_unbuffered_no_pause"):
        om = report[name]
        assert om["turns"] == 4 and 0 < om["p50_ms"] <= om["p99_ms"] <= om["max_ms"] and om["turns_waiting"] >= 0
    assert report["agent_without_memory"]["turns"] == 4 and report["agent_without_memory"]["p50_ms"] > 0
    for name in ("last_10_after_a_pause", "last_10_after_a_pause_single_process"):
        pause = report[name]
        assert pause["turns"] == 4 and 0 < pause["memory_steps"]["p50_ms"] <= pause["p99_ms"]
    concurrent = report["concurrent_64_conversations"]
    assert concurrent["turns"] == 64 and concurrent["turns_per_s"] > 0 and concurrent["p99_ms"] >= concurrent["p50_ms"]


def test_bench_actor_prints_the_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    bench_actor.main(["--asks", "20", "--repeat", "2"])
    figures = json.loads(capsys.readouterr().out)["ask_round_trip_us"]
    assert figures["asks"] == 20 and len(figures["runs"]) == 2
    assert 0 < figures["best"] == min(figures["runs"]) <= figures["median"]


def test_bench_machine_times_fsync(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bench_machine.main(["--dir", str(tmp_path), "--syncs", "5"])
    report = json.loads(capsys.readouterr().out)
    assert report["syncs"] == 5 and report["cpus"] >= 1 and len(report["loadavg"]) == 3
    assert 0 < report["fsync_24k_ms"]["p50"] <= report["fsync_24k_ms"]["p99"]
    assert report["python_loop_1m_adds_ms"] > 0
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


def test_bench_hnsw_segments_times_both_layouts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bench_hnsw_segments.main(["--vectors", "4000", "--segments", "2", "--queries", "5", "--dir", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert report["vectors"] == 4000 and report["segments"] == 2
    assert 0 < report["load_largest_segment_ms"] <= report["load_all_segments_ms"]
    assert set(report["queries"]) == {"8", "100", "400", "1000"}
    for figures in report["queries"].values():
        assert figures["whole_p50_ms"] > 0 and figures["segments_p50_ms"] > 0 and figures["exact_p50_ms"] > 0
    assert report["queries"]["8"]["exact_scope_vectors"] == 4000
    assert list(tmp_path.iterdir()) == []  # the graphs are gone


def test_bench_memory_alternates_the_two_rankings(capsys: pytest.CaptureFixture[str]) -> None:
    bench_memory.main(["--threads", "4", "--turns", "2", "--queries", "6", "--phases", "f", "--no-baselines"])
    report = json.loads(capsys.readouterr().out)
    for scope in ("resource", "thread"):
        passes = report["f_vector_and_hybrid_alternating"][scope]
        assert len(passes) == 2
        for figures in passes:
            assert figures["vector"]["p50_ms"] > 0 and figures["hybrid"]["p50_ms"] > 0 and figures["ratio_p50"] > 0


def test_bench_memory_alternates_the_modes_with_a_real_model(capsys: pytest.CaptureFixture[str]) -> None:
    """Phase f with WordLlama (embedding in a worker thread); phase d, whose oracle is the hash embedder, refuses it."""
    pytest.importorskip("wordllama")
    bench_memory.main(["--threads", "4", "--turns", "2", "--queries", "6", "--phases", "f", "--no-baselines",
                       "--embedder", "wordllama"])
    report = json.loads(capsys.readouterr().out)
    assert report["embedder"] == "wordllama"
    for scope in ("resource", "thread"):
        runs = report["f_vector_and_hybrid_alternating"][scope]
        assert len(runs) == 2 and all(run["vector"]["p50_ms"] > 0 and run["ratio_p50"] > 0 for run in runs)
    with pytest.raises(SystemExit):
        bench_memory.main(["--phases", "d", "--embedder", "wordllama"])
    assert "--embedder hash" in capsys.readouterr().err
