"""The PostgreSQL backend: ``PostgresStore`` (``_store``) over ``@mastra/pg``'s schema (``_schema``), its pool
(``_pool``), statements (``_statements``, ``_save``, ``_queries``) and rows (``_rows``), leases as rows
(``_lease_rows``), the observational-memory and vector records kept in the same database (``_om_records``,
``_vectors``), and its keyword index (a ``tsvector`` per message: ``_tsvector``, ``_keyword_search``,
``_keyword_index``)."""

from ._store import PostgresStore as PostgresStore

__all__ = ("PostgresStore",)
