from __future__ import annotations

from threadmind.codecs import Message, decode_message, encode_json


def test_roundtrip() -> None:
    m = Message.user("hi", thread_id="t", resource_id="r")
    assert decode_message(encode_json(m)) == m


async def test_async_runs() -> None:
    import anyio

    await anyio.lowlevel.checkpoint()
