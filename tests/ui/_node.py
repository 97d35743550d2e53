"""The pinned ``ai`` npm package, installed once with ``npm ci`` into a cache folder outside the repository.

``tests/ui/js/package.json`` and its ``package-lock.json`` are installed into
``$THREADMIND_UI_CACHE`` (default ``~/.cache/threadmind-ui``)``/<lockfile hash>`` and reused. Without node/npm,
or when the registry cannot be reached, the tests that need it are skipped, unless ``THREADMIND_REQUIRE_NPM=1``
(CI), which makes that a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

JS = Path(__file__).resolve().parent / "js"
AI_VERSION = json.loads((JS / "package.json").read_text())["dependencies"]["ai"]
_NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH",
                   "network", "getaddrinfo")
_MIN_NODE = 18  # global fetch, structuredClone, web streams


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail when ``THREADMIND_REQUIRE_NPM=1`` says the real client must run."""
    if os.environ.get("THREADMIND_REQUIRE_NPM") == "1":
        pytest.fail(f"{reason} (THREADMIND_REQUIRE_NPM=1)")
    pytest.skip(reason)


def _cache_root() -> Path:
    configured = os.environ.get("THREADMIND_UI_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "threadmind-ui"


def _installed(folder: Path) -> bool:
    manifest = folder / "node_modules" / "ai" / "package.json"
    return manifest.is_file() and json.loads(manifest.read_text())["version"] == AI_VERSION


def node_binary() -> str:
    """The ``node`` executable, checked to be recent enough."""
    node = shutil.which("node")
    if node is None:
        unavailable("node is needed to run the AI SDK client")
    done = subprocess.run([node, "--version"], capture_output=True, text=True, check=False, timeout=30)
    major = int(done.stdout.strip().lstrip("v").split(".")[0] or 0) if done.returncode == 0 else 0
    if major < _MIN_NODE:
        unavailable(f"node >= {_MIN_NODE} is needed to run the AI SDK client (found {done.stdout.strip()!r})")
    return node


def install_ai_client() -> Path:
    """A folder whose ``node_modules`` holds the pinned ``ai`` package, with the client scripts copied in."""
    node_binary()
    npm = shutil.which("npm")
    if npm is None:
        unavailable("npm is needed to install the AI SDK client")
    lock = (JS / "package-lock.json").read_bytes()
    folder = _cache_root() / hashlib.sha256((JS / "package.json").read_bytes() + lock).hexdigest()[:16]
    if not _installed(folder):
        staging = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copyfile(JS / "package.json", staging / "package.json")
        shutil.copyfile(JS / "package-lock.json", staging / "package-lock.json")
        try:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
                cwd=staging, capture_output=True, text=True, timeout=540, check=False,
            )
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            unavailable("npm ci timed out (no network to the npm registry?)")
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            output = done.stdout + done.stderr
            network = [line for line in output.splitlines() if any(marker in line for marker in _NETWORK_ERRORS)]
            if network:
                unavailable(f"npm ci failed for lack of network: {network[0].strip()}")
            pytest.fail(f"npm ci failed:\n{output}")
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(staging, folder)
        except OSError:  # another process installed it first
            shutil.rmtree(staging, ignore_errors=True)
    assert _installed(folder), f"the ai package in {folder} is not version {AI_VERSION}"
    for script in JS.glob("*.mjs"):
        shutil.copyfile(script, folder / script.name)
    return folder
