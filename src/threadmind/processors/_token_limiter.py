"""TokenLimiter: keep the prompt within a token limit (reference §3.5, general modes).

``best-fit`` walks newest→oldest keeping every message that still fits; ``contiguous`` stops at the
first one that does not. On output it truncates the response text (or aborts with ``strategy="abort"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from .._history_window import group_by_tool_calls
from ..codecs import Message, TextPart
from ..errors import ConfigError
from ..tokens import TokenLimiterCounter
from ._protocol import ProcessInputArgs, ProcessInputStepArgs, ProcessOutputArgs

__all__ = ("TokenLimiter",)

_OVERHEAD = 24.0


class TokenLimiter:
    """Processor ``token-limiter``."""

    id = "token-limiter"
    name = "Token Limiter"

    def __init__(
        self,
        limit: int | Mapping[str, Any],
        *,
        strategy: Literal["truncate", "abort"] = "truncate",
        count_mode: Literal["cumulative", "part"] = "cumulative",
        trim_mode: Literal["best-fit", "contiguous", "memory-only"] = "best-fit",
        at_max_remove_tokens: float | None = None,
    ) -> None:
        if isinstance(limit, Mapping):
            options = dict(limit)
            limit = options.pop("limit", None)
            strategy = options.pop("strategy", strategy)
            count_mode = options.pop("countMode", options.pop("count_mode", count_mode))
            trim_mode = options.pop("trimMode", options.pop("trim_mode", trim_mode))
            at_max_remove_tokens = options.pop("atMaxRemoveTokens",
                                               options.pop("at_max_remove_tokens", at_max_remove_tokens))
            if options:
                raise ConfigError(f"TokenLimiter got unknown options {sorted(options)}")
        if trim_mode not in ("best-fit", "contiguous", "memory-only"):
            raise ConfigError(f"TokenLimiter trimMode must be best-fit, contiguous or memory-only, not {trim_mode!r}")
        if strategy not in ("truncate", "abort"):
            raise ConfigError(f"TokenLimiter strategy must be truncate or abort, not {strategy!r}")
        value: float = limit if isinstance(limit, (int, float)) and not isinstance(limit, bool) else math.nan
        remove = value * 0.25 if at_max_remove_tokens is None else at_max_remove_tokens
        if trim_mode == "memory-only":
            if not (_finite_non_negative(value) and _finite_non_negative(remove) and remove <= value):
                raise ConfigError(
                    "Memory token limits must be finite, non-negative, and atMaxRemoveTokens cannot exceed limit"
                )
        elif not value >= 0:  # also refuses NaN (not a number)
            raise ConfigError("TokenLimiter limit must be a non-negative number")
        self.limit = value
        self.strategy = strategy
        self.count_mode = count_mode
        self.trim_mode = trim_mode
        self.at_max_remove_tokens = remove
        self.counter = TokenLimiterCounter()

    async def process_input(self, args: ProcessInputArgs) -> None:
        message_list = args.message_list
        messages = message_list.get_all()
        system = sum(self.counter.system_tokens(t) for t in message_list.get_system_messages())
        if self.trim_mode == "memory-only":
            self._trim_memory(args, messages, system)
            return None
        if not messages:
            args.abort("TokenLimiterProcessor: No messages to process. Cannot send LLM a request with no messages.")
        remaining = self.limit - system - _OVERHEAD
        if remaining <= 0:
            args.abort("TokenLimiterProcessor: System messages alone exceed token limit. Requests cannot be "
                       "completed by removing system messages.")
        kept: set[str] = set()
        used = 0.0
        for message in reversed(messages):
            tokens = self.counter.message_tokens(message)
            if used + tokens <= remaining:
                kept.add(message.id)
                used += tokens
            elif self.trim_mode == "contiguous":
                break
        if not kept:
            args.abort("TokenLimiterProcessor: No messages fit within the remaining token budget. Cannot send "
                       "LLM a request with no messages.")
        message_list.remove_by_ids([m.id for m in messages if m.id not in kept])
        return None

    async def process_input_step(self, args: ProcessInputStepArgs) -> None:
        """Before each later model call, trim again: tool results may have pushed the prompt over the limit
        (step 0 follows ``process_input`` on the same list)."""
        if args.step_number > 0:
            await self.process_input(args)
        return None

    def _trim_memory(self, args: ProcessInputArgs, messages: list[Message], system: float) -> None:
        message_list = args.message_list
        total = _OVERHEAD + system + sum(self.counter.message_tokens(m) for m in messages)
        if total <= self.limit:
            return
        target = self.limit - self.at_max_remove_tokens

        def removable(message: Message) -> bool:
            sources = message_list.sources_of(message.id)
            return "memory" in sources and not (sources & {"input", "response", "context"})

        removed: list[str] = []
        for group in group_by_tool_calls(messages):  # a tool call and its result leave together
            if total <= target:
                break
            if all(removable(m) for m in group):
                removed.extend(m.id for m in group)
                total -= sum(self.counter.message_tokens(m) for m in group)
        message_list.remove_by_ids(removed)

    async def process_output_result(self, args: ProcessOutputArgs) -> None:
        if self.trim_mode == "memory-only":
            return None
        used = 0
        message_list = args.message_list
        for message in args.messages:
            if message.role != "assistant":
                continue
            parts = []
            changed = False
            for part in message.content.parts:
                if isinstance(part, TextPart):
                    tokens = self.counter.count_text(part.text)
                    if used + tokens > self.limit:
                        if self.strategy == "abort":
                            args.abort(f"Token limit of {self.limit} exceeded (current: {used + tokens})")
                        part = msgspec.structs.replace(part, text=_truncate(part.text, self.limit - used, self))
                        tokens = self.counter.count_text(part.text)
                        changed = True
                    used += tokens
                parts.append(part)
            if changed:
                text = " ".join(p.text for p in parts if isinstance(p, TextPart))
                content = msgspec.structs.replace(message.content, parts=parts, content=text)
                message_list.replace(msgspec.structs.replace(message, content=content))
        return None


def _finite_non_negative(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _truncate(text: str, budget: float, limiter: TokenLimiter) -> str:
    if budget <= 0:
        return ""
    words = text.split(" ")
    out: list[str] = []
    for word in words:
        candidate = " ".join([*out, word])
        if limiter.counter.count_text(candidate) > budget:
            break
        out.append(word)
    return " ".join(out)
