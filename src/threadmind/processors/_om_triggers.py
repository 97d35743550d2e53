"""When buffered observational memory activates and how much of it: before its token threshold after the thread
was idle (``activateAfterIdle``) or when the agent's model changed (``activateOnProviderChange``), and which
buffered chunks an activation takes, as Mastra 1.71 decides.

Both read the unobserved messages a turn loaded: idleness runs from the newest reply's last timed part (data
parts skipped), the previous model is the newest reply's ``step-start`` ``model`` (else its
``metadata.provider``/``modelId``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..codecs import Message, StepStartPart, UnknownPart
from ..codecs._time import utc_now

__all__ = ("activation_trigger", "auto_ttl_ms", "chunks_to_activate", "last_activity_ms", "last_model",
           "projected_removal", "provider_changed")

_MINUTE = 60_000
_HOUR = 60 * _MINUTE

Trigger = Literal["provider_change", "ttl"]


def auto_ttl_ms(model_id: str | None) -> float:
    """``activateAfterIdle: "auto"``: the provider's prompt-cache lifetime (Mastra's ``resolveAutoActivationTTL``,
    without per-request provider options)."""
    provider, _, name = (model_id or "").lower().partition("/")
    if not name:
        provider, name = "", provider
    if "openai" in provider:
        short = name.startswith("gpt-4") or name == "gpt-5" or name.startswith("gpt-5-") or \
            any(name == f"gpt-5.{n}" or name.startswith(f"gpt-5.{n}-") for n in "1234")
        return 5 * _MINUTE if short else _HOUR
    if "google" in provider or "gemini" in provider:
        return 24 * _HOUR
    if "deepseek" in provider:
        return _HOUR
    if "groq" in provider:
        return 2 * _HOUR
    return 5 * _MINUTE  # anthropic, xai, openrouter and the rest


def _comparable(model: str) -> tuple[str | None, str]:
    provider, slash, name = model.partition("/")
    return (provider.split(".")[0], name) if slash else (None, model)


def provider_changed(current: str | None, last: str | None) -> bool:
    """Mastra's ``didProviderChange``: another model id, or another provider when both name one."""
    if current is None or last is None:
        return False
    (now_provider, now_model), (then_provider, then_model) = _comparable(current), _comparable(last)
    if now_model != then_model:
        return True
    return bool(now_provider and then_provider and now_provider != then_provider)


def _replies(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.role == "assistant"]


def last_activity_ms(messages: Sequence[Message]) -> int | None:
    """When the newest reply was last active (epoch ms): its last part with a time, else its own time."""
    replies = _replies(messages)
    if not replies:
        return None
    newest = max(replies, key=lambda m: m.created_at)
    for part in reversed(newest.content.parts):
        if isinstance(part, UnknownPart) and part.type.startswith("data-"):
            continue
        stamp = getattr(part, "created_at", None)
        if isinstance(stamp, int):
            return stamp
    return int(newest.created_at.timestamp() * 1000)


def last_model(messages: Sequence[Message]) -> str | None:
    """The model that wrote the newest reply that names one."""
    for message in sorted(_replies(messages), key=lambda m: m.created_at, reverse=True):
        for part in reversed(message.content.parts):
            if isinstance(part, StepStartPart) and part.model:
                return part.model
        metadata = message.content.metadata or {}
        provider, model_id = metadata.get("provider"), metadata.get("modelId")
        if isinstance(model_id, str) and model_id:
            return f"{provider}/{model_id}" if isinstance(provider, str) and provider else model_id
    return None


def activation_trigger(messages: Sequence[Message], model_id: str | None, ttl: float | str | None,
                       on_provider_change: bool, *, now: int | None = None) -> Trigger | None:
    """Why buffered work activates before its threshold ("provider_change" first, then "ttl"), or None."""
    if on_provider_change and provider_changed(model_id, last_model(messages)):
        return "provider_change"
    if ttl is None:
        return None
    limit = auto_ttl_ms(model_id) if ttl == "auto" else float(ttl)
    active = last_activity_ms(messages)
    if active is not None and (now if now is not None else int(utc_now().timestamp() * 1000)) - active >= limit:
        return "ttl"
    return None


def chunks_to_activate(chunks: Sequence[Mapping[str, Any]], pending: int, threshold: int, ratio: float) -> int:
    """How many of the oldest chunks an activation takes (Mastra's boundary: the cumulative message tokens nearest
    ``pending - threshold × (1 - ratio)``, preferring a small overshoot that leaves messages, at least one)."""
    floor = threshold * (1 - ratio)
    target = max(0.0, pending - floor)
    total = 0
    over_at = over_tokens = under_at = under_tokens = 0
    for at, chunk in enumerate(chunks, start=1):
        total += int(chunk.get("messageTokens") or 0)
        if total >= target:
            if over_at == 0 or total < over_tokens:
                over_at, over_tokens = at, total
        elif total > under_tokens:
            under_at, under_tokens = at, total
    least = min(1000.0, floor)
    if over_at and over_tokens - target <= floor * 0.95 and pending - over_tokens >= least:
        return over_at
    if under_at and pending - under_tokens >= least:
        return under_at
    return over_at or 1


def projected_removal(chunks: Sequence[Mapping[str, Any]], pending: int, threshold: int, ratio: float) -> int:
    """The message tokens an activation now would take out (Mastra's ``calculateProjectedMessageRemoval``)."""
    if not chunks or pending - threshold * (1 - ratio) <= 0:
        return 0
    return sum(int(c.get("messageTokens") or 0) for c in chunks[:chunks_to_activate(chunks, pending, threshold, ratio)])
