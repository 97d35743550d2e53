"""Storage: the ``Store`` contract, the SQLite, PostgreSQL and in-memory stores, and the vector stores (hnswlib,
pgvector).

Besides the public stores, this package's ``__init__`` is the one way other threadmind packages reach its
internals (the query checks both ``Memory`` and stores apply, the side-table protocols, Mastra interop).
"""

from __future__ import annotations

from .._public import present_as
from ._keywords import KeywordCandidate as KeywordCandidate
from ._keywords import KeywordMatches as KeywordMatches
from ._keywords import KeywordSearch as KeywordSearch
from ._keywords import Neighbours as Neighbours
from ._memory import InMemoryStore as InMemoryStore
from ._om import ObservationalMemoryStore as ObservationalMemoryStore
from ._om import OMRecord as OMRecord
from ._postgres import PostgresStore as PostgresStore
from ._protocol import STORE_METHODS as STORE_METHODS
from ._protocol import DateRange as DateRange
from ._protocol import Include as Include
from ._protocol import Lease as Lease
from ._protocol import Leases as Leases
from ._protocol import MessagePage as MessagePage
from ._protocol import MessageQuery as MessageQuery
from ._protocol import ReadModifyWrite as ReadModifyWrite
from ._protocol import ResourceChange as ResourceChange
from ._protocol import SaveHook as SaveHook
from ._protocol import SideRecords as SideRecords
from ._protocol import Store as Store
from ._protocol import ThreadChange as ThreadChange
from ._protocol import ThreadPage as ThreadPage
from ._protocol import ThreadsAndMessages as ThreadsAndMessages
from ._protocol import check_store as check_store
from ._sqlite import SQLiteStore as SQLiteStore
from ._vector_records import PendingVector as PendingVector
from ._vector_records import VectorRecord as VectorRecord
from ._vector_records import VectorRecords as VectorRecords
from ._vectors import HnswVectorStore as HnswVectorStore
from ._vectors import PgVectorStore as PgVectorStore
from ._vectors import VectorHit as VectorHit
from ._vectors import VectorStore as VectorStore
from ._vectors import VectorStoreStatistics as VectorStoreStatistics

__all__ = (
    "DateRange",
    "HnswVectorStore",
    "InMemoryStore",
    "Include",
    "KeywordCandidate",
    "KeywordMatches",
    "KeywordSearch",
    "Lease",
    "Leases",
    "MessagePage",
    "MessageQuery",
    "Neighbours",
    "OMRecord",
    "ObservationalMemoryStore",
    "PendingVector",
    "PgVectorStore",
    "PostgresStore",
    "ReadModifyWrite",
    "ResourceChange",
    "SQLiteStore",
    "STORE_METHODS",
    "SaveHook",
    "SideRecords",
    "Store",
    "ThreadChange",
    "ThreadPage",
    "ThreadsAndMessages",
    "VectorHit",
    "VectorRecord",
    "VectorRecords",
    "VectorStore",
    "VectorStoreStatistics",
    "check_store",
)

present_as(globals(), __name__)
