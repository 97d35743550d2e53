"""Generated ids are RFC 4122 version-4 UUID strings, as Mastra's ``crypto.randomUUID()`` makes them."""

from __future__ import annotations

import uuid

from threadmind.codecs._json import new_id


def test_new_ids_are_random_version_4_uuids() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == value  # lower-case, canonical 8-4-4-4-12 form
    # every random bit varies across the sample (no stuck byte from the formatting)
    bits = {i: {int(v.replace("-", ""), 16) >> i & 1 for v in ids} for i in range(128)}
    fixed = {i for i, seen in bits.items() if len(seen) == 1}
    assert fixed == {76, 77, 78, 79, 62, 63}  # the version nibble (0100) and the variant bits (10)
