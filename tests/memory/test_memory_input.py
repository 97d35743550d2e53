"""Bad input is refused with a typed error naming the problem and nothing written; awkward valid input round-trips."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from threadmind import Memory, Message, MessageContent, TextPart, ToolInvocation, ToolInvocationPart
from threadmind.codecs import decode_message, encode_json
from threadmind.errors import InvalidMessage, ResourceMismatch, ThreadNotFound, ValidationError

from ._support import BASE, all_ids, msg


async def _setup(memory: Memory) -> None:
    await memory.create_thread(resource_id="r1", thread_id="t1")
    await memory.create_thread(resource_id="r2", thread_id="t2")
    await memory.save_messages([msg("existing", ms=0)])
    await memory.save_messages([msg("theirs", "t2", "r2", ms=0)])


async def _nothing_written(memory: Memory) -> None:
    assert await all_ids(memory, "t1") == ["existing"]
    assert await all_ids(memory, "t2") == ["theirs"]
    (existing,) = await memory.list_messages_by_id(["existing"])
    assert existing.text == "text of existing"


def _bad(**changes: Any) -> Message:
    return msgspec.structs.replace(msg("new", ms=5), **changes)


@pytest.mark.parametrize(
    ("bad", "error", "needle"),
    [
        pytest.param(lambda: _bad(thread_id=None), ValidationError, "thread_id", id="missing-thread-id"),
        pytest.param(lambda: _bad(thread_id=""), ValidationError, "thread_id", id="empty-thread-id"),
        pytest.param(lambda: _bad(resource_id=None), ValidationError, "resource_id", id="missing-resource-id"),
        pytest.param(lambda: _bad(role="wizard"), ValidationError, "role", id="unknown-role"),
        pytest.param(lambda: _bad(id=""), ValidationError, "id", id="empty-id"),
        pytest.param(lambda: _bad(id=17), ValidationError, "id", id="int-id"),
        pytest.param(lambda: _bad(created_at="2025-01-01"), ValidationError, "created_at", id="str-created-at"),
        pytest.param(lambda: _bad(content="plain text"), ValidationError, "content", id="str-content"),
        pytest.param(lambda: 42, ValidationError, r"messages\[1\]", id="not-a-message"),
        pytest.param(lambda: {"id": "d", "role": "user", "threadId": "t1", "resourceId": "r1",
                              "createdAt": "not a date", "content": {"format": 2, "parts": []}},
                     InvalidMessage, "createdAt", id="dict-bad-date"),
        pytest.param(lambda: {"id": "d", "role": "robot", "threadId": "t1", "resourceId": "r1",
                              "createdAt": "2025-01-01T00:00:00.000Z", "content": {"format": 2, "parts": []}},
                     InvalidMessage, "role", id="dict-bad-role"),
        pytest.param(lambda: msg("new", "t2", "r1", ms=5), ResourceMismatch, "t2", id="other-resources-thread"),
        pytest.param(lambda: msg("new", "nope", "r1", ms=5), ThreadNotFound, "nope", id="missing-thread"),
        pytest.param(lambda: msg("theirs", "t1", "r1", ms=5), ValidationError, "theirs", id="id-of-other-thread"),
    ],
)
async def test_bad_message_refused_nothing_written(memory: Memory, bad: Any, error: type[Exception],
                                                   needle: str) -> None:
    await _setup(memory)
    batch = [msg("good", ms=3), bad(), msg("also-good", ms=4)]
    with pytest.raises(error, match=needle):
        await memory.save_messages(batch)
    await _nothing_written(memory)
    # the thread keeps working afterwards
    await memory.save_messages([msg("after", ms=9)])
    assert await all_ids(memory, "t1") == ["existing", "after"]


async def test_mixed_thread_batch_is_all_or_nothing(memory: Memory) -> None:
    """A batch spanning threads where one thread's part is refused writes none of it."""
    await _setup(memory)
    with pytest.raises(ResourceMismatch):
        await memory.save_messages([msg("good", ms=3), msg("bad", "t2", "r1", ms=4)])
    await _nothing_written(memory)
    with pytest.raises(ValidationError, match="theirs"):
        await memory.save_messages([msg("good", ms=3), msg("theirs", "t1", "r1", ms=4)])
    await _nothing_written(memory)


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        pytest.param(b"{not json", "JSON", id="not-json"),
        pytest.param(b"\xff\xfe\x00", None, id="not-utf8"),
        pytest.param(b'{"id": "x", "role": "user"}', "content", id="missing-content"),
        pytest.param(b'{"id": 5, "role": "user", "content": {"format": 2, "parts": []}, '
                     b'"createdAt": "2025-01-01T00:00:00.000Z"}', "id", id="int-id"),
        pytest.param(b'{"id": "x", "role": "wizard", "content": {"format": 2, "parts": []}, '
                     b'"createdAt": "2025-01-01T00:00:00.000Z"}', "role", id="bad-role"),
        pytest.param(b"[]", None, id="array"),
    ],
)
def test_decode_message_invalid_bytes(payload: bytes, needle: str | None) -> None:
    with pytest.raises(InvalidMessage, match=needle) as info:
        decode_message(payload)
    assert info.value.code == "INVALID_MESSAGE_CONTENT"


