"""Assistant merging (reference §4.5) and the module-level helpers other processors use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from threadmind.codecs import (
    Message,
    MessageContent,
    Part,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
)
from threadmind.processors._merge import merge_assistant, message_key, part_key
from threadmind.processors._message_list import (
    CLIENT_UPDATE_STATES,
    TOOL_STATE_RANK,
    is_system_reminder,
    strip_provider_metadata,
    tool_parts,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def asst(parts: list[Part], *, id: str = "a", at: datetime = T0, content: str | None = None,
         metadata: dict[str, Any] | None = None, mirror: list[Any] | None = None) -> Message:
    return Message(id=id, role="assistant", created_at=at,
                   content=MessageContent(parts=parts, content=content, metadata=metadata, tool_invocations=mirror))


def call(call_id: str = "c1", state: str = "call", **inv: Any) -> ToolInvocationPart:
    part_fields = {k: inv.pop(k) for k in ("provider_metadata", "provider_executed", "title", "preliminary")
                   if k in inv}
    inv.setdefault("args", {"a": 1})
    return ToolInvocationPart(tool_invocation=ToolInvocation(state=state, tool_call_id=call_id,  # type: ignore[arg-type]
                                                             tool_name="t", **inv), **part_fields)


def kinds(message: Message) -> list[str]:
    return [part_key(p) for p in message.content.parts]


class TestMerge:
    def test_metadata_shallow_merged_and_created_at_not_moved(self) -> None:
        latest = asst([TextPart(text="a")], metadata={"x": 1, "k": "old"})
        incoming = asst([TextPart(text="b")], at=T0 + timedelta(hours=1), metadata={"k": "new"}, id="b")
        merged = merge_assistant(latest, incoming)
        assert merged.content.metadata == {"x": 1, "k": "new"}
        assert merged.created_at == T0 and merged.id == "a"

    def test_result_updates_call_args_provider_metadata_and_mirror(self) -> None:
        latest = asst([call(provider_metadata={"p": {"a": 1}})])
        incoming = asst([call(state="result", result={"ok": 1}, step=2, args={"b": 2},
                              provider_metadata={"mastra": {"modelOutput": "o"}})])
        merged = merge_assistant(latest, incoming)
        (part,) = tool_parts(merged)
        inv = part.tool_invocation
        assert (inv.state, inv.result, inv.step, inv.args) == ("result", {"ok": 1}, 2, {"a": 1, "b": 2})
        assert part.provider_metadata == {"p": {"a": 1}, "mastra": {"modelOutput": "o"}}
        assert merged.content.tool_invocations is not None
        assert [e["toolCallId"] for e in merged.content.tool_invocations] == ["c1"]
        again = merge_assistant(merged, asst([call(state="result", result={"ok": 2})]))
        assert again.content.tool_invocations is not None and len(again.content.tool_invocations) == 1
        assert again.content.tool_invocations[0]["result"] == {"ok": 2}

    @pytest.mark.parametrize("state", ["approval-requested", "approval-responded", "output-denied", "output-error"])
    def test_approval_and_error_states_update_fields(self, state: str) -> None:
        latest = asst([call()])
        incoming = asst([call(state=state, approval={"id": "ap"}, error_text="boom", raw_input="{}",
                              provider_executed=True, title="T", preliminary=False, provider_metadata={"x": {}})])
        (part,) = tool_parts(merge_assistant(latest, incoming))
        inv = part.tool_invocation
        assert (inv.state, inv.approval, inv.error_text, inv.raw_input) == (state, {"id": "ap"}, "boom", "{}")
        assert (part.provider_executed, part.title, part.preliminary, part.provider_metadata) == (
            True, "T", False, {"x": {}})

    def test_call_states_change_nothing(self) -> None:
        latest = asst([call(state="result", result=1)])
        for state in ("call", "partial-call"):
            merged = merge_assistant(latest, asst([call(state=state)]))
            assert tool_parts(merged)[0].tool_invocation.state == "result" and len(merged.content.parts) == 1

    def test_parts_inserted_after_anchor_with_step_start(self) -> None:
        latest = asst([TextPart(text="A"), call()])
        incoming = asst([TextPart(text="A"), call(state="result", result=1), TextPart(text="B")])
        merged = merge_assistant(latest, incoming)
        assert kinds(merged) == ["textA", "tool-invocationc1result", "step-start", "textB"]

    def test_parts_inserted_before_anchor(self) -> None:
        latest = asst([call(), TextPart(text="after")])
        incoming = asst([TextPart(text="before"), call(state="result", result=1)])
        merged = merge_assistant(latest, incoming)
        assert kinds(merged) == ["textbefore", "tool-invocationc1result", "textafter"]

    def test_duplicate_copies_counted(self) -> None:
        merged = merge_assistant(asst([TextPart(text="ok")]), asst([TextPart(text="ok"), TextPart(text="ok")]))
        assert kinds(merged) == ["textok", "textok"]
        same = merge_assistant(merged, asst([TextPart(text="ok")]))
        assert kinds(same) == ["textok", "textok"]

    def test_step_start_copies_previous_model(self) -> None:
        latest = asst([StepStartPart(model="m1"), call()])
        merged = merge_assistant(latest, asst([call(state="result", result=1), TextPart(text="t")]))
        models = [p.model for p in merged.content.parts if isinstance(p, StepStartPart)]
        assert models == ["m1", "m1"]

    def test_no_extra_step_start_when_incoming_has_one(self) -> None:
        latest = asst([call()])
        merged = merge_assistant(latest, asst([call(state="result", result=1), StepStartPart(), TextPart(text="t")]))
        assert kinds(merged) == ["tool-invocationc1result", "step-start", "textt"]

    def test_appends_without_anchors(self) -> None:
        merged = merge_assistant(asst([TextPart(text="a")]), asst([call("c2"), TextPart(text="b")]))
        assert kinds(merged) == ["texta", "tool-invocationc2call", "step-start", "textb"]

    def test_content_string_follows_incoming_when_set(self) -> None:
        latest = asst([TextPart(text="a")], content="a")
        assert merge_assistant(latest, asst([TextPart(text="b")], content="b")).content.content == "b"
        assert merge_assistant(latest, asst([TextPart(text="b")])).content.content == "a"


class TestKeys:
    def test_data_parts_keyed_by_stable_json(self) -> None:
        a = UnknownPart({"type": "data-x", "data": {"a": 1, "b": 2}})
        b = UnknownPart({"type": "data-x", "data": {"b": 2, "a": 1}, "createdAt": 5})
        assert part_key(a) == part_key(b)
        assert part_key(a) != part_key(UnknownPart({"type": "data-x", "data": {"a": 2}}))

    def test_unknown_text_part_keys_like_text(self) -> None:
        sealed = UnknownPart({"type": "text", "text": "hi", "metadata": {"mastra": {"sealedAt": 1}}})
        assert part_key(sealed) == part_key(TextPart(text="hi"))

    def test_message_key_includes_tool_state(self) -> None:
        assert message_key(asst([call()])) != message_key(asst([call(state="result")]))


class TestHelpers:
    def test_rank_and_client_states(self) -> None:
        assert TOOL_STATE_RANK == {"partial-call": 0, "call": 1, "approval-requested": 2, "approval-responded": 3,
                                   "result": 4, "output-error": 4, "output-denied": 4}
        assert CLIENT_UPDATE_STATES == {"approval-responded", "result", "output-error", "output-denied"}

    def test_tool_parts(self) -> None:
        parts: list[Part] = [TextPart(text="x"), call("c1"), StepStartPart(), call("c2")]
        assert [p.tool_invocation.tool_call_id for p in tool_parts(asst(parts))] == ["c1", "c2"]

    def test_strip_provider_metadata(self) -> None:
        pm = {"openai": {"itemId": "i"}}
        message = asst([TextPart(text="x", provider_metadata=pm), call("c1", provider_metadata=pm),
                        call("c2", state="result", provider_metadata=pm),
                        UnknownPart({"type": "data-y", "data": 1, "providerMetadata": pm, "providerOptions": pm})])
        kept = strip_provider_metadata(message)
        assert [p.provider_metadata for p in kept.content.parts] == [None, None, pm, None]
        assert "providerOptions" not in kept.content.parts[3]  # type: ignore[operator]
        assert strip_provider_metadata(message, keep_client_outcomes=False).content.parts[2].provider_metadata is None
        plain = asst([TextPart(text="x")])
        assert strip_provider_metadata(plain) is plain

    @pytest.mark.parametrize(("role", "metadata", "text", "expected"), [
        pytest.param("user", {"systemReminder": {"type": "x"}}, "hi", True, id="meta-object"),
        pytest.param("user", {"systemReminder": "str"}, "hi", False, id="meta-not-object"),
        pytest.param("user", {"dynamicAgentsMdReminder": None}, "hi", True, id="agents-md"),
        pytest.param("user", None, "<system-reminder>do x</system-reminder>", True, id="text-prefix"),
        pytest.param("assistant", None, "<system-reminder>", False, id="assistant-text"),
        pytest.param("signal", {"signal": {"type": "system-reminder"}}, "", True, id="signal-reminder"),
        pytest.param("signal", {"signal": {"type": "reactive"}}, "", True, id="signal-reactive"),
        pytest.param("signal", {"signal": {"type": "user"}}, "", False, id="signal-user"),
        pytest.param("user", None, "plain", False, id="plain"),
    ])
    def test_is_system_reminder(self, role: str, metadata: dict[str, Any] | None, text: str, expected: bool) -> None:
        message = Message(id="m", role=role, created_at=T0,  # type: ignore[arg-type]
                          content=MessageContent(parts=[TextPart(text=text)], metadata=metadata))
        assert is_system_reminder(message) is expected
