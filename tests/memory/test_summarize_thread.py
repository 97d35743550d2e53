"""``Memory.summarize_thread`` (Mastra's ``summarizeThread``): the Observer over a thread's newest messages, paged
back from the newest, bounded by count and tokens; the summary is returned and nothing is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from threadmind import Message
from threadmind.errors import ConfigError, ModelError, ResourceMismatch, ValidationError
from threadmind.memory import ExtractedValue, Extractor, Memory, ThreadSummary
from threadmind.models._scripted import ScriptedModel
from threadmind.processors._observation_text import OBSERVER_INSTRUCTIONS
from threadmind.stores._memory import InMemoryStore
from threadmind.stores._sqlite import SQLiteStore
from threadmind.testing import observational_engine

BASE = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


async def _thread(memory: Memory, count: int) -> None:
    await memory.create_thread(thread_id="t1", resource_id="r1")
    await memory.save_messages([Message.user(f"line {i:03d}", id=f"m{i:03d}", thread_id="t1", resource_id="r1",
                                             created_at=BASE + timedelta(seconds=i)) for i in range(count)])


def _lines(model: ScriptedModel) -> list[str]:
    prompt = model.requests[-1].messages[0].text
    return [line.split(": ", 1)[1] for line in prompt.splitlines() if line.startswith("[")]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_the_newest_messages_oldest_first_within_count_and_tokens(tmp_path: Path, kind: str) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    async with Memory(storage=store) as memory:
        await _thread(memory, 250)  # three pages of 100
        model = ScriptedModel(["* 🔴 the user counted lines\n<current-task>count on</current-task>"] * 4)
        everything = await memory.summarize_thread("t1", model=model, resource_id="r1")
        assert everything == ThreadSummary(summary="* 🔴 the user counted lines", extras={"currentTask": "count on"},
                                           messages=250)
        assert _lines(model) == [f"line {i:03d}" for i in range(250)]
        request = model.requests[-1]
        assert request.system == [OBSERVER_INSTRUCTIONS]
        await memory.summarize_thread("t1", model=model, last_messages=120, instructions="For the owner.")
        assert _lines(model) == [f"line {i:03d}" for i in range(130, 250)]
        assert model.requests[-1].system == [f"{OBSERVER_INSTRUCTIONS}\n\nFor the owner."]
        one = await memory.summarize_thread("t1", model=model, max_input_tokens=1)
        assert one.messages == 1 and _lines(model) == ["line 249"]  # the newest is always read
        assert (await memory.summarize_thread("t1", model=model, last_messages=0)).summary == ""
        assert model.calls == 3  # nothing to summarize: no call
        page = await memory.recall("t1", resource_id="r1", per_page=False)
        assert len(page.messages) == 250 and observational_engine(memory) is None  # nothing written


async def test_errors_name_what_is_wrong() -> None:
    async with Memory(storage=InMemoryStore()) as memory:
        await _thread(memory, 3)
        assert (await memory.summarize_thread("t-empty", model=ScriptedModel([]))).summary == ""
        with pytest.raises(ModelError):
            await memory.summarize_thread("t1", model=ScriptedModel([RuntimeError("provider down")]))
        with pytest.raises(ValidationError, match="max_input_tokens"):
            await memory.summarize_thread("t1", model=ScriptedModel([]), max_input_tokens=0)
        with pytest.raises(ValidationError, match="model"):
            await memory.summarize_thread("t1", model="gpt-4.1-mini")  # type: ignore[arg-type]
        with pytest.raises(ResourceMismatch):
            await memory.summarize_thread("t1", model=ScriptedModel([]), resource_id="someone-else")


class CallNote(msgspec.Struct):
    reason: str
    callback: bool


async def test_extractors_ask_for_their_sections_and_get_checked_values() -> None:
    """Mastra's ``extract``: each extractor's section is asked for after the observations; its value comes back
    under its slug (JSON checked against its schema, else text), out of the summary; a value that does not match
    is a reported failure; a hook sees each value and may replace it; a hook-only extractor sees the summary."""
    seen: list[tuple[str, object]] = []

    def shout(value: ExtractedValue) -> str:
        seen.append((value.extractor.slug, value.current))
        return str(value.current).upper()

    extract = [Extractor("Call summary", "A one-line summary of the call.", on_extracted=shout),
               Extractor("Call note", "Why the caller called, and whether to call back.", schema=CallNote),
               Extractor("Mood", "The caller's mood.", schema=CallNote),  # answered with text: a failure
               Extractor("Audit", on_extracted=lambda value: seen.append(("audit", value.current)))]
    output = ("* 🔴 (09:00) The caller asked about the invoice\n"
              "<call-summary>\n  invoice question  \n</call-summary>\n"
              '<call-note>{"reason": "invoice", "callback": true}</call-note>\n'
              "<mood>calm</mood>")
    async with Memory(storage=InMemoryStore()) as memory:
        await _thread(memory, 3)
        model = ScriptedModel([output])
        result = await memory.summarize_thread("t1", model=model, extract=extract)
        with pytest.raises(ConfigError, match='Duplicate extractor slug "a-b"'):
            await memory.summarize_thread("t1", model=model, extract=[Extractor("A b", "x"), Extractor("a-b", "y")])
    system = model.requests[0].system[0]
    assert "<current-task>" not in system and "Additional optional XML sections:" in system
    assert "<call-summary>\nA one-line summary of the call.\nInclude this section when" in system
    assert "<audit>" not in system  # a hook only: nothing asked of the model
    assert result.summary == "* 🔴 (09:00) The caller asked about the invoice"
    assert result.extracted == {"call-summary": "INVOICE QUESTION", "call-note": {"reason": "invoice",
                                                                                  "callback": True}}
    assert [f["slug"] for f in result.extraction_failures] == ["mood"]
    assert seen == [("call-summary", "invoice question"), ("audit", result.summary)]


def test_extractor_names_are_mastras_slugs() -> None:
    assert Extractor("Call Summary!", "x").slug == "call-summary"
    assert Extractor("it's  2 late", "x").slug == "its-2-late"
    for name, message in [("Observations", "reserved by Observational Memory"), ("42", "produced invalid slug"),
                          ("!!", "must produce a non-empty slug")]:
        with pytest.raises(ConfigError, match=message):
            Extractor(name, "x")
    with pytest.raises(ConfigError, match="must include instructions"):
        Extractor("No instructions")
