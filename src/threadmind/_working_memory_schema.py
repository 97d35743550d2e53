"""Working-memory schemas: a JSON Schema dict, a Pydantic model class or a msgspec ``Struct`` type, compiled once.

The model sees one JSON Schema (``Model.model_json_schema()``, ``msgspec.json.schema(T)`` or the dict), with its
local ``$ref``s inlined so that every provider, the instruction's skeleton and the null-dropping see the whole
shape; a recursive schema cannot be inlined and keeps its ``$defs``. Updates are deep-merged into the stored
document and the merged document is validated as a whole:

- a Pydantic model validates it with ``model_validate_json`` and a msgspec type with ``msgspec.json.decode``,
  exactly as :meth:`CompiledSchema.load` reads it back, so a stored document always loads as the type;
- a JSON Schema is checked by ``jsonschema`` with every keyword (``minimum``, ``pattern``, ``anyOf``, ``$ref``,
  ``minItems``, the ``format``\\ s its checker knows...), in the draft its ``$schema`` names; without one,
  draft-07, the draft of the reference's template (``getWorkingMemoryTemplate``) and of its validator. Working
  memory fills in over a conversation, so a key a JSON Schema marks ``required`` may still be missing (a null
  deletes a key), except inside ``anyOf``/``oneOf`` where ``required`` picks between alternatives. A type has no
  such latitude: give its fields defaults when they arrive over time.

``jsonschema`` is the optional ``threadmind[schema]`` extra: SPEC keeps the runtime dependencies to six, a model
class needs no JSON Schema validator, and configuring a JSON Schema without it is a ``ConfigError`` naming the
install, never a silently weaker check. Pydantic is never imported here: a class counts as a model only when the
``pydantic`` module is already loaded (the class came from it).
"""

from __future__ import annotations

import collections
import sys
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import msgspec

from .errors import ConfigError, ValidationError

__all__ = (
    "DRAFT_07",
    "DRAFT_2020_12",
    "CompiledSchema",
    "SchemaSource",
    "compile_schema",
    "json_schema_errors",
    "schema_repr",
    "tool_parameters",
)

SchemaSource: TypeAlias = "Mapping[str, Any] | type[Any]"
Kind = Literal["json-schema", "pydantic", "msgspec"]

DRAFT_07 = "http://json-schema.org/draft-07/schema#"
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_DEFS = ("$defs", "definitions")
_DATA = frozenset({"enum", "const", "default", "examples"})  # values, not schemas: never searched for $ref
_NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})  # name -> schema
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})
_INSTALL = "pip install 'threadmind[schema]'"
_MESSAGE_CHARS = 300
_CACHE_SIZE = 128


class CompiledSchema:
    """A working-memory schema ready to use: the JSON Schema the model sees, and the whole-document check."""

    __slots__ = ("_check", "_load", "dialect", "json_schema", "kind", "name", "source", "template")

    def __init__(self, *, kind: Kind, source: Any, name: str, json_schema: dict[str, Any], dialect: str,
                 check: Callable[[Any, str], list[str]], load: Callable[[str], Any]) -> None:
        self.kind: Kind = kind
        self.source = source
        self.name = name
        self.json_schema = json_schema  # no ``$schema`` key; local refs inlined unless recursive
        self.dialect = dialect
        self.template = msgspec.json.encode({"$schema": dialect, **json_schema}).decode()
        self._check = check
        self._load = load

    def errors(self, document: Any, text: str | None = None) -> list[str]:
        """What is wrong with a whole working-memory document (``text`` is its JSON), each naming its path
        (``memory.address.city: ...``); empty when it is valid."""
        if not isinstance(document, dict):
            return [f"memory: expected an object, got {_json_type(document)}"]
        return self._check(document, msgspec.json.encode(document).decode() if text is None else text)

    def load(self, text: str) -> Any:
        """The stored JSON text as the type (a model or Struct instance; a dict for a JSON Schema).

        :raises ~threadmind.errors.ValidationError: the text is not JSON or does not match the schema.
        """
        return self._load(text)

    def __repr__(self) -> str:
        return f"CompiledSchema({self.kind}, {self.name})"


_cache: collections.OrderedDict[Any, CompiledSchema] = collections.OrderedDict()


