"""Every option Mastra 1.71 declares for observational memory and working memory builds a ``Memory``: the names
are read from the pinned ``@mastra/core``'s ``memory/types.d.ts``, so an option Mastra adds fails here by name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from threadmind.memory import Memory
from threadmind.models import ScriptedModel
from threadmind.stores._memory import InMemoryStore

from .._npm import install

INTEROP = Path(__file__).resolve().parents[2] / "interop"

pytestmark = pytest.mark.timeout(600)  # a cold npm install; warm runs take milliseconds

# A value Mastra accepts for each option (keys typed ``never``, the removed ones, are not options).
OBSERVATIONAL: dict[str, Any] = {
    "enabled": True, "model": ScriptedModel([]), "scope": "thread", "activateAfterIdle": "5m",
    "activateOnProviderChange": True, "shareTokenBudget": False, "temporalMarkers": True,
    "retrieval": {"vector": False, "scope": "thread", "instructions": "Look up exact figures."},
}
OBSERVATION: dict[str, Any] = {
    "model": ScriptedModel([]), "manageWorkingMemory": False, "messageTokens": 20_000, "modelSettings": {},
    "providerOptions": {"google": {"thinkingConfig": {"thinkingBudget": 215}}}, "maxTokensPerBatch": 10_000,
    "bufferTokens": 0.25, "bufferActivation": 0.7, "activateAfterIdle": 300_000, "activateOnProviderChange": False,
    "blockAfter": 1.5, "previousObserverTokens": 2000, "instruction": "Note dietary needs.", "threadTitle": True,
    "observeAttachments": "auto",
}
REFLECTION: dict[str, Any] = {
    "model": ScriptedModel([]), "observationTokens": 30_000, "modelSettings": {}, "providerOptions": {},
    "blockAfter": 1.5, "activateAfterIdle": "1hr", "activateOnProviderChange": True, "bufferActivation": 0.5,
    "instruction": "Remove duplicates.",
}
WORKING_MEMORY: dict[str, Any] = {
    "enabled": True, "scope": "resource", "useStateSignals": True, "agentManaged": True,
    "template": "# Notes\n- ", "version": "stable",
    "schema": {"type": "object", "properties": {"name": {"type": "string"}}},
}


def _block(text: str, opening: str) -> str:
    start = text.index(opening)
    end = text.index("\n}", start) if opening.startswith("export interface") else text.index("\n};", start)
    return text[start:end]


def _options(block: str) -> set[str]:
    """The option names of a declaration block (its four-space-indented properties, not those typed ``never``)."""
    return {name for name, kind in re.findall(r"^ {4}(\w+)\??: ([^;]+);", block, re.MULTILINE) if kind != "never"}


@pytest.fixture(scope="module")
def declared() -> dict[str, set[str]]:
    types = (install(INTEROP, "mastra-libsql") / "node_modules" / "@mastra" / "core" / "dist" / "memory" /
             "types.d.ts").read_text()
    working = _block(types, "type BaseWorkingMemory = {") + _block(types, "type TemplateWorkingMemory =") + \
        _block(types, "type SchemaWorkingMemory =")
    return {
        "observationalMemory": _options(_block(types, "export interface ObservationalMemoryOptions {")),
        "observation": _options(_block(types, "export interface ObservationalMemoryObservationConfig {")),
        "reflection": _options(_block(types, "export interface ObservationalMemoryReflectionConfig {")),
        "workingMemory": _options(working),
    }


def test_the_declarations_were_read(declared: dict[str, set[str]]) -> None:
    assert {"retrieval", "activateAfterIdle", "observation"} <= declared["observationalMemory"]
    assert {"bufferTokens", "previousObserverTokens"} <= declared["observation"]
    assert {"template", "schema", "agentManaged"} <= declared["workingMemory"]
    assert "use" not in declared["workingMemory"]  # typed never: removed


@pytest.mark.parametrize("group", ["observationalMemory", "observation", "reflection"])
def test_every_observational_memory_option_mastra_declares_is_accepted(declared: dict[str, set[str]],
                                                                        group: str) -> None:
    samples = {"observationalMemory": OBSERVATIONAL, "observation": OBSERVATION, "reflection": REFLECTION}[group]
    assert declared[group] - {"observation", "reflection"} == set(samples)  # a new Mastra option needs a sample
    for name in sorted(samples):
        om = {name: samples[name]} if group == "observationalMemory" else {group: {name: samples[name]}}
        memory = Memory(storage=InMemoryStore(), options={"observationalMemory": om})
        assert memory.options.observational_memory_config is not None, (group, name)


def test_every_working_memory_option_mastra_declares_is_accepted(declared: dict[str, set[str]]) -> None:
    assert declared["workingMemory"] == set(WORKING_MEMORY)
    for name in sorted(WORKING_MEMORY):
        working = {"enabled": True, name: WORKING_MEMORY[name]}
        memory = Memory(storage=InMemoryStore(), options={"workingMemory": working})
        assert memory.options.working_memory.enabled, name
