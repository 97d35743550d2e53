"""The SQLite JSONB decoder: every element type, size encodings, the fixture's blobs and malformed input."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from threadmind.codecs._jsonb import decode_jsonb

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "mastra-1.71"  # a copy of ../shared/fixtures


def el(kind: int, payload: bytes = b"", *, width: int | None = None) -> bytes:
    """Encode one element; ``width`` forces a 1/2/4/8-byte size field."""
    size = len(payload)
    if width is None and size <= 11:
        return bytes([(size << 4) | kind]) + payload
    width = width or (1 if size < 256 else 2 if size < 65536 else 4)
    code = {1: 12, 2: 13, 4: 14, 8: 15}[width]
    return bytes([(code << 4) | kind]) + size.to_bytes(width, "big") + payload


def text(value: str, kind: int = 7) -> bytes:
    return el(kind, value.encode())


def obj(*pairs: tuple[bytes, bytes]) -> bytes:
    return el(12, b"".join(k + v for k, v in pairs))


def arr(*items: bytes) -> bytes:
    return el(11, b"".join(items))


@pytest.mark.skipif(not FIXTURE.exists(), reason="Mastra fixture not available")
def test_fixture_blobs_match_manifest() -> None:
    manifest = json.loads((FIXTURE / "manifest.json").read_text())
    threads = {t["id"]: t["metadata"] for t in manifest["threads"]}
    resources = {r["id"]: r["metadata"] for r in manifest["resources"]}
    conn = sqlite3.connect(f"file:{FIXTURE / 'memory.db'}?immutable=1", uri=True)
    try:
        blobs = [("thread", *row) for row in conn.execute("SELECT id, metadata FROM mastra_threads")]
        blobs += [("resource", *row) for row in conn.execute("SELECT id, metadata FROM mastra_resources")]
    finally:
        conn.close()
    decoded = 0
    for table, key, blob in blobs:
        if blob is None:
            continue
        assert isinstance(blob, bytes)
        expected = (threads if table == "thread" else resources)[key]
        got = decode_jsonb(blob)
        assert json.dumps(got, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False), key
        decoded += 1
    assert decoded == 6


def test_reference_example() -> None:
    assert decode_jsonb(bytes.fromhex("4C17611331")) == {"a": 1}
    assert decode_jsonb(b"\x0c") == {}
    assert decode_jsonb(b"\x0b") == []


@pytest.mark.parametrize(
    ("blob", "expected"),
    [
        (el(0), None),
        (el(1), True),
        (el(2), False),
        (el(3, b"-42"), -42),
        (el(3, b"9007199254740993"), 9007199254740993),
        (el(4, b"0x1F"), 31),
        (el(4, b"-0xff"), -255),
        (el(4, b"+7"), 7),
        (el(5, b"1.5e-7"), 1.5e-7),
        (el(5, b"-0.125"), -0.125),
        (el(6, b".5"), 0.5),
        (el(6, b"5."), 5.0),
        (el(6, b"+2.5E2"), 250.0),
        (el(6, b"-Infinity"), -math.inf),
        (el(6, b"NaN"), None),
        (text("café ✓ 日本語 🚀"), "café ✓ 日本語 🚀"),
        (text('quote \\" nl \\n tab \\t slash \\/ u \\u00e9 pair \\ud83d\\ude80', 8),
         'quote " nl \n tab \t slash / u é pair 🚀'),
        (text("hex \\x41 sq \\' vt \\v nul \\0 conti\\\nnued", 9), "hex A sq ' vt \v nul \0 continued"),
        (text('raw " and \\ kept', 10), 'raw " and \\ kept'),
        (el(7, b"x" * 300), "x" * 300),
        (el(7, b"abc", width=1), "abc"),
        (el(7, b"abc", width=2), "abc"),
        (el(7, b"abc", width=4), "abc"),
        (el(7, b"abc", width=8), "abc"),
    ],
)
def test_scalars(blob: bytes, expected: Any) -> None:
    got = decode_jsonb(blob)
    assert got == expected and type(got) is type(expected)


def test_nested_containers() -> None:
    blob = obj(
        (text("list"), arr(el(3, b"1"), el(5, b"2.5"), el(0), arr(el(2)), obj((text("k"), text("v"))))),
        (text("empty"), el(12)),
        (text("emptyList"), el(11)),
        (text("deep"), obj((text("a"), obj((text("b"), arr(arr(arr(el(1))))))))),
        (text("esc\\nkey", 8), el(1)),
    )
    assert decode_jsonb(blob) == {
        "list": [1, 2.5, None, [False], {"k": "v"}],
        "empty": {},
        "emptyList": [],
        "deep": {"a": {"b": [[[True]]]}},
        "esc\nkey": True,
    }
    deep = el(1)
    for _ in range(900):
        deep = arr(deep)
    assert decode_jsonb(deep) is not None  # iterative: no recursion limit


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x33",  # INT claims 3 bytes, none follow
        el(3, b"1") + b"\x00",  # trailing bytes
        el(13),  # reserved type
        el(14, b""),
        el(15),
        obj((el(3, b"1"), el(1))),  # label is not text
        obj((text("k"), arr())) [:-1] + b"",  # container shorter than its child claims
        el(12, text("k")),  # label without a value
        el(3, b"1.5"),  # INT with a fraction
        el(3, b"12a"),
        el(5, b"1e"),
        el(4, b"0xZZ"),
        el(6, b"Inf"),
        el(7, b"\xff\xfe"),  # not UTF-8
        text("bad \\q escape", 8),
        text("json5 only \\x41", 8),
        text("trailing \\", 9),
        el(0, b"x"),  # null with a payload
        bytes([0xC7]),  # 1-byte size field missing
        el(11, el(3, b"12"))[:-1],
    ],
)
def test_malformed_raises_value_error(blob: bytes) -> None:
    with pytest.raises(ValueError, match="malformed JSONB"):
        decode_jsonb(blob)


def test_too_deep_is_rejected() -> None:
    deep = el(1)
    for _ in range(1001):
        deep = arr(deep)
    with pytest.raises(ValueError, match="deeper"):
        decode_jsonb(deep)