def compile_schema(source: Any) -> CompiledSchema:
    """Compile ``workingMemory.schema`` once (results are kept per type and per schema text).

    :raises ~threadmind.errors.ConfigError: not a JSON Schema dict, Pydantic model class or msgspec Struct type;
        an invalid JSON Schema (naming the problem); a schema that does not describe a JSON object; a JSON Schema
        without the ``jsonschema`` package installed.
    """
    if isinstance(source, Mapping):
        try:
            key: Any = ("json", msgspec.json.encode(source, order="sorted"))
        except (TypeError, msgspec.EncodeError) as exc:
            raise ConfigError(f"workingMemory.schema must be a JSON Schema (JSON values only): {exc}") from None
    elif isinstance(source, type):
        key = source
    else:
        raise ConfigError(_not_a_schema(source))
    found = _cache.get(key)
    if found is not None:
        _cache.move_to_end(key)
        return found
    if isinstance(source, Mapping):
        compiled = _compile_json_schema(msgspec.json.decode(msgspec.json.encode(source)))  # a copy, in its order
    elif _is_pydantic_model(source):
        compiled = _compile_pydantic(source)
    elif issubclass(source, msgspec.Struct):
        compiled = _compile_msgspec(source)
    else:
        raise ConfigError(_not_a_schema(source))
    _cache[key] = compiled
    if len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return compiled


def _not_a_schema(source: Any) -> str:
    hint = " (pass the class, not an instance)" if isinstance(source, msgspec.Struct) or _is_pydantic_model(
        type(source)) else ""
    return (f"workingMemory.schema must be a JSON Schema dict, a Pydantic model class or a msgspec Struct type, "
            f"got {source!r}{hint}")


def schema_repr(source: Any) -> str:
    """How a config's repr shows the schema: a type by its import path, a JSON Schema as written."""
    if isinstance(source, type):
        module = getattr(source, "__module__", "")
        return source.__qualname__ if module in ("__main__", "builtins", "") else f"{module}.{source.__qualname__}"
    return repr(source)


# JSON Schema dicts ---------------------------------------------------------------------------------
def _jsonschema() -> Any:
    try:
        import jsonschema
    except ImportError:
        raise ConfigError(
            f"workingMemory.schema as a JSON Schema needs the jsonschema package: {_INSTALL} (a Pydantic model "
            "or a msgspec Struct needs nothing more)"
        ) from None
    return jsonschema


def _validator_class(schema: Mapping[str, Any]) -> tuple[Any, str]:
    """The validator of the draft ``$schema`` names (draft-07 without one) and that draft's URI."""
    jsonschema = _jsonschema()
    declared = schema.get("$schema")
    if declared is None:
        return jsonschema.Draft7Validator, DRAFT_07
    if not isinstance(declared, str):
        raise ConfigError(f"workingMemory.schema.$schema must be a string, got {declared!r}")
    cls = jsonschema.validators.validator_for(schema, default=None)
    if cls is None:
        raise ConfigError(f"workingMemory.schema names an unknown $schema {declared!r}; use draft-07 "
                          f"({DRAFT_07!r}) or 2020-12 ({DRAFT_2020_12!r})")
    return cls, declared


def _compile_json_schema(schema: dict[str, Any]) -> CompiledSchema:
    cls, dialect = _validator_class(schema)
    try:
        cls.check_schema(schema)
    except _jsonschema().exceptions.SchemaError as exc:
        where = _path(("workingMemory.schema", *exc.absolute_path))
        raise ConfigError(f"workingMemory.schema is not a valid JSON Schema ({dialect}): {where}: "
                          f"{_short(exc.message)}") from None
    legacy = cls.__name__ in ("Draft3Validator", "Draft4Validator", "Draft6Validator", "Draft7Validator")
    inlined = _inline_refs(schema, siblings_apply=not legacy)
    _require_object(inlined)
    validator = cls(inlined, format_checker=cls.FORMAT_CHECKER)

    def check(document: Any, _text: str) -> list[str]:
        return [line for error in validator.iter_errors(document) if error.validator != "required"
                for line in _describe(error)]

    def load(text: str) -> Any:
        document = _decode_json(text, "the JSON Schema")
        problems = check(document, text) if isinstance(document, dict) else [
            f"memory: expected an object, got {_json_type(document)}"]
        if problems:
            raise ValidationError(f"stored working memory does not match the JSON Schema: {'; '.join(problems)}")
        return document

    title = schema.get("title")
    return CompiledSchema(kind="json-schema", source=schema, name=title if isinstance(title, str) else "JSON Schema",
                          json_schema=_without(inlined, ("$schema",)), dialect=dialect, check=check, load=load)


