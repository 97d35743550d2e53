"""A save's vector rows written by the save's own statement: what a vector store whose rows live in the message
store's database (``PgVectorStore`` beside a ``PostgresStore``) hands the save, so the vectors commit with the
messages in one round trip (``RowsForSave``, :class:`SavesVectorRows`)."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import msgspec
import numpy as np

from ..codecs import Message
from ._protocol import Lease

__all__ = ("SavesVectorRows", "VectorRows", "vector_codec")


class VectorRows(msgspec.Struct, frozen=True, kw_only=True):
    """A save's vectors for a ``PgVectorStore`` table of the save's own database, written by the save's statement
    (so they commit with the messages, or not at all): made by ``PgVectorStore.rows_for_save``.

    ``metadata`` is each row's JSON without ``created_at``, which the statement takes from the stored message (a
    re-saved message keeps its first time).
    """

    table: str  # the table, quoted (schema-qualified where the extension lives elsewhere)
    vector_type: str  # the column's type, as SQL writes it
    namespace: str
    schema: str  # where the extension lives (the type's binary codec is registered with it)
    vector_ids: list[str]
    message_ids: list[str]  # each row's message
    metadata: list[str]
    embeddings: list[bytes]  # little-endian float32s, exchanged in pgvector's binary form (:func:`vector_codec`)

    def params(self) -> list[Any]:
        """The save statement's parameters after the message save's own (``embeddings`` need :func:`vector_codec` on
        the connection)."""
        return [self.vector_ids, self.message_ids, self.metadata, self.embeddings]

    @staticmethod
    def joined(parts: Sequence[VectorRows]) -> VectorRows:
        """One save's rows from several threads' parts (of one table)."""
        first = parts[0]
        return msgspec.structs.replace(
            first, vector_ids=[v for p in parts for v in p.vector_ids],
            message_ids=[v for p in parts for v in p.message_ids], metadata=[v for p in parts for v in p.metadata],
            embeddings=[v for p in parts for v in p.embeddings])


class SavesVectorRows(Protocol):
    """A message store that writes :class:`VectorRows` in its save's statement."""

    async def save_messages_with_vectors(self, by_thread: Mapping[str, Sequence[Message]], vectors: VectorRows, *,
                                         mark_pending: bool = False,
                                         fence: Lease | None = None) -> dict[str, list[Message]]:
        """Upsert the messages (every thread's part, or none) and replace their vectors, in one transaction."""
        ...


_HEADER = struct.Struct(">HH")


def _encode(value: bytes | bytearray | memoryview | np.ndarray[Any, Any]) -> bytes:
    """pgvector's binary form (int16 dimension, int16 unused, big-endian float32s) of little-endian float32 bytes
    or a float array."""
    if isinstance(value, np.ndarray):
        floats = np.ascontiguousarray(value, dtype="<f4").ravel()
    else:
        floats = np.frombuffer(value, dtype="<f4")
    return _HEADER.pack(floats.size, 0) + floats.astype(">f4").tobytes()


def _decode(data: bytes) -> bytes:
    """Little-endian float32 bytes (threadmind's stored form) of a vector in pgvector's binary form."""
    dimension, _ = _HEADER.unpack_from(data)
    return np.frombuffer(data, dtype=">f4", count=dimension, offset=4).astype("<f4").tobytes()


async def vector_codec(conn: Any, schema: str) -> None:
    """Exchange ``vector`` values in binary (our little-endian float32 bytes in, out): no text formatting."""
    await conn.set_type_codec("vector", schema=schema, encoder=_encode, decoder=_decode, format="binary")
