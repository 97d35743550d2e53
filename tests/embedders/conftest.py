"""The embedder tests use the shared fake OpenAI server fixtures."""

from __future__ import annotations

from tests._openai_fixtures import fake_openai, sleeps

__all__ = ("fake_openai", "sleeps")
