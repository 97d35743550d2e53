"""The ``threadmind`` command, run in-process through ``main([...])`` and once as a real subprocess."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from threadmind import cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mastra-1.71"  # a copy of ../shared/fixtures
MANIFEST: dict[str, Any] = json.loads((FIXTURE / "manifest.json").read_text()) if FIXTURE.exists() else {}
needs_fixture = pytest.mark.skipif(not MANIFEST, reason="Mastra fixture not available")
COMMANDS = ("demo", "threads", "show", "search", "export", "import", "reindex", "stats")


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def mastra_db(tmp_path: Path) -> str:
    if not MANIFEST:
        pytest.skip("Mastra fixture not available")
    copy = tmp_path / "mastra.db"
    shutil.copyfile(FIXTURE / "memory.db", copy)
    return str(copy)


def _message(i: int, thread: str = "t1", resource: str = "r1", text: str | None = None) -> dict[str, Any]:
    body = text or f"message number {i} about {'cats' if i % 2 else 'rockets'}"
    return {
        "id": f"{thread}-m{i:03d}",
        "content": {"format": 2, "parts": [{"type": "text", "text": body}], "content": body},
        "role": "user" if i % 2 else "assistant",
        "createdAt": f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z",
        "threadId": thread,
        "resourceId": resource,
    }


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any] | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


class TestHelpAndErrors:
    def test_help_lists_every_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = run(capsys, "--help")
        assert code == 0
        for command in COMMANDS:
            assert command in out

    @pytest.mark.parametrize("command", COMMANDS[1:])
    def test_every_command_takes_db_and_embedder_options(
        self, capsys: pytest.CaptureFixture[str], command: str
    ) -> None:
        code, out, _ = run(capsys, command, "--help")
        assert code == 0
        for option in ("--db", "--embedder", "--dim"):
            assert option in out

    def test_missing_database_is_one_line(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        missing = tmp_path / "nope.db"
        code, out, err = run(capsys, "threads", "--db", str(missing))
        assert code == 1
        assert out == ""
        assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err
        assert not missing.exists()  # a read command never creates a database

    def test_unknown_thread(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, _, err = run(capsys, "show", "no-such-thread", "--db", mastra_db)
        assert code == 1
        assert err.strip() == "threadmind: error: thread 'no-such-thread' does not exist [THREADMIND_THREAD_NOT_FOUND]"

    def test_bad_embedder(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, _, err = run(capsys, "search", "x", "--resource", "r", "--db", mastra_db, "--embedder", "nope")
        assert code == 1
        assert err.count("\n") == 1 and "--embedder" in err

    def test_usage_errors_exit_2(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, _, err = run(capsys, "search", "q", "--resource", "r", "--thread", "t", "--db", mastra_db)
        assert code == 2
        assert "not allowed with argument" in err
        code, _, err = run(capsys, "search", "q", "--db", mastra_db)
        assert code == 2
        assert "one of the arguments --resource --thread is required" in err


@needs_fixture
class TestInspection:
    def test_threads_plain_table(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, out, _ = run(capsys, "threads", "--db", mastra_db)
        assert code == 0
        lines = out.splitlines()
        assert lines[0] == "5 threads"
        assert lines[1].split() == ["thread", "resource", "title", "messages", "updated"]
        basic = next(line for line in lines if line.startswith("thread-basic "))
        assert "Trip to Tokyo" in basic and " 6 " in basic
        assert "│" not in out  # not a terminal: no rich box drawing

    def test_threads_json_and_resource_filter(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, out, _ = run(capsys, "threads", "--db", mastra_db, "--resource", "res-alice", "--json")
        assert code == 0
        got = {t["id"]: t for t in json.loads(out)}
        expected = {t["id"]: t for t in MANIFEST["threads"] if t["resourceId"] == "res-alice"}
        assert set(got) == set(expected)
        for thread_id, thread in expected.items():
            assert got[thread_id]["messages"] == MANIFEST["counts"]["messages_by_thread"][thread_id]
            assert _canonical({k: got[thread_id][k] for k in thread}) == _canonical(thread)

    def test_show_json_is_mastra_shape(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, out, _ = run(capsys, "show", "thread-meta", "--db", mastra_db, "--json")
        assert code == 0
        shown = json.loads(out)
        assert _canonical(shown["thread"]) == _canonical(next(t for t in MANIFEST["threads"]
                                                              if t["id"] == "thread-meta"))
        assert _canonical(shown["messages"]) == _canonical(MANIFEST["messages"]["thread-meta"])

    def test_show_plain(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, out, _ = run(capsys, "show", "thread-basic", "--db", mastra_db)
        assert code == 0
        for message in MANIFEST["messages"]["thread-basic"]:
            assert message["id"] in out
        assert out.index("msg-basic-01") < out.index("msg-basic-06")

    def test_search_thread_scope_matches_mastra(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        probe = MANIFEST["semantic_probe"]
        code, out, _ = run(capsys, "search", probe["vectorSearchString"], "--thread", probe["threadId"],
                           "--db", mastra_db, "--dim", "16", "--top-k", "4", "--search", "vector")
        assert code == 0
        rows = [line.split() for line in out.splitlines()[2:]]
        assert [r[1] for r in rows] == [h["message_id"] for h in probe["vector_query"]["hits"]]
        for row, hit in zip(rows, probe["vector_query"]["hits"], strict=True):
            assert float(row[0]) == pytest.approx(hit["score"], abs=1e-4)

    def test_search_resource_scope_stays_in_resource(
        self, capsys: pytest.CaptureFixture[str], mastra_db: str
    ) -> None:
        code, out, _ = run(capsys, "search", "teal colour", "--resource", "res-carol", "--db", mastra_db,
                           "--dim", "16")
        assert code == 0
        rows = [line.split() for line in out.splitlines()[2:]]
        assert {r[2] for r in rows} == {"thread-wm"}

    def test_the_dimension_defaults_to_the_databases_vectors(
        self, capsys: pytest.CaptureFixture[str], mastra_db: str
    ) -> None:
        """Without --dim the hash embedder takes the one dimension the file's vectors have (16 here), so
        search finds Mastra's vectors and reindex fills that index instead of starting a 384-dim one."""
        probe = MANIFEST["semantic_probe"]
        code, out, _ = run(capsys, "search", probe["vectorSearchString"], "--thread", probe["threadId"],
                           "--db", mastra_db, "--top-k", "4", "--search", "vector")
        assert code == 0
        rows = [line.split() for line in out.splitlines()[2:]]
        assert [r[1] for r in rows] == [h["message_id"] for h in probe["vector_query"]["hits"]]
        code, out, _ = run(capsys, "reindex", "--db", mastra_db)
        assert code == 0 and "memory_messages_16" in out

    def test_search_unknown_thread(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, _, err = run(capsys, "search", "x", "--thread", "ghost", "--db", mastra_db, "--dim", "16")
        assert code == 1 and "ghost" in err

    def test_stats(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        run(capsys, "search", "warm up", "--resource", "res-alice", "--db", mastra_db, "--dim", "16")
        code, out, _ = run(capsys, "stats", "--db", mastra_db)
        assert code == 0
        fields = {line[:33].strip(): line[33:].strip() for line in out.splitlines()[2:]}
        assert fields["threads"] == "5"
        assert fields["messages"] == "23"
        assert fields["resources"] == "3"  # owners of threads, not only the 2 with a working memory
        assert fields["working memories"] == "2"
        assert fields["vectors"] == "23"
        assert fields["pending vectors"] == "0"
        assert fields["index memory_messages_16"].endswith("0 messages without one; ok")
        assert fields["database size"].endswith("KiB")

    def test_a_dimension_the_vectors_do_not_have_is_refused_by_search(
        self, capsys: pytest.CaptureFixture[str], mastra_db: str
    ) -> None:
        code, out, err = run(capsys, "search", "Tokyo", "--resource", "res-alice", "--db", mastra_db, "--dim", "8")
        assert code == 1 and out == ""
        assert "--dim 8 does not match the vectors in the database (16-dimensional)" in err
        assert err.count("\n") == 1

    def test_one_thread_is_singular(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, out, _ = run(capsys, "threads", "--db", mastra_db, "--resource", "res-bob")
        assert code == 0
        assert sum(1 for t in MANIFEST["threads"] if t["resourceId"] == "res-bob") == 1
        assert out.splitlines()[0] == "1 thread of resource 'res-bob'"


    def test_rich_tables_on_a_terminal(
        self, capsys: pytest.CaptureFixture[str], mastra_db: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pytest.importorskip("rich")
        monkeypatch.setattr("threadmind._cli_output.use_rich", lambda stream: True)
        code, out, _ = run(capsys, "threads", "--db", mastra_db)
        assert code == 0
        assert "┃" in out or "│" in out
        assert "thread-basic" in out


class TestExportImport:
    def test_export_all_is_mastra_json_lines(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, out, _ = run(capsys, "export", "--db", mastra_db)
        assert code == 0
        lines = [json.loads(line) for line in out.splitlines()]
        assert len(lines) == MANIFEST["counts"]["messages"]
        expected = {m["id"]: m for msgs in MANIFEST["messages"].values() for m in msgs}
        for line in lines:
            assert _canonical(line) == _canonical(expected[line["id"]])

    def test_export_some_threads_in_order(self, capsys: pytest.CaptureFixture[str], mastra_db: str) -> None:
        code, out, _ = run(capsys, "export", "thread-untitled", "thread-wm", "--db", mastra_db)
        assert code == 0
        ids = [json.loads(line)["id"] for line in out.splitlines()]
        assert ids == [m["id"] for m in MANIFEST["messages"]["thread-untitled"] + MANIFEST["messages"]["thread-wm"]]

    def test_round_trip_through_a_new_database(
        self, capsys: pytest.CaptureFixture[str], mastra_db: str, tmp_path: Path
    ) -> None:
        _, exported, _ = run(capsys, "export", "--db", mastra_db)
        dump = tmp_path / "dump.jsonl"
        dump.write_text(exported, encoding="utf-8")
        target = str(tmp_path / "fresh.db")
        code, out, err = run(capsys, "import", str(dump), "--db", target, "--dim", "16")
        assert (code, err) == (0, "")
        assert out.strip() == "imported 23 messages into 5 threads (5 new); 0 bad lines"
        _, again, _ = run(capsys, "export", "--db", target)
        assert sorted(again.splitlines()) == sorted(exported.splitlines())

    def test_bad_lines_reported_good_lines_kept(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        rows: list[dict[str, Any] | str] = [_message(i) for i in range(1, 6)]
        rows.insert(1, "{not json")
        rows.insert(3, json.dumps({"id": "x", "role": "user", "createdAt": "2025-01-01T00:00:00.000Z"}))
        rows.insert(5, json.dumps({**_message(90), "threadId": None}))
        rows.append(json.dumps({**_message(91), "role": "wizard"}))
        rows.append("")
        path = _write_jsonl(tmp_path / "in.jsonl", rows)
        db = str(tmp_path / "m.db")
        code, out, err = run(capsys, "import", str(path), "--db", db)
        assert code == 1
        errors = err.splitlines()
        assert [e.split(":")[2].strip() for e in errors] == ["line 2", "line 4", "line 6", "line 9"]
        assert "invalid JSON" in errors[0]
        assert "content" in errors[1]
        assert "threadId" in errors[2]
        assert "role" in errors[3]
        assert out.strip() == "imported 5 messages into 1 thread (1 new); 4 bad lines"
        _, exported, _ = run(capsys, "export", "--db", db)
        assert [json.loads(line)["id"] for line in exported.splitlines()] == [f"t1-m{i:03d}" for i in range(1, 6)]

    def test_reimport_is_idempotent(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        path = _write_jsonl(tmp_path / "in.jsonl", [_message(i, thread=f"t{i % 3}") for i in range(30)])
        db = str(tmp_path / "m.db")
        assert run(capsys, "import", str(path), "--db", db)[0] == 0
        _, first, _ = run(capsys, "export", "--db", db)
        code, out, _ = run(capsys, "import", str(path), "--db", db)
        assert code == 0 and "(0 new)" in out
        _, second, _ = run(capsys, "export", "--db", db)
        assert second == first and len(first.splitlines()) == 30
        _, stats, _ = run(capsys, "stats", "--db", db)
        assert "vectors                    30" in stats

    def test_message_moving_thread_is_a_bad_line(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        db = str(tmp_path / "m.db")
        run(capsys, "import", str(_write_jsonl(tmp_path / "a.jsonl", [_message(1), _message(2)])), "--db", db)
        moved = {**_message(2), "threadId": "t2"}
        code, _, err = run(capsys, "import", str(_write_jsonl(tmp_path / "b.jsonl", [_message(3), moved])),
                           "--db", db)
        assert code == 1
        assert err.startswith("threadmind: import: line 2:")
        _, exported, _ = run(capsys, "export", "--db", db)
        assert [json.loads(x)["id"] for x in exported.splitlines()] == ["t1-m001", "t1-m002", "t1-m003"]

    def test_missing_import_file(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        code, _, err = run(capsys, "import", str(tmp_path / "none.jsonl"), "--db", str(tmp_path / "m.db"))
        assert code == 1 and err.count("\n") == 1 and "does not exist" in err


class TestReindex:
    def test_plain_progress_is_a_line_per_tenth(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        db = tmp_path / "m.db"
        path = _write_jsonl(tmp_path / "in.jsonl", [_message(i, thread=f"t{i % 8}") for i in range(3000)])
        assert run(capsys, "import", str(path), "--db", str(db), "--no-semantic")[0] == 0
        code, out, _ = run(capsys, "reindex", "--db", str(db), "--dim", "8")
        assert code == 0
        words = [line for line in out.splitlines() if line.startswith("reindex: keyword index: ")]
        assert words and words[-1].endswith("(100%)")  # the words of the imported messages were indexed too
        progress = [line for line in out.splitlines() if line.endswith("%)") and line not in words]
        assert progress[-1] == "reindex: 3000/3000 messages (100%)"
        percents = [int(line.rsplit("(", 1)[1][:-2]) for line in progress]
        assert len({p // 10 for p in percents}) == len(percents) <= 11, progress  # 3000 messages, many batches

    def test_stats_without_semantic_recall_gives_no_reindex_advice(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        db = tmp_path / "m.db"
        path = _write_jsonl(tmp_path / "in.jsonl", [_message(i, resource="r1") for i in range(5)]
                            + [_message(i, thread="t2", resource="r2") for i in range(5)])
        assert run(capsys, "import", str(path), "--db", str(db), "--no-semantic")[0] == 0
        code, out, _ = run(capsys, "stats", "--db", str(db))
        assert code == 0
        assert "reindex`" not in out.replace("`threadmind reindex` makes one", "")
        fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines()[2:])
        assert fields["resources"] == "2" and fields["working memories"] == "0"

        assert fields["index health"].startswith("no vector index (the messages were saved without semantic recall")
        assert fields["index snapshot"] == "none"

    def test_a_snapshot_folder_named_after_the_whole_file_is_found(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """``HnswVectorStore(path + ".vectors")`` (``m.db.vectors``) is the snapshot when no ``m.vectors`` exists."""
        db = tmp_path / "m.db"
        path = _write_jsonl(tmp_path / "in.jsonl", [_message(i) for i in range(20)])
        assert run(capsys, "import", str(path), "--db", str(db), "--dim", "8")[0] == 0
        (tmp_path / "m.vectors").rename(tmp_path / "m.db.vectors")
        code, out, _ = run(capsys, "stats", "--db", str(db))
        fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines()[2:])
        assert code == 0 and fields["index snapshot"].endswith(f"in {tmp_path / 'm.db.vectors'}"), fields
        code, out, _ = run(capsys, "search", "rockets", "--resource", "r1", "--db", str(db), "--dim", "8")
        assert code == 0 and "t1-m" in out and not (tmp_path / "m.vectors").exists()  # no second snapshot

    def test_reindex_makes_missing_vectors_with_progress(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        db = tmp_path / "m.db"
        path = _write_jsonl(tmp_path / "in.jsonl", [_message(i, thread=f"t{i % 4}") for i in range(300)])
        assert run(capsys, "import", str(path), "--db", str(db), "--dim", "8")[0] == 0
        code, out, _ = run(capsys, "reindex", "--db", str(db), "--dim", "16")
        assert code == 0
        lines = out.splitlines()
        assert re.fullmatch(r"reindex: made 300 vectors in memory_messages_16 \(index saved in \d+\.\d s\)",
                            lines[-1]), lines
        assert lines[-2] == "reindex: inserting into the HNSW index and saving its snapshot..."
        assert lines[-3] == "reindex: 300/300 messages (100%)"
        assert all(line.startswith("reindex: ") for line in lines)
        assert len(lines) <= 11 + 2  # without a terminal: at most one line per tenth, never one per batch
        code, out, _ = run(capsys, "reindex", "--db", str(db), "--dim", "16")
        assert out.splitlines()[-1].startswith("reindex: made 0 vectors in memory_messages_16 ")

        conn = sqlite3.connect(db)
        try:
            per_index = dict(conn.execute("SELECT index_name, count(*) FROM threadmind_vectors GROUP BY 1"))
        finally:
            conn.close()
        assert per_index == {"memory_messages_8": 300, "memory_messages_16": 300}


@needs_fixture
def test_as_a_subprocess(mastra_db: str) -> None:
    ok = subprocess.run([sys.executable, "-m", "threadmind.cli", "threads", "--db", mastra_db, "--json"],
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    assert {t["id"] for t in json.loads(ok.stdout)} == {t["id"] for t in MANIFEST["threads"]}
    assert ok.stderr == ""


@pytest.mark.parametrize("option", ["--threads", "--resources", "--turns", "--concurrency"])
def test_demo_refuses_sizes_below_one(capsys: pytest.CaptureFixture[str], option: str) -> None:
    code, _, err = run(capsys, "demo", option, "0")  # --concurrency 0 used to wait forever
    assert code == 1 and f"{option} must be a positive integer, got 0" in err


def test_a_database_that_cannot_be_opened_is_one_error_line(tmp_path: Path) -> None:
    """A failed connect must not leave aiosqlite's worker thread to report to a closed loop at exit."""
    (tmp_path / "a-folder.db").mkdir()  # a path SQLite cannot open as a database file
    demo = ["demo", "--threads", "2", "--turns", "1", "--db"]
    cases = (([*demo, str(tmp_path / "a-folder.db")], "cannot open"),
             (["stats", "--db", str(tmp_path)], "cannot open"),
             ([*demo, str(tmp_path / "missing" / "x.db")], "does not exist"))
    running = [(subprocess.Popen([sys.executable, "-m", "threadmind.cli", *argv], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True), said) for argv, said in cases]  # at once
    for process, said in running:
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 1, stderr
        assert said in stderr and "Traceback" not in stderr, stderr
        assert len(stderr.strip().splitlines()) == 1, stderr


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    code, out, _ = run(capsys, "--version")
    assert (code, out.strip()) == (0, f"threadmind {version('threadmind')}")


class TestDemo:
    def test_the_conversation_shows_what_memory_did(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        db = tmp_path / "demo.db"
        code, out, err = run(capsys, "demo", "--db", str(db), "--threads", "4", "--turns", "2")
        assert (code, err) == (0, "")
        assert "title, given by the title model after the first turn: \"Ada's trip to Tokyo\"" in out
        assert "  - **Diet**: vegetarian" in out  # the working memory the model wrote through its tool
        given = out.split("memory gave the model", 1)[1]
        assert "the working memory of 'ada': yes" in given
        found = given.split("messages found by semantic recall in thread 'demo-trip':", 1)[1].split("assistant:")[0]
        assert "User: Hi, I'm Ada. I'm planning a trip to Tokyo in April" in found  # across threads
        assert "assistant: Since Tokyo is coming up in April: a vegetarian ramen night" in out
        assert "title: 'Dinner ideas, Tokyo style'" in out
        assert "memory.recall('demo-trip') returns its last 4 messages, oldest first:" in out
        last = out.strip().splitlines()[-1]
        assert re.fullmatch(r"throughput: 16 messages saved \(4 threads x 2 turns, 16 at a time\) in [\d.]+ s: "
                            r"[\d,]+ msgs/s, p50 [\d.]+ ms, p99 [\d.]+ ms", last), last
        assert "[user]" not in out and "typescript" not in out  # no workload word salad in the conversation
        conn = sqlite3.connect(db)
        try:
            titles = dict(conn.execute("SELECT id, title FROM mastra_threads WHERE id LIKE 'demo-%'"))
        finally:
            conn.close()
        assert titles == {"demo-trip": "Ada's trip to Tokyo", "demo-dinner": "Dinner ideas, Tokyo style"}
        code, _, err = run(capsys, "demo", "--db", str(db), "--threads", "1", "--turns", "1")
        assert code == 1 and "already holds the demo's thread 'demo-trip'" in err

    def test_without_semantic_recall_nothing_is_found_across_threads(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        code, out, _ = run(capsys, "demo", "--no-semantic", "--threads", "2", "--turns", "1")
        assert code == 0
        found = out.split("messages found by semantic recall in thread 'demo-trip':", 1)[1].splitlines()[1]
        assert found.strip() == "(none)"
        assert "assistant: How about pasta?" in out  # the scripted answer reads what memory gave it

    def test_bench_keeps_the_workload_figures(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = run(capsys, "demo", "--bench", "--threads", "4", "--turns", "3")
        assert code == 0
        assert "Ada" not in out
        assert "workload: 4 threads x 3 turns under 4 resources, concurrency 16" in out
        assert re.search(r"HNSW index: 24 vectors inserted", out)
        assert re.search(r"last-10 recall: p50 [\d.]+ ms", out) and "semantic recall (resource scope)" in out


def test_threads_counts_the_messages_of_every_listed_thread_past_one_query_of_ids(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Counts are read for the listed threads only (in chunks of 500 ids), so 1 001 threads need three."""
    import anyio

    from threadmind import Memory
    from threadmind.codecs import Message
    from threadmind.stores import SQLiteStore

    db = tmp_path / "many.db"

    async def fill() -> None:
        async with Memory(storage=SQLiteStore(db, synchronous="NORMAL")) as memory:
            for t in range(1001):
                await memory.create_thread(thread_id=f"t{t}", resource_id="r1" if t % 2 else "r2")
                await memory.save_messages([Message.user(f"m{i}", thread_id=f"t{t}", resource_id="r1" if t % 2
                                                         else "r2") for i in range(t % 3 + 1)])

    anyio.run(fill)
    code, out, _ = run(capsys, "threads", "--db", str(db), "--json")
    assert code == 0
    counts = {t["id"]: t["messages"] for t in json.loads(out)}
    assert len(counts) == 1001 and all(counts[f"t{t}"] == t % 3 + 1 for t in range(1001))
    code, out, _ = run(capsys, "threads", "--db", str(db), "--resource", "r1", "--json")
    assert {t["id"]: t["messages"] for t in json.loads(out)} == {f"t{t}": t % 3 + 1 for t in range(1, 1001, 2)}
