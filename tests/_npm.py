"""Pinned npm packages for the tests that run real JavaScript clients (Mastra's stores, the AI SDK).

Each package folder in the repository has a ``package.json`` and a committed ``package-lock.json``; it is
installed once with ``npm ci`` into ``$THREADMIND_NPM_CACHE`` (default ``~/.cache/threadmind-npm``)``/<name>-<hash
of both files>`` and reused. Before installing, the registry is asked once (a 5 s request, no retries), so a
machine without it skips at once, with the reason, instead of waiting for npm's retries. In CI (``CI=true`` or
``THREADMIND_REQUIRE_NPM=1``, which ``.ci/run`` sets) a missing node/npm or registry fails the test instead.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ("install", "node_binary", "required", "unavailable")

MIN_NODE = 18  # global fetch, structuredClone, web streams


def required() -> bool:
    """Whether these tests must run here (CI): then a missing prerequisite is a failure, not a skip."""
    return os.environ.get("THREADMIND_REQUIRE_NPM") == "1" or os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail in CI."""
    if required():
        pytest.fail(f"{reason} (CI: the JavaScript client tests must run)", pytrace=False)
    pytest.skip(reason)


def node_binary() -> str:
    """The ``node`` executable, checked to be recent enough."""
    node = shutil.which("node")
    if node is None:
        unavailable("node is not installed (needed to run the JavaScript clients)")
    done = subprocess.run([node, "--version"], capture_output=True, text=True, check=False, timeout=30)
    major = int(done.stdout.strip().lstrip("v").split(".")[0] or 0) if done.returncode == 0 else 0
    if major < MIN_NODE:
        unavailable(f"node >= {MIN_NODE} is needed (found {done.stdout.strip()!r})")
    return node


@functools.cache
def _registry_problem(npm: str) -> str | None:
    """Why the npm registry cannot be reached from here, or None when it can (asked once per session)."""
    done = subprocess.run([npm, "config", "get", "registry"], capture_output=True, text=True, check=False,
                          timeout=30)
    registry = (done.stdout.strip() if done.returncode == 0 else "") or "https://registry.npmjs.org/"
    try:
        with urllib.request.urlopen(registry.rstrip("/") + "/-/ping", timeout=5) as response:  # noqa: S310
            response.read(64)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"the npm registry {registry} cannot be reached ({exc})"
    return None


def _cache_root() -> Path:
    configured = os.environ.get("THREADMIND_NPM_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "threadmind-npm"


def _installed(folder: Path, pins: dict[str, str]) -> bool:
    for name, version in pins.items():
        manifest = folder / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text())["version"] != version:
            return False
    return True


def install(package_dir: Path, name: str) -> Path:
    """A folder whose ``node_modules`` holds ``package_dir``'s pinned dependencies (installed once, reused), with
    the folder's ``*.mjs`` scripts copied in."""
    node_binary()
    npm = shutil.which("npm")
    if npm is None:
        unavailable("npm is not installed (needed to install the JavaScript clients)")
    manifest, lock = package_dir / "package.json", package_dir / "package-lock.json"
    if not lock.is_file():
        pytest.fail(f"{lock} is missing: pinned installs need the lockfile (npm install --package-lock-only)")
    pins: dict[str, str] = json.loads(manifest.read_text()).get("dependencies", {})
    folder = _cache_root() / f"{name}-{hashlib.sha256(manifest.read_bytes() + lock.read_bytes()).hexdigest()[:16]}"
    if not _installed(folder, pins):
        problem = _registry_problem(npm)
        if problem is not None:
            unavailable(problem)
        staging = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copyfile(manifest, staging / "package.json")
        shutil.copyfile(lock, staging / "package-lock.json")
        try:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error", "--fetch-retries=1"],
                cwd=staging, capture_output=True, text=True, timeout=540, check=False,
            )
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            unavailable("npm ci timed out")
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.fail(f"npm ci failed in {package_dir}:\n{done.stdout}{done.stderr}")
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(staging, folder)
        except OSError:  # another process installed it first
            shutil.rmtree(staging, ignore_errors=True)
    assert _installed(folder, pins), f"{folder} does not hold the pinned versions {pins}"
    for script in package_dir.glob("*.mjs"):
        shutil.copyfile(script, folder / script.name)
    return folder
