"""The vector stores the index actor tests run over: hnswlib over SQLite rows, and pgvector in a real PostgreSQL."""

from __future__ import annotations

from ._support import make_vector as make_vector
from ._support import vector_kind as vector_kind
