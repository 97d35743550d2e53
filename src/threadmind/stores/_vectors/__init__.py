"""The vector stores: the ``VectorStore`` contract and ``VectorHit`` (``_contract``), ``HnswVectorStore`` (the
hnswlib engine: ``_hnsw`` the store, ``_hnsw_index`` the index, ``_hnsw_session`` its life (load, catch-up,
flush), ``_hnsw_snapshot`` and ``_hnsw_entries`` its files, ``_write_behind`` the rows written behind,
``_scope_blocks`` the exact search of small scopes, ``_parted`` maps that grow a part at a time) and
``PgVectorStore`` (``_pgvector``, ``_pgvector_table``, ``_pgvector_query``)."""

from ._contract import VectorHit as VectorHit
from ._contract import VectorStore as VectorStore
from ._contract import VectorStoreStatistics as VectorStoreStatistics
from ._hnsw import HnswVectorStore as HnswVectorStore
from ._pgvector import PgVectorStore as PgVectorStore

__all__ = ("HnswVectorStore", "PgVectorStore", "VectorHit", "VectorStore", "VectorStoreStatistics")
