"""Fixtures for the Memory tests: a store parametrized over SQLite and in-memory, and a running Memory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests._factories import StoreFactory, StoreKind, new_store

from threadmind import Memory
from threadmind.stores import Store

from ..stores.vectors._support import make_vector as make_vector
from ..stores.vectors._support import vector_kind as vector_kind


@pytest.fixture(params=[pytest.param("sqlite", id="sqlite"), pytest.param("memory", id="inmemory")])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory for fresh stores of the parametrized kind (SQLite files under ``tmp_path``)."""
    counter = iter(range(1_000_000))
    kind: StoreKind = request.param

    def _make() -> Store:
        return new_store(kind, tmp_path / f"memory-{next(counter)}.db")

    return _make


@pytest.fixture
async def memory(make_store: StoreFactory) -> AsyncIterator[Memory]:
    """A started Memory with default options over the parametrized store."""
    async with Memory(storage=make_store()) as mem:
        yield mem


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def om_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind observational memory keeps its records in (PostgreSQL: a database of its own)."""
    if request.param == "postgres":
        from threadmind.stores import PostgresStore

        return PostgresStore(request.getfixturevalue("pg_dsn"))
    return new_store("memory" if request.param == "memory" else "sqlite", tmp_path / "om.db")