def json_schema_errors(value: Any, schema: Mapping[str, Any], path: str = "memory") -> list[str]:
    """Every error of ``value`` against a JSON Schema (all keywords, ``required`` included), naming paths."""
    cls, _ = _validator_class(schema)
    validator = cls(dict(schema), format_checker=cls.FORMAT_CHECKER)
    return [line for error in validator.iter_errors(value) for line in _describe(error, path)]


def _describe(error: Any, root: str = "memory") -> list[str]:
    """One error as ``path: message``; an ``anyOf``/``oneOf`` failure names the failures of the one alternative
    the value's type fits (``-1 is less than the minimum of 0`` rather than ``not valid under any``)."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        branches: dict[Any, list[Any]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        fitting = [subs for subs in branches.values()
                   if not any(sub.validator == "type" and not sub.relative_path for sub in subs)]
        if len(fitting) == 1:
            return [line for sub in fitting[0] for line in _describe(sub, root)]
    return [f"{_path((root, *error.absolute_path))}: {_short(error.message)}"]


def _require_object(schema: Mapping[str, Any]) -> None:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if kind is not None and "object" not in kinds:
        raise ConfigError(f"workingMemory.schema must describe a JSON object (working memory merges objects), "
                          f"but its type is {kind!r}")


# Pydantic models and msgspec types -------------------------------------------------------------------
def _is_pydantic_model(source: Any) -> bool:
    pydantic = sys.modules.get("pydantic")  # loaded whenever a model class exists; never imported here
    return pydantic is not None and isinstance(source, type) and issubclass(source, pydantic.BaseModel)


def _compile_pydantic(model: Any) -> CompiledSchema:
    pydantic = sys.modules["pydantic"]
    name = schema_repr(model)
    try:
        raw = model.model_json_schema()
    except Exception as exc:  # PydanticInvalidForJsonSchema, PydanticUserError: the model cannot be described
        raise ConfigError(f"workingMemory.schema {name} has no JSON Schema: {exc}") from None
    inlined = _inline_refs(raw, siblings_apply=True)
    _require_object(inlined)

    def problems(exc: Any) -> list[str]:
        return [f"{_path(('memory', *err['loc']))}: {err['msg']}" for err in exc.errors(include_url=False)]

    def check(_document: Any, text: str) -> list[str]:
        try:
            model.model_validate_json(text)
        except pydantic.ValidationError as exc:
            return problems(exc)
        return []

    def load(text: str) -> Any:
        try:
            return model.model_validate_json(text)
        except pydantic.ValidationError as exc:
            raise ValidationError(f"stored working memory does not match {name}: {'; '.join(problems(exc))}"
                                  ) from None

    return CompiledSchema(kind="pydantic", source=model, name=name, json_schema=_without(inlined, ("$schema",)),
                          dialect=DRAFT_2020_12, check=check, load=load)


def _compile_msgspec(struct: type[msgspec.Struct]) -> CompiledSchema:
    name = schema_repr(struct)
    try:
        raw = msgspec.json.schema(struct)
        decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(struct)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"workingMemory.schema {name} has no JSON Schema: {exc}") from None
    inlined = _inline_refs(raw, siblings_apply=True)
    _require_object(inlined)

    def check(_document: Any, text: str) -> list[str]:
        try:
            decoder.decode(text)
        except msgspec.ValidationError as exc:
            return [_msgspec_problem(exc)]
        return []

    def load(text: str) -> Any:
        try:
            return decoder.decode(text)
        except msgspec.ValidationError as exc:
            raise ValidationError(f"stored working memory does not match {name}: {_msgspec_problem(exc)}") from None
        except msgspec.DecodeError as exc:
            raise ValidationError(f"stored working memory is not JSON: {exc}") from None

    return CompiledSchema(kind="msgspec", source=struct, name=name, json_schema=_without(inlined, ("$schema",)),
                          dialect=DRAFT_2020_12, check=check, load=load)


def _msgspec_problem(exc: msgspec.ValidationError) -> str:
    """``Expected `int` >= 0 - at `$.age``` as ``memory.age: Expected `int` >= 0``."""
    message, sep, where = str(exc).rpartition(" - at `")
    if not sep:
        return f"memory: {exc}"
    return f"memory{where.rstrip('`')[1:]}: {message}"


# $ref inlining and the tool's parameters ---------------------------------------------------------------
class _Recursive(Exception):
    """A ``$ref`` reaches itself: the schema keeps its ``$defs``."""


def _inline_refs(schema: Mapping[str, Any], *, siblings_apply: bool) -> dict[str, Any]:
    """The schema with every local ``$ref`` replaced by its target and the root ``$defs`` dropped; a recursive
    schema is returned whole (a root that is only a ``$ref``, as msgspec writes it, unwrapped onto its ``$defs``).

    ``siblings_apply``: from 2019-09 on, keywords beside a ``$ref`` apply too (kept, or ``allOf``-ed on a
    clash); up to draft-07 they are ignored.
    """
    body = _without(schema, _DEFS)
    try:
        inlined = _inline(body, schema, (), siblings_apply)
    except _Recursive:
        return _unwrap_root(schema)
    assert isinstance(inlined, dict)
    return inlined


def _inline(node: Any, root: Mapping[str, Any], stack: tuple[str, ...], siblings: bool) -> Any:
    if isinstance(node, list):
        return [_inline(item, root, stack, siblings) for item in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return _map_schema(node, lambda sub: _inline(sub, root, stack, siblings))
    if ref in stack:
        raise _Recursive(ref)
    resolved = _inline(_pointer(root, ref), root, (*stack, ref), siblings)
    rest = _map_schema(_without(node, ("$ref",)), lambda sub: _inline(sub, root, stack, siblings))
    if not rest or not siblings:
        return resolved
    if isinstance(resolved, dict) and not (set(rest) & set(resolved)) - _ANNOTATIONS:
        return {**resolved, **rest}
    return {**rest, "allOf": [*rest.get("allOf", ()), resolved]}


def _pointer(root: Mapping[str, Any], ref: str) -> Any:
    """The target of a local ``$ref`` (``#`` or a JSON pointer ``#/a/b``)."""
    if not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
        raise ConfigError(f"workingMemory.schema: $ref {ref!r} is not a local reference (#/...); remote "
                          "schemas and anchors are not resolved")
    node: Any = root
    for raw in ref[2:].split("/") if len(ref) > 1 else ():
        part = urllib.parse.unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ConfigError(f"workingMemory.schema: $ref {ref!r} points at nothing")
    return node


def _unwrap_root(schema: Mapping[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and set(schema) <= {"$ref", "$schema", *_DEFS}:
        target = _pointer(schema, ref)
        if isinstance(target, Mapping):
            return {**target, **{key: schema[key] for key in ("$schema", *_DEFS) if key in schema}}
    return dict(schema)


def tool_parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``updateWorkingMemory`` parameters ``{memory: <schema>}``; a recursive schema's ``$defs`` move to
    the top so that its ``#/$defs/...`` references still resolve, and other local references are rebased."""
    memory = _without(schema, ("$schema", *_DEFS))
    params: dict[str, Any] = {"type": "object", "properties": {"memory": memory}, "required": ["memory"]}
    defs = {key: schema[key] for key in _DEFS if key in schema}
    if defs:
        params["properties"]["memory"] = _rebase(memory)
        params.update(_rebase(defs))
    return params


def _rebase(node: Any) -> Any:
    if isinstance(node, list):
        return [_rebase(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out = _map_schema(node, _rebase)
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and not ref.startswith(("#/$defs/", "#/definitions/")):
        out["$ref"] = "#/properties/memory" + ref[1:]
    return out


# helpers ---------------------------------------------------------------------------------------------
def _map_schema(node: Mapping[str, Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """A schema object with ``fn`` applied to what may hold subschemas: values (``enum``, ``default``...) are
    kept as they are, and in ``properties``-like maps only the schemas, never the names, are looked at."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DATA:
            out[key] = value
        elif key in _NAMED and isinstance(value, Mapping):
            out[key] = {name: fn(sub) for name, sub in value.items()}
        else:
            out[key] = fn(value)
    return out


def _without(schema: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {key: value for key, value in schema.items() if key not in keys}


def _path(parts: Sequence[Any]) -> str:
    """``("memory", "tags", 0)`` as ``memory.tags[0]``."""
    out = str(parts[0])
    for part in parts[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _short(message: str) -> str:
    return message if len(message) <= _MESSAGE_CHARS else message[:_MESSAGE_CHARS] + "..."


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _decode_json(text: str, what: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ValidationError(f"stored working memory is not JSON ({what} needs a JSON object): {exc}") from None
