"""Memory options: frozen, keyword-only records with Mastra's camelCase names on the wire.

A dict in Mastra's shape (``{"lastMessages": 5, "semanticRecall": {"topK": 3}}``) converts through
:func:`memory_config_from`, so a typo such as ``topk`` fails with its path. Checks live in
``__post_init__`` and raise :class:`~threadmind.errors.ConfigError` (also a ``ValueError``).
"""

from __future__ import annotations

import difflib
import functools
import math
import typing
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from ._config_checks import CFG as _CFG
from ._config_checks import instance as _instance
from ._config_checks import non_negative_int as _non_negative_int
from ._config_checks import one_of as _one_of
from ._config_checks import unsupported as _unsupported
from ._metadata_filter import MetadataFilter, compile_filter
from ._om_config import ObservationalMemoryConfig, parse_activation_ttl
from ._working_memory_schema import CompiledSchema, compile_schema, schema_repr
from .errors import ConfigError

__all__ = (
    "GenerateTitleConfig",
    "IndexConfig",
    "MemoryConfig",
    "MessageHistoryConfig",
    "MessageRange",
    "ObservationalMemoryConfig",
    "SemanticRecallConfig",
    "WorkingMemoryConfig",
    "merge_config",
    "memory_config_from",
)

class _DefaultLastMessages(int):
    """Marks ``last_messages`` left at its default, so a token budget can drop the count cap."""


_DEFAULT_LAST = _DefaultLastMessages(10)


class MessageHistoryConfig(msgspec.Struct, **_CFG):
    """A token budget for the whole context; ``at_max_remove_tokens`` defaults to 25 % of it."""

    max_tokens: int | float
    at_max_remove_tokens: int | float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not math.isfinite(self.max_tokens) or self.max_tokens < 0:
            raise ConfigError("messageHistory.maxTokens must be a finite non-negative number")
        remove = self.at_max_remove_tokens
        if remove is not None and (
            isinstance(remove, bool) or not math.isfinite(remove) or remove < 0 or remove > self.max_tokens
        ):
            raise ConfigError(
                "messageHistory.atMaxRemoveTokens must be a finite non-negative number no greater than maxTokens"
            )

    @property
    def remove_tokens(self) -> float:
        """The effective removal chunk: the given value or 25 % of ``max_tokens``."""
        return self.max_tokens * 0.25 if self.at_max_remove_tokens is None else self.at_max_remove_tokens


class MessageRange(msgspec.Struct, **_CFG):
    """How many messages around each semantic hit come with it."""

    before: int = 1
    after: int = 1

    def __post_init__(self) -> None:
        _non_negative_int(self.before, "messageRange.before")
        _non_negative_int(self.after, "messageRange.after")


