"""How much of the evidence recall hands a model, on LoCoMo-format conversations, through the public API.

Run: ``python -m bench.bench_recall [PATH ...] [--embedders hash,wordllama] [--modes vector,keyword,hybrid]
[--settings 4:1,5:0,10:0]``. ``PATH``: LoCoMo-format conversation files (default: the development split in
``../shared/datasets/locomo-dev``; nothing of the data is copied anywhere). Prints one JSON document.

Each conversation is stored as a chat would store it: one message per turn (``"Speaker: text"``, plus
``" [image: caption]"`` when the turn shows an image), one thread per session (sessions in order, turns in order),
one resource per conversation, in one SQLite file with the HNSW index, through ``Memory.save_messages``. Each question
of categories 1–4 is asked with ``Memory.search`` over the conversation's resource; the ``top_k`` hits and their
``message_range`` neighbours in their own session (what ``recall`` adds as context windows) are what the model would
get. Per mode × embedder × setting:

* ``evidence_recall``: the mean share of a question's evidence turns that came back;
* ``all_evidence``: the share of questions with every evidence turn back;
* ``session_hit_at_1``: the share whose first hit lies in a session holding evidence;
* ``chars``: the mean characters handed back per question (the text of every message returned);
* ``by_category``: evidence recall per LoCoMo category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop);
* ``query_ms``: ``Memory.search`` latency p50 / p99 per mode (the first setting's ``top_k``).

Evidence ids naming turns that do not exist are dropped; a question left with none is skipped. No language model
answers anything here: this measures what memory hands a model, not what the model makes of it.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from threadmind import Memory, Message
from threadmind.embedders import Embedder, HashEmbedder
from threadmind.stores import HnswVectorStore, SQLiteStore

DEV_SPLIT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo-dev"
MODES = ("vector", "keyword", "hybrid")
SETTINGS = ((4, 1), (5, 0), (10, 0))
_SESSION = re.compile(r"session_(\d+)")
_BASE = datetime(2023, 1, 1, tzinfo=UTC)


@dataclass
class Conversation:
    """One LoCoMo conversation as turns (id, session, position, text) and its questions."""

    name: str
    turns: list[tuple[str, int, int, str, datetime]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def position(self) -> dict[str, tuple[int, int]]:
        return {turn_id: (session, at) for turn_id, session, at, _, _ in self.turns}


def _session_start(raw: object, number: int) -> datetime:
    if isinstance(raw, str):
        for form in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
            try:
                return datetime.strptime(raw.strip(), form).replace(tzinfo=UTC)
            except ValueError:
                continue
    return _BASE + timedelta(days=number)


def load(path: Path) -> Conversation:
    """Turns and questions of a LoCoMo-format file (categories 1–4, evidence that exists)."""
    data = json.loads(path.read_text())
    conversation = Conversation(path.stem)
    sessions = sorted((int(m.group(1)), key) for key in data if (m := _SESSION.fullmatch(key)))
    for number, key in sessions:
        start = _session_start(data.get(f"{key}_date_time"), number)
        for at, turn in enumerate(data[key] or []):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [image: {turn['blip_caption']}]"
            conversation.turns.append((turn["dia_id"], number, at, text, start + timedelta(seconds=at)))
    known = {turn_id for turn_id, *_ in conversation.turns}
    for qa in data.get("qa", []):
        if qa.get("category") not in (1, 2, 3, 4):
            continue
        evidence = {e for e in qa.get("evidence", []) if e in known}
        if evidence:
            conversation.questions.append({"question": qa["question"], "evidence": evidence,
                                           "category": qa["category"]})
    return conversation


def _message_id(conversation: Conversation, turn_id: str) -> str:
    return f"{conversation.name}:{turn_id}"


async def _store(memory: Memory, conversations: Sequence[Conversation]) -> None:
    for conversation in conversations:
        by_session: dict[int, list[Message]] = {}
        speakers: dict[str, str] = {}
        for turn_id, session, _, text, at in conversation.turns:
            speaker = text.split(":", 1)[0]
            role = speakers.setdefault(speaker, "user" if not speakers else "assistant")
            thread = f"{conversation.name}-s{session}"
            by_session.setdefault(session, []).append(Message(
                id=_message_id(conversation, turn_id), role=role,  # type: ignore[arg-type]
                content=Message.user(text).content, created_at=at, thread_id=thread, resource_id=conversation.name))
        for session, messages in by_session.items():
            await memory.create_thread(thread_id=f"{conversation.name}-s{session}", resource_id=conversation.name)
            await memory.save_messages(messages)


def _embedders(names: Sequence[str]) -> dict[str, Embedder]:
    out: dict[str, Embedder] = {}
    for name in names:
        if name == "hash":
            out["hash"] = HashEmbedder(dim=384)
        elif name == "wordllama":
            try:
                from threadmind.embedders import WordLlamaEmbedder

                out["wordllama"] = WordLlamaEmbedder()
            except Exception as exc:  # not installed: said in the output, not fatal
                out_note = f"wordllama unavailable: {exc}"
                print(json.dumps({"note": out_note}), flush=True)
        else:
            raise SystemExit(f"unknown embedder {name!r} (hash, wordllama)")
    return out


def _percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50": 0.0, "p99": 0.0}
    array = np.array(samples) * 1000
    return {"p50": round(float(np.percentile(array, 50)), 3), "p99": round(float(np.percentile(array, 99)), 3)}


async def evaluate(conversations: Sequence[Conversation], embedder: Embedder | None, modes: Sequence[str],
                   settings: Sequence[tuple[int, int]], folder: Path) -> dict[str, Any]:
    """Figures of every mode and setting for one embedder (None: keyword mode alone, no vectors)."""
    options = {"lastMessages": False, "semanticRecall": {"search": "keyword" if embedder is None else "hybrid"}}
    extra: dict[str, Any] = {} if embedder is None else {"vector": HnswVectorStore(), "embedder": embedder}
    name = "none" if embedder is None else embedder.model_id.replace("/", "_")
    memory = Memory(storage=SQLiteStore(folder / f"recall-{name}.db", synchronous="OFF"), options=options, **extra)
    depths = sorted({k for k, _ in settings})
    results: dict[str, Any] = {}
    async with memory:
        started = time.perf_counter()
        await _store(memory, conversations)
        results["store_s"] = round(time.perf_counter() - started, 2)
        for mode in modes:
            latencies: list[float] = []
            ranked: dict[int, list[tuple[Conversation, dict[str, Any], list[str]]]] = {k: [] for k in depths}
            for conversation in conversations:
                for question in conversation.questions:
                    for depth in depths:  # a search of each depth, as recall asks it (the pools follow top_k)
                        began = time.perf_counter()
                        hits = await memory.search(question["question"], resource_id=conversation.name,
                                                   top_k=depth, search=mode)  # type: ignore[arg-type]
                        latencies.append(time.perf_counter() - began)
                        ranked[depth].append((conversation, question, [h.message.id.split(":", 1)[1] for h in hits]))
            results[mode] = {f"top{k}_range{r}": _score(ranked[k], k, r) for k, r in settings}
            results[mode]["query_ms"] = _percentiles(latencies)
    return results


def _score(ranked: Sequence[tuple[Conversation, dict[str, Any], list[str]]], top_k: int,
           message_range: int) -> dict[str, Any]:
    recall: list[float] = []
    every: list[bool] = []
    first: list[bool] = []
    chars: list[int] = []
    by_category: dict[int, list[float]] = {}
    texts: dict[tuple[str, str], str] = {}
    sessions: dict[str, dict[int, list[str]]] = {}
    for conversation, _, _ in ranked:
        if conversation.name not in sessions:
            order = sessions[conversation.name] = {}
            for turn_id, session, _, text, _ in conversation.turns:
                order.setdefault(session, []).append(turn_id)
                texts[conversation.name, turn_id] = text
    for conversation, question, hits in ranked:
        where = conversation.position
        returned: set[str] = set()
        for turn_id in hits[:top_k]:
            session, at = where[turn_id]
            turns = sessions[conversation.name][session]
            returned.update(turns[max(0, at - message_range):at + message_range + 1])
        evidence: set[str] = question["evidence"]
        share = len(evidence & returned) / len(evidence)
        recall.append(share)
        every.append(evidence <= returned)
        evidence_sessions = {where[e][0] for e in evidence}
        first.append(bool(hits) and where[hits[0]][0] in evidence_sessions)
        chars.append(sum(len(texts[conversation.name, t]) for t in returned))
        by_category.setdefault(question["category"], []).append(share)
    return {
        "evidence_recall": round(float(np.mean(recall)), 3),
        "all_evidence": round(float(np.mean(every)), 3),
        "session_hit_at_1": round(float(np.mean(first)), 3),
        "chars": round(float(np.mean(chars))),
        "by_category": {str(c): round(float(np.mean(v)), 3) for c, v in sorted(by_category.items())},
        "questions": len(recall),
    }


async def main(paths: Sequence[Path], embedders: Sequence[str], modes: Sequence[str],
               settings: Sequence[tuple[int, int]]) -> dict[str, Any]:
    conversations = [load(path) for path in paths]
    report: dict[str, Any] = {
        "conversations": [c.name for c in conversations],
        "turns": sum(len(c.turns) for c in conversations),
        "questions": sum(len(c.questions) for c in conversations),
        "settings": [f"top{k}_range{r}" for k, r in settings],
        "results": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        if "keyword" in modes:
            report["results"]["keyword"] = (await evaluate(conversations, None, ["keyword"], settings,
                                                           Path(folder)))["keyword"]
        vector_modes = [m for m in modes if m != "keyword"]
        for name, embedder in _embedders(embedders).items():
            if vector_modes:
                report["results"][name] = await evaluate(conversations, embedder, vector_modes, settings,
                                                         Path(folder))
    return report


def _cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="LoCoMo-format conversation files")
    parser.add_argument("--embedders", default="hash,wordllama")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--settings", default=",".join(f"{k}:{r}" for k, r in SETTINGS),
                        help="top_k:message_range pairs")
    args = parser.parse_args()
    paths = args.paths or sorted(DEV_SPLIT.glob("*.json"))
    if not paths:
        raise SystemExit(f"no conversation files (looked in {DEV_SPLIT})")
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r} ({', '.join(MODES)})")
    settings = [(int(k), int(r)) for k, r in (pair.split(":") for pair in args.settings.split(","))]
    report = anyio.run(main, paths, [e for e in args.embedders.split(",") if e], modes, settings)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    _cli()
