"""Parts of observational memory's engine that hold no state: the working memory the Observer manages, the
previous observations the Observer is shown, and the custom-instructions tail."""

from __future__ import annotations

import json
import logging
import re

from .._config import WorkingMemoryConfig
from ..processors._working_memory_text import template_for
from ..tokens import TokenCounter
from ._extractors import Extractor, extractor_sections, strip_sections

__all__ = ("ManagedWorkingMemory", "custom_instructions", "newest_within")

_log = logging.getLogger("threadmind.memory")


class ManagedWorkingMemory:
    """The working memory the Observer writes (Mastra's ``WorkingMemoryExtractor``): its section of the Observer's
    instructions, and the new document read out of the Observer's answer (None: no change)."""

    def __init__(self, config: WorkingMemoryConfig, current: str | None) -> None:
        self.config = config
        self.current = current
        template = template_for(config)
        self.schema = config.compiled_schema
        lines = ["Update working memory with durable facts from the observations you made."]
        if self.schema is not None:
            lines += ["Return the full updated JSON object when working memory should change.",
                      "Return null when no working memory update is needed."]
            if template is not None:
                lines.append(f"Working memory JSON schema:\n{template.content}")
            if current:
                lines.append(f"Current working memory JSON:\n{current}")
        else:
            lines.append("Return the full updated Markdown working memory. Preserve useful existing content and add "
                         "or revise only what changed.")
            if template is not None:
                lines.append(f"Working memory template:\n{template.content}")
            if current:
                lines.append(f"Current working memory:\n{current}")
        self.extractor = Extractor("Working Memory", "\n\n".join(lines))

    def section(self) -> str:
        return extractor_sections([self.extractor])

    def strip(self, output: str) -> str:
        return strip_sections(output, [self.extractor])

    def take(self, output: str) -> str | None:
        """The new document in ``output`` (checked against the schema; None: none, ``null``, or unchanged)."""
        sections = re.findall(r"<working-memory>([\s\S]*?)</working-memory>", output, re.IGNORECASE)
        text = sections[-1].strip() if sections else ""
        if not text or text == "null":
            return None
        if self.schema is not None:
            try:
                document = json.loads(text)
            except ValueError:
                _log.warning("the Observer's working memory is not JSON; left as it was")
                return None
            if document is None or not isinstance(document, dict) or self.schema.errors(document):
                return None
            text = json.dumps(document, ensure_ascii=False)
        return None if text == (self.current or "").strip() else text


def custom_instructions(instruction: str | None) -> str:
    """Mastra's ``=== CUSTOM INSTRUCTIONS ===`` tail of the Observer's or the Reflector's instructions."""
    return f"\n\n=== CUSTOM INSTRUCTIONS ===\n\n{instruction}" if instruction else ""


def newest_within(observations: str, budget: int | bool | None, counter: TokenCounter) -> str:
    """The previous observations the Observer is shown under ``observation.previousObserverTokens``: the newest
    lines that fit ``budget`` tokens (0: none; None or False: all), cut at a line, never mid-line."""
    if budget is None or budget is False or not observations:
        return observations
    if budget <= 0:
        return ""
    if counter.count_text(observations) <= budget:
        return observations
    kept: list[str] = []
    used = 0
    for line in reversed(observations.split("\n")):
        cost = counter.count_text(line) if line else 0
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(reversed(kept)).strip("\n")
