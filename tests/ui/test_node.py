"""Installing the pinned client: skipped without node/npm or a registry, a failure when CI requires it."""

from __future__ import annotations

import pytest

from ._node import AI_VERSION, JS, unavailable


def test_without_the_requirement_a_missing_client_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("THREADMIND_REQUIRE_NPM", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no node here"):
        unavailable("no node here")


def test_when_ci_requires_it_a_missing_client_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADMIND_REQUIRE_NPM", "1")
    with pytest.raises(pytest.fail.Exception, match="no node here"):
        unavailable("no node here")


def test_the_lockfile_pins_the_same_ai_version_as_package_json() -> None:
    import json

    lock = json.loads((JS / "package-lock.json").read_text())
    assert lock["packages"][""]["dependencies"]["ai"] == AI_VERSION
    assert lock["packages"]["node_modules/ai"]["version"] == AI_VERSION
    assert AI_VERSION.split(".")[0] == "7"