class IndexConfig(msgspec.Struct, **_CFG):
    """The message vector index: its metric, and its kind and parameters.

    Mastra's shape (``type``: ``"hnsw"``, ``"ivfflat"`` or ``"flat"``; ``hnsw: {m, efConstruction}``; ``ivf: {lists}``)
    and threadmind's flat keys (``m``, ``efConstruction``, ``efSearch``) both work. As ``@mastra/pg`` builds it,
    ``type: "hnsw"`` without ``hnsw`` values means m 8, efConstruction 32, and ``ivfflat`` without ``lists`` means
    ``max(100, min(4000, 2 * sqrt(rows)))`` lists. Without ``type`` the index is HNSW with m 16, efConstruction 64
    (Mastra's default is IVFFlat: a deliberate difference, see the README). ``PgVectorStore`` builds what this
    says; ``HnswVectorStore`` is HNSW whatever the type (it logs when told otherwise).
    """

    metric: Literal["cosine", "euclidean", "dotproduct"] = "cosine"
    m: int = 16
    ef_construction: int = 64
    ef_search: int = 64
    type: Literal["ivfflat", "hnsw", "flat"] | None = None
    ivf: dict[str, Any] | None = None
    hnsw: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _one_of(self.metric, ("cosine", "euclidean", "dotproduct"), "indexConfig.metric")
        for name in ("m", "ef_construction", "ef_search"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"indexConfig.{name} must be a positive integer")
        if self.type is not None:
            _one_of(self.type, ("ivfflat", "hnsw", "flat"), "indexConfig.type")
        _sub_config(self.hnsw, "hnsw", {"m": int, "efConstruction": int})
        _sub_config(self.ivf, "ivf", {"lists": int, "dynamic": bool})
        hnsw = self.hnsw or {}
        for flat, nested, default in (("m", "m", 16), ("ef_construction", "efConstruction", 64)):
            ours = getattr(self, flat)
            if nested in hnsw and ours != default and hnsw[nested] != ours:
                raise ConfigError(f"indexConfig.{_camel(flat)} ({ours}) and indexConfig.hnsw.{nested} "
                                  f"({hnsw[nested]}) disagree; set it in one place")

    @property
    def kind(self) -> Literal["ivfflat", "hnsw", "flat"]:
        """The index to build: ``type``, HNSW when not given."""
        return self.type or "hnsw"

    @property
    def hnsw_m(self) -> int:
        """HNSW's m: ``hnsw.m``, else ``m`` when set, else 8 for an explicit ``type: "hnsw"`` (as Mastra), else 16."""
        return self._hnsw("m", "m", 8)

    @property
    def hnsw_ef_construction(self) -> int:
        """HNSW's ef_construction, chosen as :attr:`hnsw_m` is (32 for an explicit ``type: "hnsw"``)."""
        return self._hnsw("ef_construction", "efConstruction", 32)

    @property
    def lists(self) -> int | None:
        """IVFFlat's lists (None: from the table's rows when the index is built)."""
        value = (self.ivf or {}).get("lists")
        return None if value is None else int(value)

    def _hnsw(self, flat: str, nested: str, mastra_default: int) -> int:
        hnsw = self.hnsw or {}
        if nested in hnsw:
            return int(hnsw[nested])
        ours: int = getattr(self, flat)
        if ours != {"m": 16, "ef_construction": 64}[flat] or self.type != "hnsw":
            return ours
        return mastra_default


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _sub_config(value: Any, name: str, fields: dict[str, type]) -> None:
    """``indexConfig.<name>``: an object of these fields, integers positive."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ConfigError(f"indexConfig.{name} must be an object")
    for key, item in value.items():
        kind = fields.get(key)
        if kind is None:
            raise ConfigError(f"indexConfig.{name} has an unknown key {key!r} (known: {', '.join(fields)})")
        if kind is bool:
            if not isinstance(item, bool):
                raise ConfigError(f"indexConfig.{name}.{key} must be true or false")
        elif isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise ConfigError(f"indexConfig.{name}.{key} must be a positive integer")


def _default_index() -> IndexConfig:
    return IndexConfig()


SearchMode = Literal["hybrid", "vector", "keyword"]
"""How semantic recall ranks messages: by words and vectors together, by vectors only, by words only."""


class SemanticRecallConfig(msgspec.Struct, **_CFG):
    """Recall of older messages by meaning and by words (top-k hits plus context windows)."""

    top_k: int = 4
    message_range: int | MessageRange = 1
    scope: Literal["resource", "thread"] = "resource"
    max_chunk_chars: int = 16384
    threshold: float | None = None
    index_config: IndexConfig = msgspec.field(default_factory=_default_index)
    # Accepted for Mastra configs: Memory's processor always takes the dimension-derived index name, as
    # Mastra's does (reference §2).
    index_name: str | None = None
    #: Mastra's vector metadata filter: conditions over a message's metadata (its thread's metadata, its ids, role,
    #: text and time), combined with the scope; every mode applies it (see ``threadmind._metadata_filter``).
    filter: dict[str, Any] | None = None
    #: How messages are ranked: words and vectors together (``"hybrid"``), vectors only (the reference's recall,
    #: hit for hit), or words only (needs neither a vector store nor an embedder). See ``threadmind.search``.
    search: SearchMode = "hybrid"
    #: The keyword ranking's share of a hybrid score, 0 to 1 (0 behaves as ``"vector"``, 1 as ``"keyword"``);
    #: None: the library's default (0.9, measured on the development split of LoCoMo).
    keyword_weight: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ConfigError("semanticRecall.topK must be a positive integer")
        _one_of(self.search, ("hybrid", "vector", "keyword"), "semanticRecall.search")
        weight = self.keyword_weight
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                                   or not 0.0 <= weight <= 1.0):
            raise ConfigError(f"semanticRecall.keywordWeight must be a number from 0 to 1 or None, got {weight!r}")
        if isinstance(self.message_range, MessageRange):
            pass
        elif isinstance(self.message_range, int):
            _non_negative_int(self.message_range, "semanticRecall.messageRange")
        else:
            raise ConfigError("semanticRecall.messageRange must be a non-negative integer or {before, after}")
        _one_of(self.scope, ("resource", "thread"), "semanticRecall.scope")
        if isinstance(self.max_chunk_chars, bool) or not isinstance(self.max_chunk_chars, int) \
                or self.max_chunk_chars < 1:
            raise ConfigError("semanticRecall.maxChunkChars must be a positive integer")
        threshold = self.threshold
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not math.isfinite(threshold)):
            raise ConfigError(f"semanticRecall.threshold must be a finite number or None, got {threshold!r}")
        _instance(self.index_config, IndexConfig, "semanticRecall.indexConfig", "an IndexConfig")
        if self.filter is not None:
            compile_filter(self.filter)

    def metadata_filter(self) -> MetadataFilter | None:
        """``filter`` compiled (None: no filter)."""
        return None if self.filter is None else compile_filter(self.filter)

    @property
    def range(self) -> MessageRange:
        """``message_range`` as before/after counts."""
        if isinstance(self.message_range, MessageRange):
            return self.message_range
        return MessageRange(before=self.message_range, after=self.message_range)


class WorkingMemoryConfig(msgspec.Struct, **_CFG):
    """Persistent user facts: a Markdown template or a schema, per resource or per thread.

    ``schema`` is a JSON Schema dict, a Pydantic model class (v2) or a msgspec ``Struct`` type: its JSON Schema
    is what the model sees, every update is merged into the stored document and the whole is validated by it,
    and :meth:`Memory.get_working_memory_object` reads the document back as the type (see
    ``threadmind._working_memory_schema``). A JSON Schema needs the ``threadmind[schema]`` extra (jsonschema).
    """

    enabled: bool = False
    template: str | None = None
    schema: Any = None  # dict | type[pydantic.BaseModel] | type[msgspec.Struct] | None: checked below
    scope: Literal["resource", "thread"] = "resource"
    version: Literal["stable", "vnext"] = "stable"
    #: Working memory delivered as a state signal before each model call instead of in the system prompt
    #: (``processors.WorkingMemoryState``), its tool named ``setWorkingMemory``. None: off, unless observational
    #: memory manages working memory (``observation.manageWorkingMemory``).
    use_state_signals: bool | None = None
    #: Whether the agent updates working memory itself (its tool, and the instruction saying how); False: the
    #: model reads it only (the read-only instruction) while something else writes it. None: yes, unless
    #: observational memory manages working memory.
    agent_managed: bool | None = None

    def __post_init__(self) -> None:
        _one_of(self.enabled, (True, False), "workingMemory.enabled")
        _one_of(self.scope, ("resource", "thread"), "workingMemory.scope")
        if self.template is not None and not isinstance(self.template, str):
            raise ConfigError(f"workingMemory.template must be a string, got {self.template!r}")
        if self.schema is not None:
            compile_schema(self.schema)  # cached per type / schema text: per-call merges stay cheap
        if self.template is not None and self.schema is not None:
            raise ConfigError("workingMemory takes either a template or a schema, not both")
        _one_of(self.version, ("stable", "vnext"), "workingMemory.version")
        if self.use_state_signals is not None:
            _one_of(self.use_state_signals, (True, False), "workingMemory.useStateSignals")
        if self.use_state_signals and self.version == "vnext":
            raise ConfigError("workingMemory.useStateSignals is not supported with workingMemory.version: 'vnext'. "
                              "Use stable template working memory or disable useStateSignals.")
        if self.agent_managed is not None:
            _one_of(self.agent_managed, (True, False), "workingMemory.agentManaged")

    @property
    def state_signals(self) -> bool:
        """Whether working memory reaches the model as a state signal (``useStateSignals``)."""
        return self.use_state_signals is True

    @property
    def managed_by_agent(self) -> bool:
        """Whether the agent gets the working-memory tool and its instruction (``agentManaged``, default true)."""
        return self.agent_managed is not False

    @property
    def compiled_schema(self) -> CompiledSchema | None:
        """The schema ready to use (its JSON Schema, the whole-document check, the typed read), or None."""
        return None if self.schema is None else compile_schema(self.schema)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={schema_repr(value) if name == 'schema' and value is not None else repr(value)}"
                           for name, value in ((name, getattr(self, name)) for name in self.__struct_fields__))
        return f"WorkingMemoryConfig({fields})"


class GenerateTitleConfig(msgspec.Struct, **_CFG):
    """Title generation after a turn on an untitled thread."""

    model: Any = None
    instructions: str | None = None
    min_messages: int = 1
    emit_event: bool = False  # Agent.stream waits for the title and sends data-thread-title before finish

    def __post_init__(self) -> None:
        _non_negative_int(self.min_messages, "generateTitle.minMessages")
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise ConfigError(f"generateTitle.instructions must be a string, got {self.instructions!r}")


def _default_working_memory() -> WorkingMemoryConfig:
    return WorkingMemoryConfig()


class MemoryConfig(msgspec.Struct, **_CFG):
    """Every memory option, with Mastra's defaults (``last_messages=10``, everything else off)."""

    last_messages: int | bool | None = _DEFAULT_LAST
    message_history: MessageHistoryConfig | None = None
    read_only: bool = False
    retain_full_input: bool = False
    semantic_recall: bool | SemanticRecallConfig = False
    working_memory: WorkingMemoryConfig = msgspec.field(default_factory=_default_working_memory)
    observational_memory: bool | ObservationalMemoryConfig = False
    generate_title: bool | GenerateTitleConfig = False
    thread_concurrency: Literal["enqueue", "reject", "parallel"] = "enqueue"
    # Mastra's prompt option: tool calls still waiting for their result are left out of the model's prompt.
    filter_incomplete_tool_calls: bool = True

    def __post_init__(self) -> None:
        _one_of(self.read_only, (True, False), "readOnly")
        _one_of(self.retain_full_input, (True, False), "retainFullInput")
        _one_of(self.thread_concurrency, ("enqueue", "reject", "parallel"), "threadConcurrency")
        for name, value, cls in (("semanticRecall", self.semantic_recall, SemanticRecallConfig),
                                 ("observationalMemory", self.observational_memory, ObservationalMemoryConfig),
                                 ("generateTitle", self.generate_title, GenerateTitleConfig)):
            if not isinstance(value, (bool, cls)):
                raise ConfigError(f"{name} must be a bool or a {cls.__name__}, got {value!r}")
        _instance(self.working_memory, WorkingMemoryConfig, "workingMemory", "a WorkingMemoryConfig")
        if self.message_history is not None:
            _instance(self.message_history, MessageHistoryConfig, "messageHistory", "a MessageHistoryConfig")
        _unsupported(self.filter_incomplete_tool_calls, True, "filterIncompleteToolCalls",
                     "the model adapters always leave tool calls without a result out of the prompt")
        om = self.observational_memory
        wm = self.working_memory
        if isinstance(om, ObservationalMemoryConfig) and om.enabled and om.manage_working_memory and wm.enabled:
            # Mastra's applyManagedWorkingMemoryDefaults: the Observer writes working memory, the agent reads it.
            msgspec.structs.force_setattr(self, "working_memory", msgspec.structs.replace(
                wm, agent_managed=False if wm.agent_managed is None else wm.agent_managed,
                use_state_signals=True if wm.use_state_signals is None else wm.use_state_signals))
        last = self.last_messages
        if last is True:
            raise ConfigError("lastMessages must be a finite non-negative integer or False")
        if last is _DEFAULT_LAST:
            # A token budget alone replaces the default count window (reference §2).
            msgspec.structs.force_setattr(self, "last_messages", None if self.message_history is not None else 10)
        elif last is not None and last is not False:
            _non_negative_int(last, "lastMessages")

    # Derived views used by the processors -------------------------------------------------------
    @property
    def max_messages(self) -> int | None:
        """The count cap of history (0 when disabled, None when only a token budget applies)."""
        if self.last_messages is False:
            return 0
        return None if self.last_messages is None else int(self.last_messages)

    @property
    def history_enabled(self) -> bool:
        """History loads and persists unless disabled by ``last_messages`` 0/False or ``max_tokens=0``."""
        if self.max_messages == 0:
            return False
        if self.message_history is not None:
            return self.message_history.max_tokens != 0
        return self.max_messages is not None

    @property
    def semantic_recall_config(self) -> SemanticRecallConfig | None:
        """The semantic recall options when it is on, else None."""
        if self.semantic_recall is True:
            return SemanticRecallConfig()
        return self.semantic_recall or None

    @property
    def observational_memory_config(self) -> ObservationalMemoryConfig | None:
        """The observational memory options when it is on, else None."""
        om = self.observational_memory
        if om is True:
            return ObservationalMemoryConfig()
        if isinstance(om, ObservationalMemoryConfig) and om.enabled:
            return om
        return None

    @property
    def generate_title_config(self) -> GenerateTitleConfig | None:
        """The title options when title generation is on, else None."""
        if self.generate_title is True:
            return GenerateTitleConfig()
        return self.generate_title or None


