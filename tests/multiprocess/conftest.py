"""The shared store of a multi-process test: one SQLite file, or one empty PostgreSQL database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """``{"kind", "target"}`` of a fresh store that every worker of the test opens."""
    if request.param == "sqlite":
        return {"kind": "sqlite", "target": str(tmp_path / "shared.db")}
    return {"kind": "postgres", "target": request.getfixturevalue("pg_dsn")}
