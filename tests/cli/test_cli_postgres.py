"""The ``threadmind`` command on a PostgreSQL database (``--db postgresql://...``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from tests.cli.test_cli import FIXTURE, MANIFEST, run


@pytest.mark.skipif(not MANIFEST, reason="Mastra fixture not available")
def test_import_inspect_and_export_on_postgres(capsys: pytest.CaptureFixture[str], mastra_db: str,
                                               tmp_path: Path, pg_dsn: str) -> None:
    _, exported, _ = run(capsys, "export", "--db", mastra_db)
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exported, encoding="utf-8")
    code, out, err = run(capsys, "import", str(dump), "--db", pg_dsn, "--dim", "16")
    assert (code, err) == (0, "")
    assert out.strip() == "imported 23 messages into 5 threads (5 new); 0 bad lines"

    _, again, _ = run(capsys, "export", "--db", pg_dsn)
    assert sorted(again.splitlines()) == sorted(exported.splitlines())
    code, out, _ = run(capsys, "threads", "--db", pg_dsn, "--json")
    threads = json.loads(out)
    assert code == 0 and len(threads) == 5 and sum(t["messages"] for t in threads) == 23
    code, out, _ = run(capsys, "show", threads[0]["id"], "--db", pg_dsn)
    assert code == 0 and threads[0]["id"] in out
    code, out, _ = run(capsys, "stats", "--db", pg_dsn)
    fields = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.splitlines()[2:] if line.strip())
    assert code == 0 and (fields["threads"], fields["messages"], fields["vectors"]) == ("5", "23", "23")
    assert fields["index memory_messages_16"].endswith("0 messages without one; ok")
    code, out, _ = run(capsys, "stats", "--db", pg_dsn.replace("postgres@", "postgres:secret@"))
    assert code == 0 and "secret" not in out  # the title names the database without its password
    code, out, _ = run(capsys, "search", "cats", "--db", pg_dsn, "--dim", "16", "--resource",
                       threads[0]["resourceId"])
    assert code == 0 and "hits in resource" in out


@pytest.fixture
def mastra_db(tmp_path: Path) -> str:
    copy = tmp_path / "mastra.db"
    shutil.copyfile(FIXTURE / "memory.db", copy)
    return str(copy)
