"""bench_recall on a tiny conversation built here (no LoCoMo data in the repository): every figure of every mode,
scored against evidence the test knows, and what recall itself hands back for the same query."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench import bench_recall  # noqa: E402

pytestmark = pytest.mark.bench  # benchmark smoke tests: CI's second step (pytest -m 'slow or bench')

SESSIONS = [
    [("Ann", "I adopted a grey kitten called Pixel last week"), ("Bo", "Lovely! How old is Pixel?"),
     ("Ann", "About ten weeks, and she already climbs the curtains")],
    [("Bo", "I start my new job at the observatory on Monday"), ("Ann", "The one on the hill? Congratulations!"),
     ("Bo", "Yes, I will be cataloguing comets at night")],
]
QUESTIONS = [
    {"question": "What is the name of Ann's kitten?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
    {"question": "Where does Bo start a new job?", "answer": "the observatory", "evidence": ["D2:1"], "category": 4},
    {"question": "What will Bo catalogue?", "answer": "comets", "evidence": ["D2:3", "D9:9"], "category": 1},
    {"question": "Is it raining?", "answer": "n/a", "evidence": ["D1:2"], "category": 5},  # left out: category 5
]


def _conversation(path: Path) -> Path:
    data: dict[str, Any] = {"speaker_a": "Ann", "speaker_b": "Bo", "qa": QUESTIONS}
    for s, turns in enumerate(SESSIONS, start=1):
        data[f"session_{s}_date_time"] = f"1:56 pm on {s} May, 2023"
        data[f"session_{s}"] = [{"speaker": who, "dia_id": f"D{s}:{t}", "text": text}
                                for t, (who, text) in enumerate(turns, start=1)]
    path.write_text(json.dumps(data))
    return path


def test_every_mode_and_setting_is_scored(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = _conversation(tmp_path / "tiny.json")
    monkeypatch.setattr(sys, "argv", ["bench_recall", str(path), "--embedders", "hash", "--settings", "1:0,1:1"])
    bench_recall._cli()
    report = json.loads(capsys.readouterr().out)
    assert report["turns"] == 6 and report["questions"] == 3  # category 5 left out; D9:9 dropped as unknown
    keyword = report["results"]["keyword"]
    exact = keyword["top1_range0"]
    assert exact["questions"] == 3 and set(exact["by_category"]) == {"1", "4"}
    assert exact["evidence_recall"] == 1.0 and exact["all_evidence"] == 1.0 and exact["session_hit_at_1"] == 1.0
    window = keyword["top1_range1"]
    assert window["evidence_recall"] == 1.0 and window["chars"] > exact["chars"]  # neighbours cost characters
    for mode in ("vector", "hybrid"):
        figures = report["results"]["hash"][mode]
        for setting in ("top1_range0", "top1_range1"):
            assert 0.0 <= figures[setting]["evidence_recall"] <= 1.0 and figures[setting]["chars"] > 0
        assert figures["query_ms"]["p50"] > 0 and figures["query_ms"]["p99"] >= figures["query_ms"]["p50"]
    assert report["results"]["hash"]["hybrid"]["top1_range0"]["evidence_recall"] == 1.0


def test_the_windows_it_scores_are_what_recall_hands_back(tmp_path: Path) -> None:
    """The bench adds each hit's neighbours in its session itself; recall does the same through include windows."""
    from threadmind import Memory
    from threadmind.stores import SQLiteStore

    conversation = bench_recall.load(_conversation(tmp_path / "tiny.json"))

    async def main() -> None:
        memory = Memory(storage=SQLiteStore(tmp_path / "r.db"), options={
            "lastMessages": False, "semanticRecall": {"search": "keyword", "topK": 1, "messageRange": 1}})
        async with memory:
            await bench_recall._store(memory, [conversation])
            for question in conversation.questions:
                hits = await memory.search(question["question"], resource_id="tiny", top_k=1)
                recalled = await memory.recall("tiny-s1", resource_id="tiny", per_page=0,
                                               vector_search_string=question["question"])
                session, at = conversation.position[hits[0].message.id.split(":", 1)[1]]
                order = [t for t, s, *_ in conversation.turns if s == session]
                expected = {f"tiny:{t}" for t in order[max(0, at - 1):at + 2]}
                assert {m.id for m in recalled.messages} == expected

    anyio.run(main)
