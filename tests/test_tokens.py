"""Token estimation: the tokenx 1.3.0 port and the reference's Memory and TokenLimiter counters."""

from __future__ import annotations

import base64
import copy
import math
import random
import re
from typing import Any

import anyio
import anyio.to_thread
import pytest
from tests._factories import msg

from threadmind.codecs import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    Role,
    StepStartPart,
    TextPart,
    ToolInvocation,
    ToolInvocationPart,
    UnknownPart,
)
from threadmind.codecs._time import utc_now
from threadmind.errors import ConfigError
from threadmind.tokens import DefaultTokenCounter, TokenCounter, TokenLimiterCounter, estimate_tokens

# ----------------------------------------------------------------------------------------------------------------
# A literal transcription of tokenx 1.3.0's estimateTokenCount, used as an oracle for the optimised port.
# ----------------------------------------------------------------------------------------------------------------
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_PUNCT_CLASS = r"[.,!?;(){}\[\]<>:/\\|@#$%^&*+=`~_\-]"
_SPLIT = re.compile(f"([{_JS_SPACE}]+|{_PUNCT_CLASS}+)")
_WHITESPACE = re.compile(f"[{_JS_SPACE}]+")
_CJK = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\u3000-\u303f\uff00-\uffef\u30a0-\u30ff\u2e80-\u2eff\u31c0-\u31ef"
    "\u3200-\u32ff\u3300-\u33ff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\ud7b0-\ud7ff]"
)
_NUMERIC = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_PUNCT = re.compile(_PUNCT_CLASS)
_LANGUAGES = [
    (re.compile("[äöüßẞ]", re.IGNORECASE), 3.0),
    (re.compile("[éèêëàâîïôûùüÿçœæáíóúñ]", re.IGNORECASE), 3.0),
    (re.compile("[ąćęłńóśźżěščřžýůúďťň]", re.IGNORECASE), 3.5),
]


