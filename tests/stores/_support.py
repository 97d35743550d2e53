"""What the store suites share: which kinds of store a test runs on."""

from __future__ import annotations

import pytest

STORES = ["sqlite", "memory", "postgres"]


def parametrize_stores(metafunc: pytest.Metafunc) -> None:
    """Every store for every test asking for ``store``; PostgreSQL behind PgBouncer's transaction pooling too for
    the classes whose operations it can change (``through_pgbouncer``: writes, transactions, their failures), not
    for single-statement reads, which it passes through unchanged. The PgBouncer variants run in CI's slow tier
    (the README's command keeps PostgreSQL itself, and PgBouncer's leases and keyword writes)."""
    if "store" in metafunc.fixturenames:
        kinds: list[object] = list(STORES)
        if getattr(metafunc.cls, "through_pgbouncer", False):
            kinds.append(pytest.param("pgbouncer", marks=pytest.mark.slow))
        metafunc.parametrize("store", kinds, indirect=True)
