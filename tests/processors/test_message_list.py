"""MessageList sources, ordering and the same-id rules of reference §4.2-4.4."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests import _factories as factories

from threadmind.codecs import (
    Message,
    Part,
    Role,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
)
from threadmind.errors import ValidationError
from threadmind.processors._message_list import MessageList, Source

T0 = datetime(2025, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)


class Clock:
    """A settable clock for the list."""

    def __init__(self, when: datetime = T0) -> None:
        self.when = when

    def __call__(self) -> datetime:
        return self.when


def make_list(clock: Callable[[], datetime] | None = None) -> MessageList:
    counter = itertools.count(1)
    return MessageList(thread_id="t1", resource_id="r1", generate_id=lambda: f"gen-{next(counter)}",
                       now=clock or Clock())


def msg(id: str, role: Role = "user", text: str | None = "x", *, at: datetime = T0,
        parts: list[Part] | None = None, metadata: dict[str, Any] | None = None, thread_id: str = "t1") -> Message:
    if parts is None:
        parts = [TextPart(text=text)] if text is not None else []
    return factories.msg(role, *parts, id=id, at=at, text=text, metadata=metadata, thread_id=thread_id,
                         resource_id="r1")


def tool(call_id: str, state: str = "call", result: Any = None, *, executed: bool | None = None,
         approval: dict[str, Any] | None = None, pm: dict[str, Any] | None = None) -> ToolInvocationPart:
    return ToolInvocationPart(
        tool_invocation=ToolInvocation(state=state, tool_call_id=call_id, tool_name="t", args={"a": 1},  # type: ignore[arg-type]
                                       result=result, approval=approval),
        provider_executed=executed, provider_metadata=pm)


def _ids(counter: Iterator[int]) -> Callable[[], str]:
    """An id generator drawing from ``counter``: gen-1, gen-2 ..."""
    return lambda: f"gen-{next(counter)}"


def texts(message: Message | None) -> list[str]:
    assert message is not None
    return [p.text for p in message.content.parts if isinstance(p, TextPart)]


SEALED = {"mastra": {"sealed": True}}


class TestSources:
    def test_message_can_carry_several_sources(self) -> None:
        ml = make_list()
        ml.add(msg("a", text="hi"), "input")
        ml.add(msg("a", text="hi"), "memory")
        assert ml.sources_of("a") == {"memory", "input"}
        assert [m.id for m in ml.get_remembered()] == ["a"] == [m.id for m in ml.get_input()]

    def test_adding_as_response_removes_memory_and_input(self) -> None:
        ml = make_list()
        ml.add(msg("a1", "assistant", "stored"), "memory")
        ml.add(msg("a2", "assistant", "more", at=T0 + MS), "response")  # merges into the latest assistant
        assert ml.sources_of("a1") == {"response"}
        assert ml.get_remembered() == [] and [m.id for m in ml.get_response()] == ["a1"]
        assert texts(ml.get("a1")) == ["stored", "more"]

    def test_accessors_by_source(self) -> None:
        ml = make_list()
        ml.add(msg("m", at=T0), "memory")
        ml.add(msg("c", at=T0 + MS), "context")
        ml.add(msg("i", at=T0 + 2 * MS), "input")
        ml.add(msg("r", "assistant", at=T0 + 3 * MS), "response")
        assert [m.id for m in ml.get_all()] == ["m", "c", "i", "r"]
        assert [m.id for m in ml.get_context()] == ["c"]
        assert [ml.is_new(i) for i in "mcir"] == [False, False, True, True]

    def test_drain_unsaved_returns_input_and_response_once(self) -> None:
        ml = make_list()
        ml.add(msg("m", at=T0), "memory")
        ml.add(msg("r", "assistant", at=T0 + 2 * MS), "response")
        ml.add(msg("i", at=T0 + MS), "input")
        assert [m.id for m in ml.drain_unsaved()] == ["i", "r"]
        assert ml.drain_unsaved() == [] and not ml.is_new("i")
        assert len(ml) == 3

    def test_clear_source_removes_only_single_tagged(self) -> None:
        ml = make_list()
        ml.add(msg("both", at=T0), "input")
        ml.add(msg("both", at=T0), "memory")
        ml.add(msg("only", at=T0 + MS), "input")
        removed = ml.clear_source("input")
        assert [m.id for m in removed] == ["only"]
        assert "only" not in ml and ml.sources_of("both") == {"memory"}

    def test_remove_by_ids_and_contains(self) -> None:
        ml = make_list().add([msg("a"), msg("b", at=T0 + MS)], "input")
        assert "a" in ml and 3 not in ml
        assert [m.id for m in ml.remove_by_ids(["a", "zz"])] == ["a"]
        assert "a" not in ml and ml.sources_of("a") == frozenset() and len(ml) == 1

    def test_replace_keeps_sources_and_slot(self) -> None:
        ml = make_list().add([msg("a"), msg("b"), msg("c")], "input")
        ml.add(msg("b"), "memory")
        ml.replace(msg("b", text="edited"))
        assert [m.id for m in ml] == ["a", "b", "c"]
        assert texts(ml.get("b")) == ["edited"] and ml.sources_of("b") == {"memory", "input"}
        with pytest.raises(ValidationError, match="message.id"):
            ml.replace(msg("nope"))

    def test_system_buckets(self) -> None:
        ml = make_list()
        ml.add_system("tagged wm", tag="memory")
        ml.add_system("base")
        ml.add_system("other", tag="zz")
        ml.add_system("base")
        ml.add_system(msg("s", "system", "base2"))
        ml.add_system({"role": "system", "content": "tagged wm"}, tag="memory")
        assert ml.get_system_messages() == ["base", "base2", "tagged wm", "other"]
        assert ml.get_system_messages_by_tag("memory") == ["tagged wm"]
        assert ml.get_system_messages_by_tag("none") == []
        assert len(ml) == 0


class TestOrdering:
    def test_sorted_by_created_at_stable_for_ties(self) -> None:
        ml = make_list()
        ml.add([msg("b", at=T0 + MS), msg("a1", at=T0), msg("a2", at=T0)], "memory")
        ml.add(msg("a0", at=T0 - MS), "memory")
        assert [m.id for m in ml.get_all()] == ["a0", "a1", "a2", "b"]

    def test_generated_times_strictly_increase(self) -> None:
        ml = make_list()  # frozen clock
        ml.add(["q1", "q2", "q3"], "input")
        times = [m.created_at for m in ml.get_all()]
        assert times == [T0, T0 + MS, T0 + 2 * MS]

    def test_generated_time_after_future_stored_row(self) -> None:
        ml = make_list()
        future = T0 + timedelta(hours=1)
        ml.add(msg("stored", at=future), "memory")
        ml.add("next question", "input")
        last = ml.get_all()[-1]
        assert last.text == "next question" and last.created_at == future + MS

    def test_explicit_times_kept(self) -> None:
        ml = make_list()
        ml.add(msg("later", at=T0 + timedelta(hours=2)), "memory")
        ml.add(msg("early", at=T0 - timedelta(days=3)), "input")
        ml.add({"id": "db", "role": "user", "createdAt": "2020-01-01T00:00:00.000Z",
                "content": {"format": 2, "parts": [{"type": "text", "text": "x"}]}}, "input")
        assert [m.id for m in ml] == ["db", "early", "later"]
        assert ml.get("early").created_at == T0 - timedelta(days=3)  # type: ignore[union-attr]

    def test_generated_input_sorts_after_stored_rows_added_later(self) -> None:
        """An agent adds its input first and memory afterwards: the previous response, bumped 1 ms past its
        own input within the same millisecond, must not sort after the new question."""
        ml = make_list()  # frozen clock at T0
        ml.add(["next question", "and another"], "input")
        ml.add([msg("q1", at=T0 - MS), msg("r1", "assistant", "answer", at=T0)], "memory")
        assert [m.text for m in ml.get_all()] == ["x", "answer", "next question", "and another"]
        assert [m.created_at for m in ml.get_input()] == [T0 + MS, T0 + 2 * MS]
        ml.add("third", "input")  # the watermark moved with them
        assert ml.get_all()[-1].text == "third" and ml.get_all()[-1].created_at == T0 + 3 * MS

    def test_rows_from_a_clock_ahead_still_precede_the_generated_input(self) -> None:
        ml = make_list()
        ml.add("question", "input")
        ahead = T0 + timedelta(seconds=5)
        ml.add([msg("a", at=ahead), msg("b", at=ahead)], "memory")
        assert [m.id for m in ml.get_all()][:2] == ["a", "b"]
        assert ml.get_input()[0].created_at == ahead + MS

    def test_explicit_and_taken_over_times_are_not_moved(self) -> None:
        ml = make_list()
        ml.add(msg("explicit", at=T0 - timedelta(hours=1)), "input")
        ml.add({"role": "user", "content": "generated", "id": "gen"}, "input")
        ml.add([msg("gen", text="generated", at=T0 - timedelta(minutes=5)), msg("old", at=T0 + MS)], "memory")
        assert ml.get("explicit").created_at == T0 - timedelta(hours=1)  # type: ignore[union-attr]
        # The stored copy of "gen" took over (rule 1): its stored time stands.
        assert ml.get("gen").created_at == T0 - timedelta(minutes=5)  # type: ignore[union-attr]
        assert [m.id for m in ml.get_all()] == ["explicit", "gen", "old"]

    def test_generated_input_already_after_the_stored_rows_is_untouched(self) -> None:
        clock = Clock(T0 + timedelta(seconds=1))
        ml = make_list(clock)
        ml.add("later question", "input")
        ml.add(msg("stored", at=T0), "memory")
        assert ml.get_input()[0].created_at == T0 + timedelta(seconds=1)


    def test_skipping_the_sort_after_in_order_appends_changes_nothing(self) -> None:
        """Random adds (ties, out-of-order rows, repeated ids, assistant merges): the list must equal one that
        re-sorts after every message, as the list did before appends in order skipped the sort."""

        class AlwaysSorted(MessageList):
            def _add_one(self, message: Message, source: str, merge: bool, *, defer_sort: bool = False) -> bool:
                super()._add_one(message, source, merge)  # never deferred: sorted after every message
                self._messages.sort(key=lambda m: m.created_at)
                return False

            def _append_stored(self, message: Message) -> bool:
                return self._add_one(message, "memory", True)  # the general path, not the shortcut

        rng = random.Random(11)
        for _ in range(200):
            counters = [itertools.count(1), itertools.count(1)]
            lists = [cls(thread_id="t1", resource_id="r1", generate_id=_ids(c), now=Clock())
                     for cls, c in zip((MessageList, AlwaysSorted), counters, strict=True)]
            for _ in range(rng.randrange(1, 12)):
                batch = [msg(f"m{rng.randrange(6)}", rng.choice(["user", "assistant"]), f"t{rng.randrange(3)}",
                             at=T0 + rng.randrange(4) * MS) for _ in range(rng.randrange(1, 6))]
                source = rng.choice(["memory", "input", "response"])
                outcomes: list[str | None] = []
                for ml in lists:
                    try:
                        ml.add(batch, source)  # type: ignore[arg-type]
                        outcomes.append(None)
                    except ValidationError as exc:
                        outcomes.append(str(exc))
                assert outcomes[0] == outcomes[1]
                fast, slow = (ml.get_all() for ml in lists)
                assert fast == slow
                assert [lists[0].sources_of(m.id) for m in fast] == [lists[1].sources_of(m.id) for m in slow]


class TestEquality:
    def test_equal_memory_row_ignored_even_with_other_created_at(self) -> None:
        ml = make_list()
        ml.add(msg("a", text="same", at=T0), "memory")
        ml.add(msg("a", text="same", at=T0 + timedelta(days=1)), "memory")
        assert ml.get("a").created_at == T0  # type: ignore[union-attr]

    def test_provider_item_id_is_part_of_the_key(self) -> None:
        ml = make_list()
        first = msg("a", "assistant", parts=[TextPart(text="x", provider_metadata={"openai": {"itemId": "i1"}})])
        second = msg("a", "assistant", parts=[TextPart(text="x", provider_metadata={"openai": {"itemId": "i2"}})])
        ml.add(first, "memory")
        ml.add(second, "memory")  # not equal → replaced (last wins)
        assert ml.get("a").content.parts[0].provider_metadata == {"openai": {"itemId": "i2"}}  # type: ignore[union-attr]


class TestStoredOverLive:
    def test_stored_over_input_keeps_stored_content_and_slot(self) -> None:
        ml = make_list()
        ml.add(msg("u0", at=T0 - MS), "memory")
        live = msg("a", "assistant", parts=[TextPart(text="client text"), tool("c1", "result", 99),
                                            tool("c2", "result", 1)],
                   at=T0 + timedelta(hours=1), metadata={"client": True})
        ml.add(live, "input")
        stored_parts: list[Part] = [TextPart(text="stored text"), tool("c1", "call"), tool("c2", "result", 0)]
        stored = msg("a", "assistant", parts=stored_parts, at=T0, metadata={"stored": True})
        ml.add(stored, "memory")
        got = ml.get("a")
        assert got is not None
        assert texts(got) == ["stored text"] and got.content.metadata == {"stored": True}
        assert got.created_at == T0
        c1, c2 = got.content.parts[1], got.content.parts[2]
        assert isinstance(c1, ToolInvocationPart) and isinstance(c2, ToolInvocationPart)
        assert (c1.tool_invocation.state, c1.tool_invocation.result) == ("result", 99)  # advanced
        assert c2.tool_invocation.result == 0  # terminal stored state never advanced
        assert ml.sources_of("a") == {"memory", "input"}

    def test_stored_over_input_ignores_non_client_states(self) -> None:
        ml = make_list()
        ml.add(msg("a", "assistant", parts=[tool("c1", "approval-requested")]), "input")
        ml.add(msg("a", "assistant", parts=[tool("c1", "call")]), "memory")
        part = ml.get("a").content.parts[0]  # type: ignore[union-attr]
        assert isinstance(part, ToolInvocationPart) and part.tool_invocation.state == "call"

    def test_provider_executed_takes_only_approval_answers(self) -> None:
        ml = make_list()
        answer = {"id": "ap", "approved": True}
        ml.add(msg("a", "assistant", parts=[tool("c1", "result", 5), tool("c2", "approval-responded",
                                                                           approval=answer)]), "input")
        ml.add(msg("a", "assistant", parts=[tool("c1", "approval-requested", executed=True),
                                            tool("c2", "approval-requested", executed=True)]), "memory")
        c1, c2 = ml.get("a").content.parts  # type: ignore[union-attr]
        assert isinstance(c1, ToolInvocationPart) and isinstance(c2, ToolInvocationPart)
        assert c1.tool_invocation.state == "approval-requested"
        assert c2.tool_invocation.state == "approval-responded" and c2.tool_invocation.approval == answer

    def test_stored_over_response_user_both_sides(self) -> None:
        ml = make_list()
        ml.add(msg("u", text="live", metadata={"k": "live", "x": 1}), "response")
        ml.add(msg("u", text="stored", metadata={"k": "stored", "y": 2}, at=T0 - MS), "memory")
        got = ml.get("u")
        assert texts(got) == ["live"] and got.content.content == "live"  # type: ignore[union-attr]
        assert got.content.metadata == {"k": "live", "x": 1, "y": 2}  # type: ignore[union-attr]
        assert got.created_at == T0 - MS and ml.sources_of("u") == {"memory", "response"}  # type: ignore[union-attr]

    def test_stored_over_response_assistant(self) -> None:
        ml = make_list()
        ml.add(msg("a", "assistant", parts=[TextPart(text="Hello!"), tool("c1", "call"), TextPart(text="new")]),
               "response")
        ml.add(msg("a", "assistant", parts=[TextPart(text=" Hello! "), tool("c1", "result", 7)]), "memory")
        got = ml.get("a")
        assert got is not None
        assert texts(got) == ["Hello!", "new"]  # live spelling adopted, new live text added
        call = got.content.parts[1]
        assert isinstance(call, ToolInvocationPart)
        assert (call.tool_invocation.state, call.tool_invocation.result) == ("result", 7)  # stored outcome kept
        assert isinstance(got.content.parts[2], StepStartPart)
        assert ml.sources_of("a") == {"memory", "response"}

    def test_sealed_stored_copy_does_not_layer(self) -> None:
        ml = make_list()
        ml.add(msg("a", text="live"), "input")
        ml.add(msg("a", text="stored", metadata=SEALED), "memory")
        assert texts(ml.get("a")) == ["stored"] and ml.sources_of("a") == {"memory"}


class TestAssistantMergeOnAdd:
    def _base(self) -> MessageList:
        ml = make_list()
        ml.add(msg("a1", "assistant", "one"), "response")
        return ml

    def test_merges_into_latest_assistant(self) -> None:
        ml = self._base()
        ml.add(msg("a2", "assistant", "two", at=T0 + MS), "response")
        assert [m.id for m in ml] == ["a1"] and texts(ml.get("a1")) == ["one", "two"]

    @pytest.mark.parametrize("setup", ["merge_false", "sealed", "boundary", "completion", "other_thread",
                                       "memory_source", "user_latest", "data_only"])
    def test_no_merge_when(self, setup: str) -> None:
        ml = MessageList() if setup == "other_thread" else make_list()
        metas: dict[str, dict[str, Any]] = {"sealed": SEALED, "boundary": {"mastra": {"responseBoundary": True}},
                                            "completion": {"completionResult": True}}
        meta = metas.get(setup)
        first_parts: list[Part] | None = [UnknownPart({"type": "data-p", "data": 1})] if setup == "data_only" else None
        ml.add(msg("a1", "user" if setup == "user_latest" else "assistant", "one", metadata=meta, parts=first_parts),
               "response")
        incoming = msg("a2", "assistant", "two", at=T0 + MS, thread_id="t2" if setup == "other_thread" else "t1")
        source: Source = "memory" if setup == "memory_source" else "response"
        ml.add(incoming, source, merge=setup != "merge_false")
        assert [m.id for m in ml] == ["a1", "a2"]

    def test_data_only_latest_merges_with_same_id(self) -> None:
        ml = make_list()
        ml.add(msg("a1", "assistant", parts=[UnknownPart({"type": "data-p", "data": 1})], text=None), "response")
        ml.add(msg("a1", "assistant", "txt"), "response")
        assert len(ml) == 1 and texts(ml.get("a1")) == ["txt"]

    def test_merge_into_old_in_place_when_not_latest(self) -> None:
        ml = make_list()
        ml.add(msg("a", "assistant", parts=[tool("c1")], text=None), "response")
        ml.add(msg("u", "user", "next", at=T0 + MS), "input")
        ml.add(msg("a", "assistant", parts=[tool("c1", "result", 3)], text=None, at=T0 + 2 * MS), "response")
        assert [m.id for m in ml] == ["a", "u"]
        part = ml.get("a").content.parts[0]  # type: ignore[union-attr]
        assert isinstance(part, ToolInvocationPart) and part.tool_invocation.state == "result"


class TestSealedReplace:
    def test_sealed_old_extra_parts_become_new_message(self) -> None:
        ml = make_list()
        ml.add(msg("a", "assistant", "one", metadata=SEALED, at=T0), "memory")
        ml.add(msg("a", "assistant", parts=[TextPart(text="one"), TextPart(text="two")], text=None, at=T0 - MS),
               "response")
        assert [m.id for m in ml] == ["a", "gen-1"]
        new = ml.get("gen-1")
        assert texts(new) == ["two"] and new.created_at == T0 + MS  # type: ignore[union-attr]
        assert texts(ml.get("a")) == ["one"] and ml.sources_of("gen-1") == {"response"}

    def test_sealed_old_nothing_new_is_dropped(self) -> None:
        ml = make_list()
        ml.add(msg("a", "assistant", "one", metadata=SEALED), "memory")
        ml.add(msg("a", "assistant", "one"), "response")
        assert [m.id for m in ml] == ["a"] and ml.sources_of("a") == {"memory"}

    def test_sealed_at_on_parts_sets_sealed_count(self) -> None:
        ml = make_list()
        sealed_part = UnknownPart({"type": "text", "text": "one", "metadata": {"mastra": {"sealedAt": 1}}})
        ml.add(msg("a", "assistant", parts=[sealed_part, TextPart(text="later")], metadata=SEALED, text=None),
               "memory")
        ml.add(msg("a", "assistant", parts=[TextPart(text="one"), TextPart(text="later2"), TextPart(text="x")],
                   text=None, at=T0 + timedelta(seconds=5)), "response")
        new = ml.get("gen-1")
        assert texts(new) == ["later2", "x"] and new.created_at == T0 + timedelta(seconds=5)  # type: ignore[union-attr]

    def test_sealed_at_on_a_typed_part_counts_too(self) -> None:
        """Stored parts decode to typed parts: their ``metadata.mastra.sealedAt`` marks the sealed count."""
        ml = make_list()
        sealed_part = TextPart(text="one", metadata={"mastra": {"sealedAt": 1}})
        ml.add(msg("a", "assistant", parts=[sealed_part, TextPart(text="two")], metadata=SEALED, text=None),
               "memory")
        ml.add(msg("a", "assistant", parts=[TextPart(text="one"), TextPart(text="two"), TextPart(text="three")],
                   text=None, at=T0 + timedelta(seconds=5)), "response")
        new = ml.get("gen-1")
        assert new is not None and texts(new) == ["two", "three"]  # past the one sealed part
        assert texts(ml.get("a")) == ["one", "two"]

    def test_old_before_last_sealed_gets_fresh_id(self) -> None:
        ml = make_list()
        ml.add(msg("u", "user", "q", at=T0), "memory")
        ml.add(msg("s", "assistant", "obs", metadata=SEALED, at=T0 + MS), "memory")
        ml.add(msg("u", "user", "q edited", at=T0), "input")
        assert [m.id for m in ml] == ["u", "s", "gen-1"]
        assert texts(ml.get("u")) == ["q"] and texts(ml.get("gen-1")) == ["q edited"]
        assert ml.get("gen-1").created_at == T0 + MS  # type: ignore[union-attr]


class TestReplaceWholesale:
    def test_replace_takes_only_new_source(self) -> None:
        ml = make_list()
        ml.add(msg("u", text="a"), "context")
        ml.add(msg("u", text="b"), "input")
        assert texts(ml.get("u")) == ["b"] and ml.sources_of("u") == {"input"}


class TestConsequences:
    """The "Consequences verified against 1.71.0" list at the end of reference §4.4."""

    def test_memory_memory_same_id_different_text_last_wins(self) -> None:
        ml = make_list()
        ml.add(msg("a", text="first"), "memory")
        ml.add(msg("a", text="second"), "memory")
        assert texts(ml.get("a")) == ["second"] and len(ml) == 1 and ml.sources_of("a") == {"memory"}

    def test_input_then_memory_stored_text_wins(self) -> None:
        ml = make_list()
        ml.add(msg("a", text="typed"), "input")
        ml.add(msg("a", text="stored"), "memory")
        assert texts(ml.get("a")) == ["stored"] and ml.sources_of("a") == {"memory", "input"}

    def test_memory_then_input_replaces_wholesale(self) -> None:
        ml = make_list()
        ml.add(msg("a", text="stored"), "memory")
        ml.add(msg("a", text="typed"), "input")
        assert texts(ml.get("a")) == ["typed"] and ml.sources_of("a") == {"input"}

    def test_repeated_memory_loads_idempotent(self) -> None:
        ml = make_list()
        ml.add(msg("i", text="typed", at=T0 + MS), "input")
        rows = [msg("a", "assistant", parts=[TextPart(text="hi"), tool("c", "result", 1)], text=None),
                msg("i", text="stored", at=T0 + MS)]
        ml.add(rows, "memory")
        snapshot = (ml.get_all(), {m.id: ml.sources_of(m.id) for m in ml})
        for _ in range(3):
            ml.add(rows, "memory")
        assert (ml.get_all(), {m.id: ml.sources_of(m.id) for m in ml}) == snapshot

    def test_removed_message_can_be_added_again(self) -> None:
        ml = make_list()
        ml.add(msg("a", text="x"), "memory")
        ml.remove_by_ids(["a"])
        ml.add(msg("a", text="x"), "memory")
        assert texts(ml.get("a")) == ["x"] and ml.sources_of("a") == {"memory"}


def test_random_adds_keep_order_and_unique_ids() -> None:
    rng = random.Random(1234)
    clock = Clock()
    ml = make_list(clock)
    sources: list[Source] = ["memory", "input", "response", "context"]
    for step in range(1000):
        clock.when = T0 + timedelta(milliseconds=rng.randint(0, 50))
        role: Role = rng.choice(["user", "assistant", "assistant"])
        kind = rng.random()
        item: Any
        if kind < 0.2:
            item = f"text {step}"
        elif kind < 0.5:
            item = {"id": f"m{rng.randint(0, 40)}", "role": role, "content": f"c{rng.randint(0, 3)}"}
        else:
            parts: list[Part] = [TextPart(text=f"p{rng.randint(0, 3)}")]
            if role == "assistant" and rng.random() < 0.5:
                parts.append(tool(f"c{rng.randint(0, 5)}", rng.choice(["call", "result", "approval-responded"]), 1))
            meta = SEALED if rng.random() < 0.03 else None
            at = T0 + timedelta(milliseconds=rng.randint(-20, 80))
            item = msg(f"m{rng.randint(0, 40)}", role, parts=parts, text=None, at=at, metadata=meta)
        ml.add(item, rng.choice(sources), merge=rng.random() < 0.9)
        messages = ml.get_all()
        ids = [m.id for m in messages]
        assert len(ids) == len(set(ids)), step
        assert all(a.created_at <= b.created_at for a, b in itertools.pairwise(messages)), step
        assert all(ml.sources_of(i) for i in ids), step
    assert len(ml) > 20
