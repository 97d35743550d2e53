"""bench_growth's idle phase keeps running: a few threads touched once, every actor passivated, figures in shape."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench._growth_idle import IDLE_WARM

from bench import bench_growth  # noqa: E402

pytestmark = pytest.mark.bench  # benchmark smoke tests: CI's second step (pytest -m 'slow or bench')


def _after_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str], phase: str, threads: int) -> Any:
    """Run the write phase for ``threads`` threads, then ``phase`` on the same database; its JSON."""
    db = str(tmp_path / "growth.db")
    bench_growth.main(["--phase", "write", "--db", db, "--threads", str(threads)])
    capsys.readouterr()
    bench_growth.main(["--phase", phase, "--db", db, "--threads", str(threads)])
    return json.loads(capsys.readouterr().out)


def test_the_idle_phase_runs_alone_and_passivates_every_thread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench_growth.main(["--only", "idle", "--idle", "40", "--idle-timeout", "0.2", "--workdir", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"idle"}  # no growth phase ran
    idle = report["idle"]
    assert idle["threads"] == 40 and idle["idle_timeout_s"] == 0.2
    actors = idle["thread_actors"]
    assert actors["created"] == actors["passivated"] == 40 + IDLE_WARM and actors["evicted"] == 0
    assert 0 < idle["live_actors"]["peak_threads"] <= 40
    assert idle["touch"]["msgs_per_s"] > 0
    assert 0 < idle["rss_mb"]["before"] <= idle["rss_mb"]["peak"]
    assert idle["sweeps"]["threads"]["touch"]["passivated"] + idle["sweeps"]["threads"]["drain"]["passivated"] == 40
    for stage in ("touch", "drain"):
        gaps = idle["event_loop"][stage]
        assert gaps["ticks"] > 0 and 0 < gaps["p50_gap_ms"] <= gaps["p99_gap_ms"] <= gaps["max_gap_ms"]
    traced = idle["tracemalloc"]
    assert traced["threads"] == 40 and traced["grew_most"]
    assert idle["retained_per_thread"]["tracemalloc_bytes"] == traced["retained_bytes_per_thread"]


def test_the_write_phase_reports_saves_the_event_loop_and_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench_growth.main(["--phase", "write", "--db", str(tmp_path / "growth.db"), "--threads", "20"])
    write = json.loads(capsys.readouterr().out)
    assert write["save"]["messages"] == 20 * bench_growth.TURNS * 2 and write["save"]["msgs_per_s"] > 0
    assert len(write["save"]["msgs_per_s_by_tenth"]) == 10 and min(write["save"]["msgs_per_s_by_tenth"]) > 0
    loop = write["event_loop_while_saving"]
    assert 0 < loop["p99_gap_ms"] <= loop["max_gap_ms"] and loop["live_thread_actors"] == 20
    assert set(loop["gc"]) == {"collections", "longest_ms", "total_ms"}
    assert loop["gc_tracked_objects"] > 0
    assert loop["gc_thresholds"][0] > 0
    assert write["index"]["vectors"] == 200 and write["recall_at_10"] == 1.0
    assert write["aclose_s"] >= 0


def test_the_restart_phase_reports_the_first_answer_full_speed_and_the_event_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    restart = _after_writing(tmp_path, capsys, "restart", 20)
    assert restart["first_query_hits"] > 0
    assert 0 <= restart["start_s"] <= restart["first_semantic_query_s"] <= restart["full_ann_speed_s"]
    loop = restart["event_loop_until_full_speed"]
    assert 0 < loop["p99_gap_ms"] <= loop["max_gap_ms"]
    assert restart["aclose_s"] >= 0 and restart["peak_rss_mb"] > 0
    assert 0 < restart["recall_after"]["p50_ms"] <= restart["recall_after"]["p99_ms"]
    assert restart["snapshot_wait_s"] >= 0.6 and restart["snapshot_saves"] == 0  # 200 vectors: saved at close


def test_the_latency_phase_times_first_reads_then_cached_ones_of_the_same_threads_and_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    latency = _after_writing(tmp_path, capsys, "latency", 40)
    assert 0 <= latency["load_index_s"] <= latency["ready_s"] and latency["snapshot_wait_s"] >= 0.6
    assert latency["vectors_loaded"] == 400
    assert 0 <= latency["event_loop_until_ready"]["p99_gap_ms"] <= latency["event_loop_until_ready"]["max_gap_ms"]
    # 4 resources, one of them searched to open the index: 3 first searches, each gathering its block from
    # SQL, then 3 searches of the same resources served from the cached blocks
    assert latency["semantic_cold"]["n"] == latency["semantic_hot"]["n"] == 3
    assert latency["semantic_cold"]["scope_reads"] == 3 and latency["semantic_hot"]["scope_reads"] == 0
    # every thread but the 3 the searches use, each read once (no repeats among the first reads)
    assert latency["recall_cold"]["n"] == latency["recall_hot"]["n"] == 37
    for name in ("recall_cold", "recall_hot", "semantic_cold", "semantic_hot"):
        assert 0 < latency[name]["p50_ms"] <= latency[name]["p99_ms"]
    # the baseline: the same first reads' statements in plain sqlite3, as many (other threads where there are any)
    raw = latency["raw_sqlite"]
    assert raw["recall_cold"]["n"] == 37 and raw["recall_cold"]["messages_read"] == 37 * 10
    # 4 hits each, with the message before and after it (one of them when the hit is first or last in its thread)
    assert raw["semantic_cold"]["n"] == 3 and 3 * 4 * 2 <= raw["semantic_cold"]["messages_read"] <= 3 * 4 * 3
    for name in ("recall_cold", "semantic_cold"):
        assert 0 < raw[name]["p50_ms"] <= raw[name]["p99_ms"]


def test_search_both_asks_each_semantic_search_by_both_modes_and_compares_sizes_per_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(bench_growth.SEARCH, "mode", "hybrid")  # main() sets it: put back after
    bench_growth.main(["--only", "growth", "--max", "400", "--idle", "0", "--search", "both",
                       "--workdir", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert report["search"] == "both"
    latency = report["sizes"]["400"]["latency"]
    for name in ("semantic_cold", "semantic_hot"):
        both = latency[name]
        assert both["n"] == 3 and both["scope_reads"] == (3 if name == "semantic_cold" else 0)
        for mode in ("vector", "hybrid"):
            assert 0 < both[mode]["p50_ms"] <= both[mode]["p99_ms"]
        # the ratio of the unrounded medians, to 2 places; each median is printed to 3 (0.0005 ms either way)
        hybrid, vector = both["hybrid"]["p50_ms"], both["vector"]["p50_ms"]
        assert (hybrid - 0.0005) / (vector + 0.0005) - 0.005 <= both["ratio_p50"] <= \
            (hybrid + 0.0005) / (vector - 0.0005) + 0.005
    ratios = report["ratios_to_first"]["400"]  # the one size against itself, per mode
    assert ratios["semantic_hot_hybrid_p50"] == ratios["semantic_cold_vector_p99"] == 1.0
