"""The shared benchmark workload reproduces every check value of bench/WORKLOAD.md."""

from __future__ import annotations

import pytest

from threadmind.codecs import Message, TextPart
from threadmind.codecs._time import to_iso
from threadmind.workload import (
    BASE_TIME,
    STREAM_RESOURCE_QUERIES,
    STREAM_THREAD_QUERIES,
    WORDS,
    Workload,
    fnv1a32,
    gen_text,
    lcg_next,
    seed,
)

FIRST_TEXT = (
    "context schedule and might compare delta large golf cancel tokyo might table remember message user "
    "assistant window delta schedule charlie or recipe column must from node meeting blue thanks bag recipe"
)


@pytest.fixture(scope="module")
def all_messages() -> list[Message]:
    return [m for turn in Workload().iter_turns() for m in turn.messages]


class TestPrimitives:
    def test_word_list(self) -> None:
        assert len(WORDS) == 128
        assert len(set(WORDS)) == 128
        assert (WORDS[0], WORDS[127]) == ("agent", "india")
        assert fnv1a32(" ".join(WORDS)) == 1824841702

    def test_lcg_and_seed(self) -> None:
        assert lcg_next(0) == 1013904223
        assert seed(1, 0) == 109876
        assert 0 <= lcg_next(2**32 - 1) < 2**32
        assert 0 <= seed(3, 10**9) < 2**32

    def test_fnv1a32(self) -> None:
        assert fnv1a32("abc") == 440920331
        assert fnv1a32("") == 2166136261
        assert fnv1a32("bc", fnv1a32("a")) == fnv1a32("abc")

    def test_fnv1a32_hashes_utf16_code_units(self) -> None:
        def manual(units: list[int]) -> int:
            h = 2166136261
            for c in units:
                h = ((h ^ c) * 16777619) % 2**32
            return h

        assert fnv1a32("é") == manual([0xE9])
        assert fnv1a32("a🚀") == manual([0x61, 0xD83D, 0xDE80])  # the astral char is its surrogate pair

    def test_gen_text_stops_at_min_chars(self) -> None:
        text = gen_text(2, 7, 80)
        assert len(text) >= 80
        assert len(text) - len(text.split(" ")[-1]) - 1 < 80  # the text without its last word is too short
        assert all(word in WORDS for word in text.split(" "))


class TestMessages:
    def test_first_message(self, all_messages: list[Message]) -> None:
        first = all_messages[0]
        assert first.text == FIRST_TEXT
        assert (first.id, first.role, first.thread_id, first.resource_id) == ("msg-0-0-u", "user", "thread-0",
                                                                              "resource-0")
        assert to_iso(first.created_at) == "2025-01-01T00:00:00.000Z"

    def test_last_message(self, all_messages: list[Message]) -> None:
        last = all_messages[-1]
        assert (last.id, last.role, last.thread_id, last.resource_id) == ("msg-199-24-a", "assistant", "thread-199",
                                                                          "resource-19")
        assert to_iso(last.created_at) == "2025-01-01T02:46:39.000Z"

    def test_totals(self, all_messages: list[Message]) -> None:
        texts = [m.text for m in all_messages]
        assert len(texts) == 10_000 == Workload().message_count
        assert sum(map(len, texts)) == 2_029_569
        assert min(map(len, texts)) == 200
        assert max(map(len, texts)) == 210
        assert len(set(texts)) == 10_000
        assert fnv1a32("\n".join(texts)) == 1319858050

    def test_message_shape(self, all_messages: list[Message]) -> None:
        for n, message in enumerate(all_messages):
            assert (message.created_at - BASE_TIME).total_seconds() == n
            content = message.content
            assert content.format == 2
            assert len(content.parts) == 1 and isinstance(content.parts[0], TextPart)
            assert content.parts[0].text == content.content
        assert len({m.id for m in all_messages}) == 10_000

    def test_turns(self) -> None:
        w = Workload()
        turns = list(w.iter_turns())
        assert len(turns) == 5_000
        t, k, pair = turns[21 * 25 + 3]
        assert (t, k) == (21, 3)
        assert [m.id for m in pair] == ["msg-21-3-u", "msg-21-3-a"]
        assert [m.role for m in pair] == ["user", "assistant"]
        assert {m.thread_id for m in pair} == {"thread-21"} and {m.resource_id for m in pair} == {"resource-1"}
        assert pair[0].text == w.message_text(w.ordinal(21, 3, 0))
        assert pair == w.messages_for_turn(21, 3)

    def test_threads(self) -> None:
        w = Workload()
        records = w.thread_records()
        assert [r.id for r in records] == w.thread_ids()
        assert (records[45].title, records[45].resource_id) == ("Thread 45", "resource-5")
        assert len(w.resource_ids()) == 20

    def test_out_of_range_turn(self) -> None:
        with pytest.raises(IndexError):
            Workload().messages_for_turn(200, 0)
        with pytest.raises(IndexError):
            Workload().messages_for_turn(0, 25)


class TestQueries:
    @pytest.mark.parametrize(("stream", "expected"), [
        pytest.param(STREAM_RESOURCE_QUERIES, 4125736434, id="resource-scope"),
        pytest.param(STREAM_THREAD_QUERIES, 4048218641, id="thread-scope"),
    ])
    def test_query_texts(self, stream: int, expected: int) -> None:
        queries = list(Workload().iter_queries(stream))
        assert len(queries) == 500
        assert fnv1a32("\n".join(q.text for q in queries)) == expected
        assert all(len(q.text) >= 80 for q in queries)

    def test_query_targets(self) -> None:
        w = Workload()
        query = w.query(STREAM_THREAD_QUERIES, 437)
        assert (query.q, query.stream, query.thread_id, query.resource_id) == (437, 3, "thread-37", "resource-17")
        assert w.query_text(3, 437) == query.text == gen_text(3, 437, 80)
        with pytest.raises(IndexError):
            w.query(2, 500)


def test_small_workload_and_validation() -> None:
    w = Workload(threads=3, resources=2, turns=2, queries=4)
    assert [m.id for turn in w.iter_turns() for m in turn.messages][-1] == "msg-2-1-a"
    assert w.resource_id(2) == "resource-0"
    assert w.query(2, 3).thread_id == "thread-0"
    with pytest.raises(ValueError, match="threads"):
        Workload(threads=0)
