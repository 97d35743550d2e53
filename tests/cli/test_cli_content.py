"""``threadmind export``/``import`` lines carry every content field unchanged, and a malformed line is reported
as a bad line (never a crash or an "unexpected" error)."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.codecs._content_strategies import PROPERTY, canonical, messages
from tests.codecs.test_malformed_input import mutated

from threadmind import cli

_CLI = settings(PROPERTY, max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
_runs = itertools.count()
ROW: dict[str, Any] = {
    "id": "m1",
    "content": {"format": 2, "parts": [{"type": "text", "text": "see attached"}], "content": "see attached",
                "experimental_attachments": [{"name": "a.png", "contentType": "image/png", "url": "https://x/a.png"}],
                "annotations": [{"k": 1}], "futureKey": {"v": [1, 2.5, None]}},
    "role": "user",
    "createdAt": "2025-01-01T00:00:01.000Z",
    "threadId": "t1",
    "resourceId": "r1",
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _import_export(capsys: pytest.CaptureFixture[str], folder: Path, text: str) -> tuple[int, str, str, str]:
    dump = folder / f"in-{next(_runs)}.jsonl"
    dump.write_text(text, encoding="utf-8")
    db = str(folder / f"m-{next(_runs)}.db")
    code, out, err = run(capsys, "import", str(dump), "--db", db, "--dim", "16")
    _, exported, _ = run(capsys, "export", "--db", db)
    return code, out, err, exported


def test_export_and_import_keep_every_content_field(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err, exported = _import_export(capsys, tmp_path, json.dumps(ROW) + "\n")
    assert (code, err) == (0, ""), out
    assert [canonical(json.loads(line)) for line in _lines(exported)] == [canonical(ROW)]


def _lines(exported: str) -> list[str]:
    # JSON Lines split on "\n" only: U+2028 or U+0085 inside a string are characters, not line ends
    return [line for line in exported.split("\n") if line]


def _saved(row: dict[str, Any]) -> bool:
    return bool(row["content"]["parts"] or row["content"].get("content"))  # save_messages drops empty ones


@pytest.mark.slow
@_CLI
@given(rows=st.lists(messages().filter(_saved), min_size=1, max_size=4, unique_by=lambda r: r["id"]))
def test_round_trip_property(capsys: pytest.CaptureFixture[str], rows: list[dict[str, Any]]) -> None:
    rows = [{**row, "createdAt": f"2025-01-01T00:00:{i:02d}.000Z"} for i, row in enumerate(rows)]  # export order
    with tempfile.TemporaryDirectory() as folder:
        code, _, err, exported = _import_export(capsys, Path(folder), "".join(json.dumps(r) + "\n" for r in rows))
    assert (code, err) == (0, "")
    assert [canonical(json.loads(line)) for line in _lines(exported)] == [canonical(r) for r in rows]


@pytest.mark.parametrize("line", [
    pytest.param('{"id": "x", "content": ' + "[" * 3000 + "]" * 3000 + "}", id="nested-too-deeply"),
    pytest.param(json.dumps({**ROW, "id": "x", "createdAt": "0001-01-01T00:00:00+01:00"}), id="time-out-of-range"),
    pytest.param(json.dumps({**ROW, "id": "x", "content": {**ROW["content"], "metadata": {"score": 0.5}}})
                 .replace("0.5", "NaN"), id="nan"),  # not JSON: it would be stored as null
    pytest.param(json.dumps({**ROW, "id": "x"}).replace("see attached", "\\ud800", 1), id="lone-surrogate"),
    pytest.param(json.dumps({**ROW, "id": "x"}).replace('"r1"', "1" + "0" * 5000, 1), id="huge-number"),
])
def test_a_malformed_line_is_a_bad_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str) -> None:
    code, out, err, exported = _import_export(capsys, tmp_path, json.dumps(ROW) + "\n" + line + "\n")
    assert code == 1 and "error: unexpected" not in err, err
    assert err.startswith("threadmind: import: line 2: ") and err.count("\n") == 1, err
    assert [json.loads(x)["id"] for x in _lines(exported)] == ["m1"]  # nothing of the bad line was stored


@pytest.mark.slow
@_CLI
@given(lines=st.lists(mutated(messages().map(lambda r: json.dumps(r).encode())), min_size=1, max_size=3))
def test_malformed_lines_are_reported_as_bad_lines(capsys: pytest.CaptureFixture[str], lines: list[bytes]) -> None:
    text = "".join(line.decode("utf-8", "replace").replace("\r", " ") + "\n" for line in lines)
    text = json.dumps(ROW) + "\n" + text  # one good line first: it is imported whatever follows
    with tempfile.TemporaryDirectory() as folder:
        code, out, err, exported = _import_export(capsys, Path(folder), text)
    assert code in (0, 1) and "error: unexpected" not in err and "Traceback" not in err, err
    assert out.startswith("imported ")
    for report in err.splitlines():
        assert report.startswith("threadmind: import: line "), report
    assert any(json.loads(line)["id"] == "m1" for line in _lines(exported))
