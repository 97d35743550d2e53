"""Observation groups read and written as Mastra 1.71 does: the pinned ``@mastra/memory`` parses the groups threadmind
writes, and both render them for the Reflector, combine their ranges and reconcile a reflection the same way."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from threadmind.processors._observation_groups import (
    combine_ranges,
    parse_groups,
    reconcile_after_reflection,
    render_groups,
    wrap_in_group,
)

from .._npm import install, node_binary

INTEROP = Path(__file__).resolve().parents[2] / "interop"

pytestmark = pytest.mark.timeout(600)  # a cold npm install

SCRIPT = """
import * as om from '@mastra/memory/processors';
const cases = JSON.parse(process.argv[1]);
const out = cases.map(([source, reflection]) => ({
  groups: om.parseObservationGroups(source),
  rendered: om.renderObservationGroupsForReflection(source) ?? null,
  combined: om.combineObservationGroupRanges(om.parseObservationGroups(source)),
  reconciled: om.parseObservationGroups(om.reconcileObservationGroupsFromReflection(reflection, source) ?? '')
    .map(({ range, kind, content }) => ({ range, kind, content })),
}));
console.log(JSON.stringify(out));
"""

CASES = [
    ("\n\n".join([wrap_in_group("Date: Dec 5, 2026\n* 🔴 (10:05) User flies TP1234", "m-1:m-2", "a1b2c3d4e5f60718"),
                  wrap_in_group("* 🟡 (10:07) User likes window seats", "m-3:m-4", "0f0e0d0c0b0a0908")]),
     "## Group `a1b2c3d4e5f60718`\n_range: `m-1:m-2`_\n\n* 🔴 (10:05) User flies TP1234\n"
     "* 🟡 (10:07) User likes window seats"),
    (wrap_in_group("* one", "12:15", "1111111111111111") + "\n\n" + wrap_in_group("* two", "3:7", "2222222222222222"),
     "* everything, condensed"),
    ("Date: Dec 5, 2026\n* no groups at all", "* condensed"),
    ("<observation-group id=\"x\" range=\"a:b\">\n* unclosed group", "* condensed"),
]


def _ours(source: str, reflection: str) -> dict[str, Any]:
    groups = parse_groups(source)
    reconciled = parse_groups(reconcile_after_reflection(reflection, source) or "")
    return {
        "groups": [{"id": g.id, "range": g.range, "content": g.content, **({"kind": g.kind} if g.kind else {})}
                   for g in groups],
        "rendered": render_groups(source),
        "combined": combine_ranges(groups),
        "reconciled": [{"range": g.range, "kind": g.kind, "content": g.content} for g in reconciled],
    }


def test_mastra_reads_and_reconciles_observation_groups_as_threadmind_does() -> None:
    folder = install(INTEROP, "mastra-libsql")
    done = subprocess.run([node_binary(), "--input-type=module", "-e", SCRIPT, json.dumps(CASES)], cwd=folder,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    theirs = json.loads(done.stdout)
    assert [_ours(*case) for case in CASES] == theirs
    assert theirs[0]["groups"][1]["range"] == "m-3:m-4" and theirs[1]["combined"] == "3:15"
