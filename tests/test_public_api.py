"""The public surface: ``__all__`` matches the SPEC in both directions, and imports stay light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SPEC_NAMES: dict[str, set[str]] = {
    "threadmind": {
        "Memory", "MemoryConfig", "MessageHistoryConfig", "SemanticRecallConfig", "MessageRange", "IndexConfig",
        "WorkingMemoryConfig", "ObservationalMemoryConfig", "GenerateTitleConfig", "Message", "MessageContent",
        "TextPart", "ReasoningPart", "ToolInvocationPart", "ToolInvocation", "StepStartPart", "FilePart",
        "SourcePart", "UnknownPart", "Thread", "Resource", "SaveResult", "RecallResult", "ThreadPage",
        "CloneResult", "Usage", "WorkingMemoryTemplate",
        # SPEC §2 is "threadmind.codecs, re-exported from threadmind": its codec functions and Part too
        "encode_json", "decode_message", "message_from_dict", "message_to_dict", "Part",
    },
    "threadmind.codecs": {"encode_json", "decode_message", "message_from_dict", "message_to_dict"},
    "threadmind.stores": {"SQLiteStore", "InMemoryStore", "HnswVectorStore"},
    "threadmind.embedders": {"Embedder", "HashEmbedder", "OpenAIEmbedder", "Embeddings"},
    "threadmind.processors": {
        "Processor", "MessageList", "RequestContext", "MemoryInputFilter", "MessageHistory", "SemanticRecall",
        "WorkingMemory", "TokenLimiter",
    },
    "threadmind.models": {
        "LanguageModel", "ModelRequest", "ModelResponse", "ToolCall", "ScriptedModel", "OpenAIChatModel",
    },
    "threadmind.agent": {"Agent", "Tool", "GenerateResult"},
    "threadmind.errors": {
        "ThreadmindError", "ConfigError", "ValidationError", "InvalidMessage", "ThreadNotFound", "ResourceMismatch",
        "StorageError", "ThreadBusy", "EmbeddingDimensionMismatch", "EmbedderError", "ModelError", "TripWire",
    },
}


@pytest.mark.parametrize("module_name", sorted(SPEC_NAMES))
def test_spec_names_are_exported(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(getattr(module, "__all__", ()))
    assert SPEC_NAMES[module_name] <= exported, SPEC_NAMES[module_name] - exported
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ lists {name} but it does not exist"


def test_top_level_all_is_exactly_the_spec() -> None:
    import threadmind

    assert set(threadmind.__all__) == SPEC_NAMES["threadmind"]
    assert list(threadmind.__all__) == sorted(threadmind.__all__)


def test_errors_form_one_tree() -> None:
    from threadmind import errors

    for name in SPEC_NAMES["threadmind.errors"]:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.ThreadmindError)
    assert issubclass(errors.InvalidMessage, errors.ValidationError)
    assert issubclass(errors.ConfigError, ValueError)


def test_import_does_not_load_optional_dependencies() -> None:
    code = (
        "import sys, threadmind, threadmind.stores, threadmind.agent, threadmind.processors, threadmind.embedders;"
        "bad = [m for m in ('httpx', 'opentelemetry.sdk') if m in sys.modules];"
        "print(','.join(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""




def test_structs_resolve_their_annotations_after_import() -> None:
    # msgspec resolves postponed annotations in the defining module; a re-export must not rename it.
    code = (
        "import threadmind, threadmind.models, threadmind.processors, threadmind.stores, threadmind.embedders;"
        "from threadmind._config import memory_config_from;"
        "c = memory_config_from({'generateTitle': {'minMessages': 2}, 'semanticRecall': {'topK': 3}});"
        "print(c.generate_title.min_messages, c.semantic_recall.top_k)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["2", "3"]


def test_codec_functions_are_re_exported_at_the_top() -> None:
    import threadmind
    import threadmind.codecs as codecs

    for name in ("encode_json", "decode_message", "message_from_dict", "message_to_dict", "Part"):
        assert getattr(threadmind, name) is getattr(codecs, name), name
        assert name in threadmind.__all__


def test_errors_take_a_code_and_a_message_as_spec_writes_them() -> None:
    from threadmind.errors import ConfigError, ThreadmindError, ValidationError

    spec_form = ThreadmindError("MY_CODE", "something broke")
    assert (spec_form.code, spec_form.message, str(spec_form)) == ("MY_CODE", "something broke", "something broke")
    keyword_form = ValidationError("bad field", code="X_CODE")
    assert (keyword_form.code, str(keyword_form)) == ("X_CODE", "bad field")
    default = ConfigError("bad option")
    assert (default.code, str(default)) == ("THREADMIND_CONFIG_INVALID", "bad option")
    sub = ValidationError("V_CODE", "bad value")
    assert isinstance(sub, ValueError) and (sub.code, sub.message) == ("V_CODE", "bad value")
    with pytest.raises(TypeError):
        ThreadmindError("A", "b", code="C")


def test_errors_are_importable_from_the_top() -> None:
    import threadmind
    from threadmind import errors

    for name in SPEC_NAMES["threadmind.errors"] | {"LeaseLost"}:
        assert getattr(threadmind, name) is getattr(errors, name), name


def test_the_quick_start_imports_from_the_top() -> None:
    """``from threadmind import Agent, Memory, SQLiteStore`` works (outside ``__all__``, like the errors)."""
    import threadmind
    from threadmind.agent import Agent
    from threadmind.stores import InMemoryStore, SQLiteStore

    assert (threadmind.Agent, threadmind.SQLiteStore, threadmind.InMemoryStore) == (Agent, SQLiteStore, InMemoryStore)