def test_decode_message_roundtrip() -> None:
    original = msg("x", text="hi")
    assert decode_message(encode_json(original)) == original
    assert decode_message(memoryview(encode_json(original))).id == "x"


class TestAwkwardValidInput:
    async def test_ten_megabyte_message(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        big = "x" * (10 * 1024 * 1024 - 7) + "the end"
        await memory.save_messages([msg("big", text=big)])
        (stored,) = await memory.list_messages_by_id(["big"])
        assert len(stored.text) == 10 * 1024 * 1024 and stored.text == big

    async def test_nul_emoji_rtl(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1", title="שלום \x00 👋")
        texts = {
            "nul": "before\x00after\x00",
            "emoji": "family 👨‍👩‍👧‍👦 flag 🇫🇷 astral 𝄞",
            "rtl": "مرحبا بالعالم \u202bembedded\u202c שלום",
            "mixed": "\u0000\ud7ff\ue000\U0010ffff",
        }
        await memory.save_messages([msg(k, ms=i, text=v) for i, (k, v) in enumerate(texts.items())])
        stored = {m.id: m.text for m in await memory.list_messages_by_id(list(texts))}
        assert stored == texts
        recalled = await memory.recall("t1", per_page=False)
        assert [m.text for m in recalled.messages] == list(texts.values())
        thread = await memory.get_thread_by_id("t1")
        assert thread is not None and thread.title == "שלום \x00 👋"

    async def test_message_id_with_odd_characters(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t'1\"; DROP")
        await memory.save_messages([msg("id'\x00🙂", "t'1\"; DROP", ms=1)])
        assert await all_ids(memory, "t'1\"; DROP") == ["id'\x00🙂"]

    async def test_ten_thousand_messages_in_one_batch(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        batch = [msg(f"m{i:05d}", ms=i // 7) for i in range(10_000)]  # many equal timestamps
        result = await memory.save_messages(batch)
        assert len(result.messages) == 10_000
        assert await all_ids(memory, "t1") == [m.id for m in batch]
        window = await memory.recall("t1")
        assert [m.id for m in window.messages] == [m.id for m in batch[-10:]] and window.total == 10_000

    async def test_rich_content_roundtrips(self, memory: Memory) -> None:
        await memory.create_thread(resource_id="r1", thread_id="t1")
        content = MessageContent(parts=[TextPart(text="a"), TextPart(text="b")], metadata={"nested": {"k": [1, 2]}},
                                 provider_metadata={"p": {"x": None}})
        message = Message(id="rich", role="assistant", content=content, created_at=BASE + timedelta(seconds=1),
                          thread_id="t1", resource_id="r1", type="custom")
        await memory.save_messages([message])
        (stored,) = await memory.list_messages_by_id(["rich"])
        assert stored == message


class TestUpdatesStayInTheirThread:
    async def test_update_cannot_move_message_to_another_thread(self, memory: Memory) -> None:
        await _setup(memory)
        for key in ("thread_id", "threadId"):
            with pytest.raises(ValidationError, match="t2"):
                await memory.update_messages([{"id": "existing", key: "t2"}])
        await _nothing_written(memory)

    async def test_update_cannot_give_message_another_resource(self, memory: Memory) -> None:
        """A message always carries its thread's resource id, or resource-scoped recall would leak it."""
        await _setup(memory)
        for key in ("resource_id", "resourceId"):
            with pytest.raises(ValidationError, match="resource"):
                await memory.update_messages([{"id": "existing", key: "r2"}])
        (stored,) = await memory.list_messages_by_id(["existing"])
        assert stored.resource_id == "r1"
        await memory.update_messages([{"id": "existing", "resource_id": "r1", "content": {"content": "same owner"}}])
        assert (await memory.list_messages_by_id(["existing"]))[0].text == "same owner"


@pytest.mark.parametrize("metadata", [
    pytest.param({"x": object()}, id="object"),
    pytest.param({"nested": {"deep": [1, object()]}}, id="nested"),
])
async def test_unserializable_metadata_is_validation_error(memory: Memory, metadata: dict[str, Any]) -> None:
    await memory.create_thread(resource_id="r1", thread_id="t1", metadata={"ok": 1})
    with pytest.raises(ValidationError, match="metadata"):
        await memory.create_thread(resource_id="r1", thread_id="t2", metadata=metadata)
    with pytest.raises(ValidationError, match="metadata"):
        await memory.update_thread("t1", metadata=metadata)
    with pytest.raises(ValidationError, match="metadata"):
        await memory.clone_thread("t1", new_thread_id="t3", metadata=metadata)
    assert await memory.get_thread_by_id("t2") is None and await memory.get_thread_by_id("t3") is None
    thread = await memory.get_thread_by_id("t1")
    assert thread is not None and thread.metadata == {"ok": 1}


class TestMessagesBuiltInPython:
    """msgspec does not type-check ``Message(...)``: what would not read back is refused before any write."""

    @pytest.mark.parametrize(("content", "needle"), [
        pytest.param(lambda: MessageContent(parts=[1]), r"messages\[0\]\.content\.parts\[0\]", id="int-part"),  # type: ignore[list-item]
        pytest.param(lambda: MessageContent(parts=[None]), r"messages\[0\]\.content\.parts\[0\]", id="none-part"),  # type: ignore[list-item]
        pytest.param(lambda: MessageContent(parts="abc"), r"messages\[0\]\.content\.parts", id="str-parts"),  # type: ignore[arg-type]
        pytest.param(lambda: MessageContent(format=3), r"messages\[0\]\.content\.format", id="format-3"),  # type: ignore[arg-type]
        pytest.param(lambda: MessageContent(parts=[TextPart(text=5)]), r"messages\[0\]\.content\.parts\[0\]\.text",  # type: ignore[arg-type]
                     id="int-text"),
        pytest.param(lambda: MessageContent(parts=[TextPart(text="a\ud800b")]), r"messages\[0\]\.content",
                     id="lone-surrogate"),
        pytest.param(lambda: MessageContent(parts=[ToolInvocationPart(tool_invocation=ToolInvocation(
            state="bogus", tool_call_id="c", tool_name="t"))]), r"messages\[0\]\.content\.parts\[0\]", id="tool-state"),  # type: ignore[arg-type]
        pytest.param(lambda: MessageContent(parts=[ToolInvocationPart(tool_invocation=ToolInvocation(
            state="call", tool_call_id="c", tool_name="t", args={"x": object()}))]), r"messages\[0\]\.content",
            id="unencodable-args"),
    ])
    async def test_bad_content_is_refused_and_the_thread_stays_readable(
        self, memory: Memory, content: Any, needle: str
    ) -> None:
        await _setup(memory)
        bad = Message(id="bad", role="user", content=content(), created_at=BASE, thread_id="t1", resource_id="r1")
        for save in (lambda: memory.save_messages([bad]), lambda: memory.storage.save_messages("t1", [bad])):
            with pytest.raises(InvalidMessage, match=needle):
                await save()
        assert await memory.list_messages_by_id(["bad"]) == []
        await memory.save_messages([msg("after", ms=9)])
        assert await all_ids(memory, "t1") == ["existing", "after"]
        assert [m.id for m in (await memory.recall("t1")).messages] == ["existing", "after"]

    async def test_bad_fields_are_refused_by_name(self, memory: Memory) -> None:
        await _setup(memory)
        for fields, needle in (({"role": []}, r"messages\[0\]\.role"), ({"created_at": "now"}, "created_at"),
                               ({"content": "text"}, r"messages\[0\]\.content")):
            base: dict[str, Any] = {"id": "bad", "role": "user", "content": MessageContent(), "created_at": BASE,
                                    "thread_id": "t1", "resource_id": "r1"}
            with pytest.raises(ValidationError, match=needle):
                await memory.save_messages([Message(**{**base, **fields})])
        await _nothing_written(memory)

    async def test_parts_given_as_dicts_are_stored_and_cached_as_typed_parts(self, memory: Memory) -> None:
        await _setup(memory)
        await memory.recall("t1")  # the thread actor caches the window: the save is merged into it
        loose = Message(id="loose", role="user", content=MessageContent(parts=[{"type": "text", "text": "hi"}]),  # type: ignore[list-item]
                        created_at=BASE + timedelta(seconds=5), thread_id="t1", resource_id="r1")
        saved = await memory.save_messages([loose])
        assert isinstance(saved.messages[0].content.parts[0], TextPart)
        recalled = (await memory.recall("t1")).messages
        assert [type(p).__name__ for p in recalled[-1].content.parts] == ["TextPart"]
        assert recalled[-1].text == "hi"