def _config_type(annotation: Any) -> type[msgspec.Struct] | None:
    """The config struct a field holds (``bool | SemanticRecallConfig`` -> SemanticRecallConfig), or None."""
    for candidate in typing.get_args(annotation) or (annotation,):
        if isinstance(candidate, type) and issubclass(candidate, msgspec.Struct):
            return candidate
    return None


@functools.cache
def _keys_of(cls: type[msgspec.Struct]) -> dict[str, tuple[str, type[msgspec.Struct] | None]]:
    """Every key a dict may use for ``cls`` (camelCase, and the snake_case attribute name) -> (camelCase key, the
    nested config struct of that field or None)."""
    hints = typing.get_type_hints(cls)
    keys: dict[str, tuple[str, type[msgspec.Struct] | None]] = {}
    for field in msgspec.structs.fields(cls):
        nested = _config_type(hints.get(field.name))
        keys[field.encode_name] = (field.encode_name, nested)
        keys[field.name] = (field.encode_name, nested)
    return keys


def _normalized(data: Mapping[str, Any], cls: type[msgspec.Struct], path: str,
                extra: Mapping[str, type[msgspec.Struct] | None] | None = None) -> dict[str, Any]:
    """``data`` with snake_case keys turned into camelCase, recursively; an unknown key raises ``ConfigError``
    naming it, with the closest known names."""
    keys = _keys_of(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if extra is not None and key in extra:
            out[key] = value
            continue
        known = keys.get(key) if isinstance(key, str) else None
        if known is None:
            names = sorted({camel for camel, _ in keys.values()} | set(extra or ()))
            close = difflib.get_close_matches(str(key), [*names, *keys], n=1, cutoff=0.6)
            hint = f"; did you mean `{path}{keys[close[0]][0] if close[0] in keys else close[0]}`?" if close else ""
            raise ConfigError(f"unknown memory option `{path}{key}`{hint} (known: {', '.join(names)}; camelCase as "
                              "in Mastra, snake_case names work too)")
        camel, nested = known
        if nested is not None and isinstance(value, Mapping):
            value = _normalized(value, nested, f"{path}{camel}.", _NESTED_EXTRA.get(nested))
        out[camel] = value
    return out


def _prepare(options: Mapping[str, Any]) -> dict[str, Any]:
    """Accept snake_case keys, reject unknown and removed options with a suggestion or the reference's
    message, and flatten OM's nested groups."""
    data = _normalized(_removed_first(options), MemoryConfig, "")

    last = data.get("lastMessages")
    if isinstance(last, float) and not isinstance(last, bool):
        if not (math.isfinite(last) and last.is_integer() and last >= 0):
            raise ConfigError("lastMessages must be a finite non-negative integer")
        data["lastMessages"] = int(last)  # 5.0 is an integer, as in the reference
    wm = data.get("workingMemory")
    if isinstance(wm, Mapping) and "use" in wm:
        raise ConfigError("The workingMemory.use option has been removed. Working memory always uses tool-call mode.")
    om = data.get("observationalMemory")
    if isinstance(om, Mapping):
        flat = {k: v for k, v in om.items() if k not in ("observation", "reflection")}
        for group, keys in _OM_GROUPS.items():
            values = om.get(group) or {}
            if not isinstance(values, Mapping):
                raise ConfigError(f"observationalMemory.{group} must be an object, got {values!r}")
            unknown = sorted(set(values) - set(keys))
            if unknown:
                raise ConfigError(f"observationalMemory.{group} has unknown option(s) {', '.join(unknown)}; "
                                  f"known: {', '.join(sorted(keys))}")
            for key, field in keys.items():
                if key in values and field is not None:
                    flat[field] = values[key]
            if "activateAfterIdle" in values:  # named by where it was set, as Mastra names it
                parse_activation_ttl(values["activateAfterIdle"], f"{group}.activateAfterIdle")
        data["observationalMemory"] = flat
    return data


def _removed_first(options: Mapping[str, Any]) -> Mapping[str, Any]:
    """Options the reference removed fail with its own message before any unknown-key check."""
    threads = options.get("threads")
    if isinstance(threads, Mapping) and "generateTitle" in threads:
        raise ConfigError(
            "The threads.generateTitle option has been moved. Use the top-level generateTitle option instead."
        )
    if "threads" in options:
        options = {k: v for k, v in options.items() if k != "threads"}
    return options


# Mastra's nested observational-memory options -> the flat camelCase field each one sets (None: accepted from
# Mastra configs but without effect here: model settings and provider options are the model object's own).
_OM_GROUPS: dict[str, dict[str, str | None]] = {
    "observation": {"messageTokens": "messageTokens", "bufferTokens": "bufferTokens", "blockAfter": "blockAfter",
                    "bufferActivation": "bufferActivation", "threadTitle": "threadTitle", "model": "model",
                    "instruction": "instruction", "manageWorkingMemory": "manageWorkingMemory",
                    "observeAttachments": "observeAttachments", "activateAfterIdle": "activateAfterIdle",
                    "activateOnProviderChange": "activateOnProviderChange",
                    "previousObserverTokens": "previousObserverTokens",
                    "maxTokensPerBatch": None, "modelSettings": None, "providerOptions": None},
    "reflection": {"observationTokens": "observationTokens", "model": "reflectionModel",
                   "bufferActivation": "reflectionBufferActivation",
                   "instruction": "reflectionInstruction", "activateAfterIdle": "reflectionActivateAfterIdle",
                   "activateOnProviderChange": "reflectionActivateOnProviderChange",
                   "blockAfter": "reflectionBlockAfter", "modelSettings": None, "providerOptions": None},
}


# Keys a nested config dict takes besides its own fields (OM's Mastra-shaped groups, flattened by _prepare).
_NESTED_EXTRA: dict[type[msgspec.Struct], dict[str, type[msgspec.Struct] | None]] = {
    ObservationalMemoryConfig: {"observation": None, "reflection": None},
}


def memory_config_from(options: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
    """A :class:`MemoryConfig` from a config, a camelCase dict, or None (the defaults)."""
    if options is None:
        return MemoryConfig()
    if isinstance(options, MemoryConfig):
        return options
    if not isinstance(options, Mapping):
        raise ConfigError(f"options must be a MemoryConfig or a dict, not {type(options).__name__}")
    try:
        return msgspec.convert(_prepare(options), MemoryConfig, str_keys=True)
    except msgspec.ValidationError as exc:
        if isinstance(exc.__cause__, ConfigError):  # our own check, which names the option (reference wording)
            raise exc.__cause__ from None
        raise ConfigError(f"invalid memory options: {exc}") from exc


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if value is None and key not in ("messageHistory", "threshold"):
            continue
        old = merged.get(key)
        if isinstance(old, dict) and isinstance(value, Mapping) and key != "schema":
            merged[key] = _deep_merge(old, value)
        else:
            merged[key] = value
    return merged


@functools.cache
def _field_names(cls: type[msgspec.Struct]) -> tuple[tuple[str, str], ...]:
    """(attribute, camelCase key) of a config struct's fields, resolved once per type.

    ``msgspec.structs.fields`` evaluates the type annotations on every call: ~0.2 ms per struct, which made
    every per-call config merge cost ~0.85 ms.
    """
    return tuple((f.name, f.encode_name) for f in msgspec.structs.fields(cls))


def _plain(value: Any) -> Any:
    """Configs as camelCase dicts; anything that is not a config (a model object) is kept as it is."""
    if isinstance(value, msgspec.Struct):
        return {key: _plain(getattr(value, name)) for name, key in _field_names(type(value))}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _as_dict(config: MemoryConfig) -> dict[str, Any]:
    data: dict[str, Any] = _plain(config)
    return data


def merge_config(base: MemoryConfig, override: MemoryConfig | Mapping[str, Any] | None) -> MemoryConfig:
    """Deep-merge per-call options over ``base`` (objects merge, everything else replaces)."""
    if override is None:
        return base
    if isinstance(override, MemoryConfig):
        defaults = _as_dict(MemoryConfig())
        override = {k: v for k, v in _as_dict(override).items() if defaults.get(k) != v}
    elif not isinstance(override, Mapping):
        raise ConfigError(f"memory options must be a MemoryConfig or a dict, not {type(override).__name__}")
    override = _prepare(override)
    merged = _deep_merge(_as_dict(base), override)
    if "messageHistory" in override and "lastMessages" not in override and base.message_history is None \
            and base.last_messages == 10:
        merged["lastMessages"] = None
    if merged.get("lastMessages") == 10 and "lastMessages" not in override and merged.get("messageHistory") \
            and base.message_history is not None:
        merged["lastMessages"] = base.last_messages
    return memory_config_from(merged)
