"""The SQLite backend: ``SQLiteStore`` (``_store``) over Mastra's libsql schema (``_schema``), its group-commit
writer (``_group_commit``), the jobs and reads of its calls (``_jobs``), its connections (``_open``,
``_aiosqlite``), its rows (``_rows``), the processes on one file (``_peers``, ``_file_leases``), the WAL's fill
(``_wal_index``) and its keyword index (FTS5: ``_fts``, ``_fold``, ``_keyword_index``)."""

from ._group_commit import StoreStatistics as StoreStatistics
from ._store import SQLiteStore as SQLiteStore

__all__ = ("SQLiteStore", "StoreStatistics")
