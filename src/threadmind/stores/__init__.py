"""Storage: the ``Store`` contract, the SQLite, PostgreSQL and in-memory stores, and the vector stores (hnswlib,
pgvector).

Besides the public stores, this package's ``__init__`` is the one way other threadmind packages reach its
internals (the query checks both ``Memory`` and stores apply, the side-table protocols, Mastra interop).
"""

from __future__ import annotations

from ._hnsw import HnswVectorStore as HnswVectorStore
from ._interop import import_mastra_vectors as import_mastra_vectors
from ._interop import mastra_vector_tables as mastra_vector_tables
from ._interop import vector_tables_in as vector_tables_in
from ._keywords import KEYWORD_TERMS as KEYWORD_TERMS
from ._keywords import NO_MATCHES as NO_MATCHES
from ._keywords import KeywordCandidate as KeywordCandidate
from ._keywords import KeywordMatches as KeywordMatches
from ._keywords import KeywordSearch as KeywordSearch
from ._keywords import Neighbours as Neighbours
from ._keywords import keyword_ranking as keyword_ranking
from ._keywords import query_terms as query_terms
from ._keywords import supports_keywords as supports_keywords
from ._memory import InMemoryStore as InMemoryStore
from ._om import InMemoryOMStore as InMemoryOMStore
from ._om import ObservationalMemoryStore as ObservationalMemoryStore
from ._om import OMRecord as OMRecord
from ._om import SQLiteOMStore as SQLiteOMStore
from ._om import lookup_key as lookup_key
from ._om import same_record as same_record
from ._pgvector import PgVectorStore as PgVectorStore
from ._postgres import PostgresStore as PostgresStore
from ._protocol import STORE_METHODS as STORE_METHODS
from ._protocol import DateRange as DateRange
from ._protocol import Include as Include
from ._protocol import Lease as Lease
from ._protocol import MessagePage as MessagePage
from ._protocol import MessageQuery as MessageQuery
from ._protocol import ResourceChange as ResourceChange
from ._protocol import SaveHook as SaveHook
from ._protocol import Store as Store
from ._protocol import ThreadChange as ThreadChange
from ._protocol import ThreadPage as ThreadPage
from ._protocol import check_store as check_store
from ._query import parse_date_range as parse_date_range
from ._query import parse_include as parse_include
from ._sqlite import SQLiteStore as SQLiteStore
from ._vector_protocol import VectorHit as VectorHit
from ._vector_protocol import VectorStore as VectorStore
from ._vector_protocol import VectorStoreStatistics as VectorStoreStatistics
from ._vector_protocol import as_vector_store as as_vector_store
from ._vector_records import PendingVector as PendingVector
from ._vector_records import SQLiteVectorRecords as SQLiteVectorRecords
from ._vector_records import VectorRecord as VectorRecord
from ._vector_records import VectorRecords as VectorRecords
from ._vector_records_memory import InMemoryVectorRecords as InMemoryVectorRecords
from ._write_behind import CoalescingRecords as CoalescingRecords

__all__ = (
    "KEYWORD_TERMS",
    "NO_MATCHES",
    "STORE_METHODS",
    "CoalescingRecords",
    "DateRange",
    "HnswVectorStore",
    "InMemoryOMStore",
    "InMemoryStore",
    "InMemoryVectorRecords",
    "Include",
    "KeywordCandidate",
    "KeywordMatches",
    "KeywordSearch",
    "Neighbours",
    "Lease",
    "MessagePage",
    "MessageQuery",
    "OMRecord",
    "ObservationalMemoryStore",
    "PendingVector",
    "PgVectorStore",
    "ResourceChange",
    "SQLiteOMStore",
    "PostgresStore",
    "SQLiteStore",
    "SQLiteVectorRecords",
    "SaveHook",
    "Store",
    "ThreadChange",
    "ThreadPage",
    "VectorRecord",
    "VectorHit",
    "VectorRecords",
    "VectorStore",
    "VectorStoreStatistics",
    "as_vector_store",
    "check_store",
    "keyword_ranking",
    "import_mastra_vectors",
    "lookup_key",
    "mastra_vector_tables",
    "parse_date_range",
    "parse_include",
    "query_terms",
    "same_record",
    "supports_keywords",
    "vector_tables_in",
)
