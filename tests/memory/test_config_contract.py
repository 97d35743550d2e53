"""Memory options: SPEC's positional signatures, validation of configs built in Python, Mastra's extra keys."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from threadmind import (
    GenerateTitleConfig,
    IndexConfig,
    Memory,
    MemoryConfig,
    MessageHistoryConfig,
    MessageRange,
    SemanticRecallConfig,
    ToolInvocation,
    WorkingMemoryConfig,
)
from threadmind.embedders import HashEmbedder
from threadmind.errors import ConfigError
from threadmind.stores import HnswVectorStore, InMemoryStore


def test_configs_take_positional_arguments_in_spec_order() -> None:
    assert MessageHistoryConfig(2000, 100) == MessageHistoryConfig(max_tokens=2000, at_max_remove_tokens=100)
    assert MessageRange(2, 3) == MessageRange(before=2, after=3)
    assert IndexConfig("euclidean", 32) == IndexConfig(metric="euclidean", m=32)
    assert SemanticRecallConfig(3, 2, "thread").scope == "thread"
    assert WorkingMemoryConfig(True, "# Notes").template == "# Notes"
    assert GenerateTitleConfig(None, "Be brief").instructions == "Be brief"
    assert MemoryConfig(5).last_messages == 5
    call = ToolInvocation("call", "c1", "weather", {"city": "Paris"})
    assert (call.state, call.tool_call_id, call.tool_name, call.args) == ("call", "c1", "weather", {"city": "Paris"})


@pytest.mark.parametrize(("build", "needle"), [
    pytest.param(lambda: MemoryConfig(thread_concurrency="bogus"), "threadConcurrency", id="concurrency"),  # type: ignore[arg-type]
    pytest.param(lambda: MemoryConfig(read_only="yes"), "readOnly", id="read-only"),  # type: ignore[arg-type]
    pytest.param(lambda: MemoryConfig(semantic_recall="on"), "semanticRecall", id="semantic"),  # type: ignore[arg-type]
    pytest.param(lambda: MemoryConfig(working_memory=True), "workingMemory", id="wm-type"),  # type: ignore[arg-type]
    pytest.param(lambda: WorkingMemoryConfig(enabled=True, scope="global"), "workingMemory.scope",  # type: ignore[arg-type]
                 id="wm-scope"),
    pytest.param(lambda: SemanticRecallConfig(scope="global"), "semanticRecall.scope", id="sr-scope"),  # type: ignore[arg-type]
    pytest.param(lambda: SemanticRecallConfig(top_k=2.5), "topK", id="top-k"),  # type: ignore[arg-type]
    pytest.param(lambda: SemanticRecallConfig(threshold=float("nan")), "threshold", id="threshold"),
    pytest.param(lambda: IndexConfig(metric="manhattan"), "indexConfig.metric", id="metric"),  # type: ignore[arg-type]
    pytest.param(lambda: IndexConfig(m=2.5), "indexConfig.m", id="m"),  # type: ignore[arg-type]
])
def test_configs_built_in_python_are_validated(build: Any, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build()


def test_last_messages_follows_the_reference_number_rule() -> None:
    for bad in (1.5, -1, float("inf")):
        with pytest.raises(ConfigError, match="^lastMessages must be a finite non-negative integer"):
            Memory(storage=InMemoryStore(), options={"lastMessages": bad})
    assert Memory(storage=InMemoryStore(), options={"lastMessages": 5.0}).options.last_messages == 5


def test_mastra_keys_without_an_effect_here_are_accepted() -> None:
    memory = Memory(storage=InMemoryStore(), vector=HnswVectorStore(), embedder=HashEmbedder(), options={
        "filterIncompleteToolCalls": True,
        "semanticRecall": {"topK": 3, "indexName": "custom", "indexConfig": {"type": "hnsw", "hnsw": {"m": 8}}},
        "workingMemory": {"enabled": True, "version": "vnext", "useStateSignals": False},
        "generateTitle": {"minMessages": 2, "emitEvent": True},
    })
    recall = memory.options.semantic_recall_config
    assert recall is not None and recall.top_k == 3 and recall.index_config.type == "hnsw"


def test_index_config_in_mastras_shape_reaches_hnswlib_and_says_what_does_not_apply(
        caplog: pytest.LogCaptureFixture) -> None:
    vector = HnswVectorStore()
    Memory(storage=InMemoryStore(), vector=vector, embedder=HashEmbedder(), options={
        "semanticRecall": {"indexConfig": {"type": "hnsw", "hnsw": {"m": 12, "efConstruction": 48}}}})
    assert (vector.m, vector.ef_construction) == (12, 48)
    vector = HnswVectorStore()
    Memory(storage=InMemoryStore(), vector=vector, embedder=HashEmbedder(), options={
        "semanticRecall": {"indexConfig": {"type": "hnsw"}}})
    assert (vector.m, vector.ef_construction) == (8, 32)  # @mastra/pg's HNSW defaults for an explicit type
    with caplog.at_level(logging.INFO, logger="threadmind.index"):
        vector = HnswVectorStore()
        Memory(storage=InMemoryStore(), vector=vector, embedder=HashEmbedder(), options={
            "semanticRecall": {"indexConfig": {"type": "ivfflat", "ivf": {"lists": 50}}}})
    assert (vector.m, vector.ef_construction) == (16, 64)
    assert any("'ivfflat' does not apply to HnswVectorStore" in r.getMessage() and "ivf.lists is ignored"
               in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("options", "needle"), [
    pytest.param({"filterIncompleteToolCalls": False}, "filterIncompleteToolCalls", id="incomplete-calls"),
    pytest.param({"workingMemory": {"enabled": True, "version": "next"}}, "workingMemory.version", id="version"),
    pytest.param({"workingMemory": {"useStateSignals": True, "version": "vnext"}}, "useStateSignals is not supported "
                 "with workingMemory.version: 'vnext'", id="state-signals-with-vnext"),  # refused by Mastra too
    pytest.param({"workingMemory": {"agentManaged": "no"}}, "agentManaged", id="agent-managed-not-a-bool"),
    pytest.param({"lastMessages": 5, "topK": 3}, "topK", id="typo-still-fails"),
])
def test_mastra_keys_whose_behaviour_is_missing_are_refused_by_name(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Memory(storage=InMemoryStore(), vector=HnswVectorStore(), embedder=HashEmbedder(), options=options)


def test_index_config_sets_what_the_vector_store_left_at_its_defaults() -> None:
    vector = HnswVectorStore(m=24)
    Memory(storage=InMemoryStore(), vector=vector, embedder=HashEmbedder(), options={
        "semanticRecall": {"indexConfig": {"metric": "euclidean", "efSearch": 200}}})
    assert (vector.metric, vector.m, vector.ef_construction, vector.ef_search) == ("euclidean", 24, 64, 200)
    with pytest.raises(ConfigError, match="indexConfig sets m=32 but the HnswVectorStore was given m=24"):
        Memory(storage=InMemoryStore(), vector=HnswVectorStore(m=24), embedder=HashEmbedder(), options={
            "semanticRecall": {"indexConfig": {"m": 32}}})


class TestOptionKeys:
    """Dict options take Mastra's camelCase keys and the snake_case names of MemoryConfig; a typo is named with
    the closest known option."""

    def test_snake_case_keys_are_accepted_at_every_level(self) -> None:
        from threadmind._config import memory_config_from
        from threadmind.memory import MemoryConfig

        config = memory_config_from({"last_messages": 5, "semantic_recall": {"top_k": 3, "message_range": 2},
                                     "working_memory": {"enabled": True, "scope": "thread"},
                                     "message_history": {"max_tokens": 100}})
        assert isinstance(config, MemoryConfig)
        assert config.last_messages == 5 and config.working_memory.scope == "thread"
        recall = config.semantic_recall_config
        assert recall is not None and recall.top_k == 3 and recall.range.before == 2
        assert config.message_history is not None and config.message_history.max_tokens == 100

    @pytest.mark.parametrize(("options", "named", "suggested"), [
        pytest.param({"lastMessage": 5}, "`lastMessage`", "`lastMessages`", id="top-level"),
        pytest.param({"semanticRecall": {"topk": 3}}, "`semanticRecall.topk`", "`semanticRecall.topK`", id="nested"),
        pytest.param({"workingMemory": {"enabeld": True}}, "`workingMemory.enabeld`", "`workingMemory.enabled`",
                     id="snake-typo"),
    ])
    def test_a_typo_names_the_option_and_the_closest_one(self, options: dict[str, Any], named: str,
                                                         suggested: str) -> None:
        from threadmind._config import memory_config_from

        with pytest.raises(ConfigError) as info:
            memory_config_from(options)
        assert named in info.value.message and f"did you mean {suggested}" in info.value.message
