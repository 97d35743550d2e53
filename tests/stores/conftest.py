"""The store under test, for every kind: SQLite, in memory, PostgreSQL, and PostgreSQL behind PgBouncer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from threadmind.stores._memory import InMemoryStore
from threadmind.stores._postgres import PostgresStore
from threadmind.stores._protocol import Store
from threadmind.stores._sqlite import SQLiteStore


@pytest.fixture
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Any
    if request.param == "postgres":
        s = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=4)
    elif request.param == "pgbouncer":  # transaction pooling: no session state survives between statements
        s = PostgresStore(request.getfixturevalue("pgbouncer_dsn"), max_size=4, statement_cache_size=0)
    else:
        s = SQLiteStore(tmp_path / "memory.db", synchronous="NORMAL") if request.param == "sqlite" else InMemoryStore()
    async with s:
        assert isinstance(s, Store)
        yield s
