"""Fixtures of the UI tests: the pinned ``ai`` npm package, installed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._node import install_ai_client


@pytest.fixture(scope="session")
def ai_client() -> Path:
    """A folder with ``node_modules/ai`` (the version of ``tests/ui/js/package.json``) and the client scripts."""
    return install_ai_client()