def _js_length(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def oracle(text: str) -> int:
    if not text:
        return 0
    total = 0
    for segment in (s for s in _SPLIT.split(text) if s):
        length = _js_length(segment)
        if _WHITESPACE.fullmatch(segment):
            continue
        if _CJK.search(segment):
            total += len(segment)
        elif _NUMERIC.fullmatch(segment) or length <= 3:
            total += 1
        elif _PUNCT.search(segment):
            total += math.ceil(length / 2) if length > 1 else 1
        else:
            cpt = next((c for pattern, c in _LANGUAGES if pattern.search(segment)), 6.0)
            total += math.ceil(length / cpt)
    return total


def message(parts: list[Part], role: Role = "assistant", content: str | None = None) -> Message:
    return msg(role, *parts, id="m1", at=utc_now(), text=content, thread_id=None, resource_id=None)


def tool(state: str, args: Any = None, result: Any = None, **extra: Any) -> ToolInvocationPart:
    invocation = ToolInvocation(state=state, tool_call_id="c1", tool_name="weather", args=args,  # type: ignore[arg-type]
                                result=result, **extra)
    return ToolInvocationPart(tool_invocation=invocation)


def client_stamp(tokens: float, keyed: bool = False) -> dict[str, Any]:
    entry = {"v": 0, "source": "client", "key": "client", "tokens": tokens}
    return {"mastra": {"tokenEstimate": {"client": entry} if keyed else entry}}


# ----------------------------------------------------------------------------------------------------------------


class TestEstimateTokens:
    @pytest.mark.parametrize(("text", "expected"), [
        pytest.param("hello", 1, id="word"),
        pytest.param("hello world", 2, id="two-words"),
        pytest.param("x" * 400, 67, id="400x"),
        pytest.param("The quick brown fox jumps over the lazy dog.", 10, id="fox"),
        pytest.param("", 0, id="empty"),
        pytest.param("   \n\t ", 0, id="whitespace"),
    ])
    def test_reference_values(self, text: str, expected: int) -> None:
        assert estimate_tokens(text) == expected

    @pytest.mark.parametrize(("text", "expected"), [
        pytest.param("日本語テキスト", 7, id="cjk-counts-code-points"),
        pytest.param("한국어", 3, id="hangul"),
        pytest.param("123456789", 1, id="numeric"),
        pytest.param("12.5", 3, id="decimal-splits-on-the-dot"),
        pytest.param("!!!!!", 3, id="punctuation-run"),
        pytest.param("abc", 1, id="short"),
        pytest.param("abcdefg", 2, id="word-over-six"),
        pytest.param("Straßenbahn", 4, id="german-3"),
        pytest.param("ÜBERMUT", 3, id="german-uppercase"),
        pytest.param("élégante", 3, id="french-3"),
        pytest.param("řeřicha", 2, id="czech-3.5"),
        pytest.param("hello\u00a0world", 2, id="nbsp-is-js-whitespace"),
        pytest.param("abcdefg\x1cabcdefg", 3, id="x1c-is-not-js-whitespace"),
        pytest.param("🚀🚀🚀🚀", 2, id="astral-counts-utf16-units"),
        pytest.param("🚀", 1, id="astral-short"),
        pytest.param("a\"quoted\"b", 2, id="quotes-are-not-punctuation"),
    ])
    def test_rules(self, text: str, expected: int) -> None:
        assert estimate_tokens(text) == expected
        assert oracle(text) == expected

    def test_matches_literal_port_on_random_text(self) -> None:
        alphabet = (
            list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789") + [" "] * 8 + list(".,!?;(){}[]<>:/\\|@#$%^&*+=`~_-'\"")
            + ["\n", "\t", "\u00a0", "\u3000", "\x1c", "\x85", "日", "本", "한", "カ", "あ", "ä", "Ü", "ß", "ẞ", "é",
               "Ç", "ł", "Ż", "ř", "ó", "🚀", "！", "д", "\u2028"]
        )
        rng = random.Random(1234)
        for _ in range(3000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            assert estimate_tokens(text) == oracle(text), repr(text)


class TestDefaultTokenCounter:
    def test_reference_messages(self) -> None:
        counter = DefaultTokenCounter()
        assert counter.count_message(Message.user("hello")) == 6
        assert counter.count_message(Message.assistant("hello")) == 7
        assert counter.count_messages([Message.user("hello"), Message.assistant("hello")]) == 24 + 6 + 7
        assert counter.count_messages([]) == 0
        assert counter.count_text("hello world") == 2
        assert counter.count_text("") == 0

    def test_is_a_token_counter(self) -> None:
        assert isinstance(DefaultTokenCounter(), TokenCounter)
        assert isinstance(TokenLimiterCounter(), TokenCounter)

    def test_content_string_counts_only_without_parts(self) -> None:
        counter = DefaultTokenCounter()
        # 1 ("user") + 3.8 + 2 ("hello world") = 6.8
        assert counter.count_message(message([], "user", "hello world")) == 7
        # The content mirror is not counted again next to the text part.
        assert counter.count_message(message([TextPart(text="hello")], "user", "hello world")) == 6

    def test_tool_call_with_json_args(self) -> None:
        # 2 ("assistant") + 2 ("weather") + 6 ('{"city":"Paris"}') + 3.8 - 12 = 1.8
        assert DefaultTokenCounter().count_message(message([tool("call", args={"city": "Paris"})])) == 2

    def test_tool_result_adds_a_message_and_can_go_negative(self) -> None:
        part = tool("result", args={"city": "Paris"}, result={"temp": 21})
        # 2 + 2 + 6 + 5 ('{"temp":21}') + 3.8 - 12 - 12 + 3.8 = -1.4
        assert DefaultTokenCounter().count_message(message([part])) == -1

    def test_tool_strings_have_no_json_adjustment(self) -> None:
        part = tool("result", args="Paris", result="sunny")
        # 2 + 2 + 1 + 1 + 3.8 + 3.8 = 13.6
        assert DefaultTokenCounter().count_message(message([part])) == 14

    @pytest.mark.parametrize("state", ["output-denied", "approval-responded"])
    def test_other_result_states_add_a_message(self, state: str) -> None:
        # 2 + 2 + 1 + 3.8 + 3.8 = 12.6
        assert DefaultTokenCounter().count_message(message([tool(state, args="Paris")])) == 13

    def test_output_error_counts_its_error_text(self) -> None:
        # 2 + 2 + 1 + 2 ("timeout") + 3.8 + 3.8 = 14.6
        part = tool("output-error", args="Paris", error_text="timeout")
        assert DefaultTokenCounter().count_message(message([part])) == 15

    def test_integral_floats_serialise_like_javascript(self) -> None:
        counter = DefaultTokenCounter()
        as_int = counter.count_message(message([tool("call", args={"n": 1})]))
        assert counter.count_message(message([tool("call", args={"n": 1.0})])) == as_int

    def test_reasoning_and_data_parts_count_zero(self) -> None:
        parts: list[Part] = [TextPart(text="hello"), ReasoningPart(reasoning="a long chain of thought " * 20),
                             UnknownPart({"type": "data-progress", "data": {"pct": 50}})]
        assert DefaultTokenCounter().count_message(message(parts)) == 7

    def test_other_parts_count_as_json(self) -> None:
        # 2 + 3.8 + 7 ('{"type":"step-start"}') = 12.8
        assert DefaultTokenCounter().count_message(message([StepStartPart()])) == 13
        source = UnknownPart({"type": "source-url", "url": "https://example.com"})
        assert DefaultTokenCounter().count_message(message([source])) == math.floor(
            2 + 3.8 + estimate_tokens('{"type":"source-url","url":"https://example.com"}') + 0.5)

    def test_attachments(self) -> None:
        counter = DefaultTokenCounter()
        png = base64.b64encode(b"\x89PNG" + bytes(96)).decode()
        assert counter.count_message(message([FilePart(data=png, mime_type="image/png")], "user")) == 770
        image = UnknownPart({"type": "image", "image": "https://example.com/cat.jpg"})
        assert counter.count_message(message([image], "user")) == 770
        pdf = base64.b64encode(bytes(100)).decode()
        assert counter.count_message(message([FilePart(data=pdf, mime_type="application/pdf")], "user")) == 30
        data_url = "data:application/pdf;base64," + pdf
        assert counter.count_message(message([FilePart(data=data_url, mime_type="application/pdf")], "user")) == 30
        remote = FilePart(data="https://example.com/a.pdf", mime_type="application/pdf")
        assert counter.count_message(message([remote], "user")) == 263  # 258 when the size is unknown

    @pytest.mark.parametrize("keyed", [False, True], ids=["entry", "keyed-map"])
    def test_client_estimate_is_honoured(self, keyed: bool) -> None:
        part = FilePart(data="ref:abc", mime_type="application/pdf", provider_metadata=client_stamp(42, keyed))
        # 1 + 3.8 + 42 = 46.8
        assert DefaultTokenCounter().count_message(message([part], "user")) == 47
        text = TextPart(text="hello", provider_metadata=client_stamp(10, keyed))
        assert DefaultTokenCounter().count_message(message([text], "user")) == 15

    def test_non_client_cache_entries_are_ignored(self) -> None:
        stale = {"mastra": {"tokenEstimate": {"v": 7, "source": "v7:tokenx", "key": "text:x", "tokens": 999}}}
        part = TextPart(text="hello", provider_metadata=stale)
        assert DefaultTokenCounter().count_message(message([part], "user")) == 6
        bad = TextPart(text="hello", provider_metadata=client_stamp(-5))
        assert DefaultTokenCounter().count_message(message([bad], "user")) == 6

    def test_token_estimate_is_not_part_of_the_json(self) -> None:
        plain = UnknownPart({"type": "custom", "value": "x"})
        stamped = UnknownPart({"type": "custom", "value": "x", "providerMetadata": {
            "mastra": {"tokenEstimate": {"v": 7, "source": "v7:tokenx", "key": "k", "tokens": 1}}}})
        counter = DefaultTokenCounter()
        assert counter.count_message(message([stamped])) == counter.count_message(message([plain]))

    def test_messages_are_not_mutated(self) -> None:
        metadata: dict[str, Any] = {"mastra": {"other": 1}, "openai": {"id": "x"}}
        parts: list[Part] = [TextPart(text="hello", provider_metadata=metadata), StepStartPart(),
                             tool("result", args={"a": [1, 2]}, result={"ok": True})]
        msg = message(parts)
        before = copy.deepcopy(msg)
        DefaultTokenCounter().count_message(msg)
        TokenLimiterCounter().count_message(msg)
        assert msg == before
        assert metadata == {"mastra": {"other": 1}, "openai": {"id": "x"}}

    def test_cache_is_optional_and_validated(self) -> None:
        messages = [Message.user("hello world " * 20), Message.assistant("Straßenbahn 日本語")]
        assert DefaultTokenCounter(cache_size=0).count_messages(messages) == DefaultTokenCounter().count_messages(
            messages)
        with pytest.raises(ConfigError, match="cache_size"):
            DefaultTokenCounter(cache_size=-1)

    async def test_shared_counter_across_threads(self) -> None:
        counter = DefaultTokenCounter(cache_size=16)  # small, so threads evict each other's entries
        texts = [f"message number {i} " * (1 + i % 7) for i in range(300)]
        expected = [DefaultTokenCounter(cache_size=0).count_message(Message.user(t)) for t in texts]
        got: dict[int, int] = {}

        async def run(i: int) -> None:
            got[i] = await anyio.to_thread.run_sync(counter.count_message, Message.user(texts[i]))

        async with anyio.create_task_group() as tg:
            for i in range(len(texts)):
                tg.start_soon(run, i)
        assert [got[i] for i in range(len(texts))] == expected


class TestTokenLimiterCounter:
    def test_text_messages(self) -> None:
        counter = TokenLimiterCounter()
        # tokens("userhello") = 2, + 3.8
        assert counter.message_tokens(Message.user("hello")) == pytest.approx(5.8)
        assert counter.count_message(Message.user("hello")) == 6
        # tokens("systemYou are helpful.") = 6, + 3.8
        assert counter.system_tokens("You are helpful.") == pytest.approx(9.8)
        assert counter.message_tokens(message([], "user", "hello world")) == pytest.approx(
            estimate_tokens("userhello world") + 3.8)

    def test_tool_parts(self) -> None:
        counter = TokenLimiterCounter()
        # tokens('assistantweather{"city":"Paris"}') = 9, - 12 + 3.8
        assert counter.message_tokens(message([tool("call", args={"city": "Paris"})])) == pytest.approx(0.8)
        # Only the result counts in the result state: tokens('assistant{"temp":21}') = 7, - 12 + 3.8 + 3.8
        result = tool("result", args={"city": "Paris"}, result={"temp": 21})
        assert counter.message_tokens(message([result])) == pytest.approx(2.6)
        # Other states add nothing.
        assert counter.message_tokens(message([tool("output-error", args="x")])) == pytest.approx(5.8)

    def test_other_parts_and_media(self) -> None:
        counter = TokenLimiterCounter()
        # Unlike the Memory counter, reasoning is serialised like any other part.
        assert counter.message_tokens(message([ReasoningPart(reasoning="think")])) > 5.8
        png = base64.b64encode(bytes(64)).decode()
        image = message([FilePart(data=png, mime_type="image/png")], "user")
        assert counter.message_tokens(image) == pytest.approx(1 + 3.8 + 765)
        pdf = message([FilePart(data=base64.b64encode(bytes(100)).decode(), mime_type="application/pdf")], "user")
        assert counter.message_tokens(pdf) == pytest.approx(1 + 3.8 + 25)

    def test_conversation(self) -> None:
        counter = TokenLimiterCounter()
        messages = [Message.user("hello"), Message.assistant("hello")]
        exact = counter.conversation_tokens(messages, system=["You are helpful."])
        assert exact == pytest.approx(24 + 9.8 + 5.8 + counter.message_tokens(messages[1]))
        assert counter.count_messages(messages) == math.ceil(24 + 5.8 + counter.message_tokens(messages[1]))
        assert counter.count_messages([]) == 0


def test_step_start_fast_path_counts_as_the_generic_part_walk() -> None:
    """Plain step-start parts skip the JavaScript-number walk; every shape must still count the same."""
    from threadmind.codecs import StepStartPart
    from threadmind.tokens import _js_json, _part_dict, _without_token_estimate

    counter = DefaultTokenCounter()
    shapes = [StepStartPart(), StepStartPart(created_at=1732000000123, model="gpt-5"), StepStartPart(model='é"x'),
              StepStartPart(provider_metadata={"a": 1.0}), StepStartPart(metadata={"ratio": 2.0, "n": [1.5, 3.0]})]
    for part in shapes:
        generic = counter.count_text(_js_json(_without_token_estimate(_part_dict(part))))
        assert counter._part_tokens(part) == (generic, 0, 0), part


def test_message_counts_are_memoised_per_object_never_per_reused_id() -> None:
    import msgspec

    from threadmind.codecs import Message

    counter = DefaultTokenCounter(cache_size=2)
    first = Message.user("hello there general kenobi", id="m1", thread_id="t", resource_id="r")
    expected = DefaultTokenCounter(cache_size=0).count_message(first)
    assert counter.count_message(first) == expected == counter.count_message(first)
    longer = msgspec.structs.replace(first, content=Message.user("word " * 50, id="m1").content)
    assert counter.count_message(longer) > expected  # a new object is counted, not looked up by message id
    # An entry whose object is not this message (what a reused id() would look like) is ignored.
    counter._by_message[id(longer)] = (first, 999)
    assert counter.count_message(longer) != 999
    for i in range(5):  # bounded: the oldest entries go
        counter.count_message(Message.user(f"m{i}", id=f"x{i}", thread_id="t", resource_id="r"))
    assert len(counter._by_message) == 2
