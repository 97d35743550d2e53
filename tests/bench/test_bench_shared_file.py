"""bench_shared_file runs with a real second OS process writing the file: every recall follows one of its saves, and
the reader brings its kept keyword scopes up to date instead of reading them whole."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench import bench_shared_file  # noqa: E402

pytestmark = pytest.mark.bench  # benchmark smoke tests: CI's second step (pytest -m 'slow or bench')


def test_recalls_after_another_processs_saves_follow_the_kept_scopes(capsys: pytest.CaptureFixture[str]) -> None:
    bench_shared_file.main(["--threads", "4", "--turns", "3", "--queries", "12", "--pause", "0.15"])
    report = json.loads(capsys.readouterr().out)
    for mode in ("vector", "hybrid"):
        assert report[mode]["first"]["n"] + report[mode]["again"]["n"] == 12
        assert report[mode]["again"]["p50_ms"] > 0
    cache = report["reader_keyword_cache"]
    resources = report["hybrid"]["first"]["n"]
    # each resource read whole once, at its first hybrid recall; later ones took the writer's new turn alone (as the
    # writer's background fold indexed it: a recall that came first folds it itself, and follows it as its own)
    assert cache["keyword_built"] == resources and 0 < cache["keyword_followed"] <= 12 - resources
    assert report["ratio_p50_again"] > 0


def test_on_postgres_too(pg_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bench_shared_file.main(["--threads", "4", "--turns", "3", "--queries", "8", "--pause", "0.01",
                            "--backend", "postgres", "--dsn", pg_cluster.dsn()])
    report = json.loads(capsys.readouterr().out)
    cache = report["reader_keyword_cache"]
    resources = report["hybrid"]["first"]["n"]
    # on PostgreSQL the other process's save is committed when it returns: every later search follows it
    assert cache["keyword_built"] == resources and cache["keyword_followed"] == 8 - resources
    assert report["config"]["backend"] == "postgres"
