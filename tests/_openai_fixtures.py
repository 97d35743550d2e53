"""Shared fixtures: the fake OpenAI-compatible server and a recorder for retry delays (import them by name)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests._openai_server import FakeOpenAI

from threadmind.models import _http


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running fake server; stopped after the test."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Retry delays the HTTP layer asked for; nothing actually waits."""
    recorded: list[float] = []

    async def record(seconds: float) -> None:
        recorded.append(seconds)

    monkeypatch.setattr(_http, "_sleep", record)
    return recorded
