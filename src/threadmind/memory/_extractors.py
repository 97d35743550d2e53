"""Extractors: values ``Memory.summarize_thread`` asks the Observer for beside its summary (Mastra's ``Extractor``
and ``summarizeThread({extract})``), each under an XML tag named by its slug.

The Observer is told, after its own instructions, Mastra's "Additional optional XML sections" with each extractor's
instructions; its answer's ``<extracted-values>`` JSON object, then each ``<slug>…</slug>`` section (the last one),
gives the values, checked against the extractor's schema (none: text); the sections are cut out of the summary. A
value that does not match is reported in ``extraction_failures``, never raised. ``on_extracted`` sees each value
(a hook-only extractor, with no instructions, sees the raw summary) and may return a replacement.

Unlike Mastra, an extractor with a schema is answered in the same Observer call (Mastra makes a second,
structured-output call for it), and a schema describes a JSON object (a JSON Schema dict, a Pydantic model class or
a msgspec Struct type, as ``workingMemory.schema``).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from .._working_memory_schema import CompiledSchema, compile_schema
from ..errors import ConfigError

__all__ = ("EXTRACTED_VALUES_TAG", "ExtractedValue", "Extractor", "apply_hooks", "extractor_sections",
           "parse_extracted", "strip_sections")

EXTRACTED_VALUES_TAG = "extracted-values"
_BUILT_IN = frozenset({"current-task", "suggested-response", "thread-title"})
_RESERVED = frozenset({"observations", "observation", EXTRACTED_VALUES_TAG, "thread", "message", "messages",
                       "conversation", "history", "system", "user", "assistant", "tool"}) | _BUILT_IN


class ExtractedValue(msgspec.Struct, frozen=True, kw_only=True):
    """What an ``on_extracted`` hook is given: the extractor, the thread, the value extracted (``current``; for a
    hook-only extractor, the raw summary) and the summary."""

    extractor: Any
    thread_id: str
    resource_id: str | None
    current: Any
    raw_observations: str
    source: str = "observer"


Hook = Callable[[ExtractedValue], Any | Awaitable[Any]]


def slug_of(name: str) -> str:
    """Mastra's ``slugifyExtractorName``: ASCII letters and digits lower-cased, quotes dropped, any other run one
    ``-``, none at the end."""
    out: list[str] = []
    separated = False
    for char in name.strip().lower():
        if "a" <= char <= "z" or "0" <= char <= "9":
            out.append(char)
            separated = False
        elif char in "'\"`":
            continue
        elif not separated and out:
            out.append("-")
            separated = True
    return "".join(out).removesuffix("-")


class Extractor:
    """A value to extract (see the module docstring).

    :param name: names the value; its slug (``"Call summary"`` → ``call-summary``) is the tag and the key of
        ``ThreadSummary.extracted``.
    :param instructions: what to extract (required unless the extractor is a hook only).
    :param schema: the value's type: a JSON Schema dict, a Pydantic model class or a msgspec Struct type (a JSON
        object); None: text.
    :param on_extracted: called with an :class:`ExtractedValue`; a value it returns replaces the extracted one.
    :raises ~threadmind.errors.ConfigError: no name, no instructions, a slug that is invalid or reserved, a hook-only
        extractor without its hook, or a bad schema (Mastra's messages).
    """

    def __init__(self, name: str, instructions: str | None = None, *, schema: Any = None,
                 on_extracted: Hook | None = None) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("Extractor name is required.")
        self.name = name.strip()
        self.slug = slug_of(self.name)
        hook_only = instructions is None and schema is None and on_extracted is not None
        if not hook_only and (not isinstance(instructions, str) or not instructions.strip()):
            raise ConfigError(f'Extractor "{self.name}" must include instructions.')
        if not re.fullmatch(r"[a-z](?:[a-z0-9-]*[a-z0-9])?", self.slug):
            raise ConfigError(f'Extractor name "{self.name}" produced invalid slug "{self.slug}".'
                              if self.slug else f'Extractor name "{self.name}" must produce a non-empty slug.')
        if self.slug in _RESERVED:
            raise ConfigError(f'Extractor slug "{self.slug}" is reserved by Observational Memory.')
        self.instructions = (instructions or "").strip()
        self.hook_only = hook_only
        self.on_extracted = on_extracted
        self.schema: CompiledSchema | None = compile_schema(schema) if schema is not None else None

    def check(self, value: Any) -> Any:
        """``value`` as the extractor's type (text without a schema); ``ValueError`` naming the mismatch."""
        if self.schema is None:
            if not isinstance(value, str):
                raise ValueError(f"expected text, got {type(value).__name__}")
            return value
        problems = self.schema.errors(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    def __repr__(self) -> str:
        return f"Extractor({self.name!r}, slug={self.slug!r})"


def check_extractors(extract: Sequence[Extractor]) -> list[Extractor]:
    """``extract`` as a list, each an :class:`Extractor` and each slug once."""
    seen: dict[str, str] = {}
    out: list[Extractor] = []
    for extractor in extract:
        if not isinstance(extractor, Extractor):
            raise ConfigError(f"extract takes Extractor objects, got {type(extractor).__name__}")
        if extractor.slug in seen:
            raise ConfigError(f'Duplicate extractor slug "{extractor.slug}" from "{seen[extractor.slug]}" and '
                              f'"{extractor.name}".')
        seen[extractor.slug] = extractor.name
        out.append(extractor)
    return out


def extractor_sections(extractors: Sequence[Extractor]) -> str:
    """The Observer's extra instructions for the extractors (Mastra's ``buildExtractorOutputSections``)."""
    inline = [e for e in extractors if not e.hook_only]
    if not inline:
        return ""
    sections = "\n\n".join(
        f"<{e.slug}>\n{e.instructions}\nInclude this section when the observations contain relevant information for "
        f"<{e.slug}>. Write only that information inside the tag.\n</{e.slug}>" for e in inline)
    return ("Additional optional XML sections:\nIf the observations include information relevant to any of these "
            f"tags, output that tag after <observations> and include the relevant information.\n{sections}")


def _candidates(raw: str) -> list[Any]:
    """The readings of a section's text, in Mastra's order: JSON first when it looks like JSON, then the text."""
    text = raw.strip()
    looks = re.match(r'(?:[\[{"-]|\d|true\b|false\b|null\b)', text) is not None
    out: list[Any] = []
    if looks:
        try:
            out.append(json.loads(text))
        except ValueError:
            pass
    out.append(text)
    return out


def parse_extracted(output: str, extractors: Sequence[Extractor]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The values the Observer's ``output`` holds for ``extractors``, and the failures (``slug``, ``error``)."""
    inline = [e for e in extractors if not e.hook_only]
    values: dict[str, Any] = {}
    failures: list[dict[str, str]] = []
    tag = EXTRACTED_VALUES_TAG
    for match in re.finditer(rf"<{tag}>([\s\S]*?)</{tag}>", output, re.IGNORECASE):
        body = match.group(1).strip()
        if not body or body.startswith("Write only the extracted values JSON object here."):
            continue
        try:
            found = json.loads(body)
            if not isinstance(found, dict):
                raise ValueError(f"{tag} must contain a JSON object.")
        except ValueError as exc:
            failures.append({"slug": tag, "error": str(exc)})
            continue
        for extractor in inline:
            raw = found.get(extractor.slug)
            if raw is None or raw == "":
                continue
            try:
                values[extractor.slug] = extractor.check(raw)
            except ValueError as exc:
                failures.append({"slug": extractor.slug, "error": str(exc)})
    for extractor in inline:
        if extractor.slug in values:
            continue
        sections = re.findall(rf"<{extractor.slug}>([\s\S]*?)</{extractor.slug}>", output, re.IGNORECASE)
        raw_text = sections[-1].strip() if sections else ""
        if not raw_text:
            continue
        errors: list[str] = []
        for candidate in _candidates(raw_text):
            try:
                values[extractor.slug] = extractor.check(candidate)
                break
            except ValueError as exc:
                errors.append(str(exc))
        else:
            failures.append({"slug": extractor.slug, "error": f'Extractor "{extractor.slug}" output did not match '
                                                             f"its schema: {errors[0]}"})
    return values, failures


def strip_sections(output: str, extractors: Sequence[Extractor]) -> str:
    """``output`` without the extracted-values block and the extractors' sections."""
    for tag in [EXTRACTED_VALUES_TAG] + [e.slug for e in extractors if not e.hook_only]:
        output = re.sub(rf"[ \t]*<{tag}>[\s\S]*?</{tag}>\s*", "", output, flags=re.IGNORECASE)
    return output


async def apply_hooks(extractors: Sequence[Extractor], values: dict[str, Any], failures: list[dict[str, str]],
                      *, thread_id: str, resource_id: str | None, raw: str) -> None:
    """Each extractor's ``on_extracted`` over its value (a hook-only one over ``raw``); a returned value replaces
    the extracted one when it matches the schema, else the value is dropped and the failure reported."""
    for extractor in extractors:
        hook = extractor.on_extracted
        if hook is None or (not extractor.hook_only and extractor.slug not in values):
            continue
        current = raw if extractor.hook_only else values[extractor.slug]
        try:
            returned = hook(ExtractedValue(extractor=extractor, thread_id=thread_id, resource_id=resource_id,
                                           current=current, raw_observations=raw))
            if inspect.isawaitable(returned):
                returned = await returned
        except Exception as exc:  # a hook's failure is reported with the others, as Mastra reports it
            failures.append({"slug": extractor.slug, "error": str(exc)})
            continue
        if extractor.hook_only or returned is None:
            continue
        try:
            values[extractor.slug] = extractor.check(returned)
        except ValueError as exc:
            del values[extractor.slug]
            failures.append({"slug": extractor.slug, "error": str(exc)})
