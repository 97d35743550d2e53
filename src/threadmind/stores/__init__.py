"""Storage: the ``Store`` protocol, the embedded SQLite store, the in-memory store, and the hnswlib vector store."""

from __future__ import annotations

from ._hnsw import HnswVectorStore as HnswVectorStore
from ._memory import InMemoryStore as InMemoryStore
from ._postgres import PostgresStore as PostgresStore
from ._protocol import DateRange as DateRange
from ._protocol import Include as Include
from ._protocol import MessagePage as MessagePage
from ._protocol import MessageQuery as MessageQuery
from ._protocol import Store as Store
from ._protocol import ThreadPage as ThreadPage
from ._sqlite import SQLiteStore as SQLiteStore

__all__ = (
    "DateRange",
    "HnswVectorStore",
    "InMemoryStore",
    "Include",
    "MessagePage",
    "MessageQuery",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "ThreadPage",
)
