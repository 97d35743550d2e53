"""Observational memory's options (``observationalMemory``): the Observer's and the Reflector's thresholds, buffering
ahead, activation triggers, retrieval mode; Mastra 1.71's keys, flattened (``observation.bufferTokens`` ->
``buffer_tokens``) by ``_config``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from ._config_checks import CFG as _CFG
from ._config_checks import num as _num
from ._config_checks import one_of as _one_of
from .errors import ConfigError

__all__ = ("ObservationalMemoryConfig", "parse_activation_ttl")


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|msecs?|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)$",
                       re.IGNORECASE)


def parse_activation_ttl(value: object, path: str) -> float | Literal["auto"] | None:
    """Mastra's ``parseActivationTTL``: milliseconds, a duration string (``"5m"``, ``"1hr"``), ``"auto"`` (chosen
    from the agent's provider when a turn runs), or None/False (off); anything else raises with Mastra's text."""
    if value is None or value is False:
        return None
    if value == "auto":
        return "auto"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f'{path} must be a non-negative number of milliseconds or a duration string like "5m".')
        return float(value)
    match = _DURATION.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(f'{path} must be a non-negative number of milliseconds or a duration string like "5m" '
                          'or "1hr".')
    unit = match.group(2).lower()
    scale = 60_000 if unit in ("m", "min", "mins", "minute", "minutes") else 1 if unit.startswith("m") else \
        1000 if unit.startswith("s") else 3_600_000
    return float(match.group(1)) * scale


class ObservationalMemoryConfig(msgspec.Struct, kw_only=True, **_CFG):
    """Observer/Reflector compression of long threads (reference §8.1)."""

    enabled: bool = True
    model: Any = None
    scope: Literal["thread", "resource"] = "thread"
    message_tokens: int = 30_000
    observation_tokens: int = 40_000
    #: Observations computed ahead, in the background, every this many unobserved tokens (a share of
    #: ``message_tokens`` below 1): reaching the threshold then activates them with no model call
    #: (``ObservationalMemoryEngine.activate``). Not set: off (Mastra's default is 0.2; see the README).
    buffer_tokens: float | bool | None = None
    block_after: float | None = None
    #: With ``buffer_tokens`` set, the share of the threshold an activation of buffered observations takes out
    #: of the messages (default 0.8: about 20 % of the threshold stays as messages).
    buffer_activation: float | None = None
    #: Messages may use what observations leave of ``message_tokens + observation_tokens`` (see
    #: :meth:`message_threshold`); Mastra requires ``observation.bufferTokens: false`` with it, and so does this.
    share_token_budget: bool = False
    #: The Observer also titles the thread (``observation.threadTitle``): a title of 3 characters or more that
    #: differs from the thread's replaces it, unless the thread's ``metadata.titlePinned`` is true.
    thread_title: bool = False
    #: A user back after 10 minutes or more gets a stored ``system-reminder`` saying how long it has been
    #: (``processors._temporal_markers``).
    temporal_markers: bool = False
    reflection_model: Any = None  # the Reflector's model when it differs from the Observer's (``model``)
    #: With ``buffer_tokens`` set: the share of ``observation_tokens`` at which a reflection is computed ahead,
    #: in the background (``reflection.bufferActivation``, 0.5; 0: never).
    reflection_buffer_activation: float | None = None
    #: The Observer also writes working memory (``observation.manageWorkingMemory``, with ``workingMemory``
    #: enabled): the agent then only reads it (``agentManaged`` false) as a state signal, unless those are set.
    manage_working_memory: bool = False
    #: The messages' files the Observer sees (``observation.observeAttachments``): None, images and PDFs; True or
    #: "auto", all; False, none.
    observe_attachments: bool | Literal["auto"] | None = None
    #: Appended to the Observer's (``observation.instruction``) and the Reflector's (``reflection.instruction``)
    #: instructions under ``=== CUSTOM INSTRUCTIONS ===``, as Mastra appends them.
    instruction: str | None = None
    reflection_instruction: str | None = None
    #: Buffered observations activate when the thread has been idle this long (ms, a duration such as ``"5m"``,
    #: or ``"auto"``: the agent provider's prompt-cache lifetime), threshold or not (``activateAfterIdle``, top
    #: level or ``observation.``; the reflection's own is ``reflection.activateAfterIdle``). Idle is measured
    #: from the last reply's last part.
    activate_after_idle: float | str | bool | None = None
    #: Buffered observations activate when the agent's model differs from the one that wrote the last reply.
    activate_on_provider_change: bool = False
    #: With reflections computed ahead: below this many observation tokens (a multiple of ``observation_tokens``
    #: from 1 to 100, or a count) a reflection the threshold needs runs in the background, nobody waiting for it
    #: (``reflection.blockAfter``; default 1.2).
    reflection_block_after: float | None = None
    reflection_activate_after_idle: float | str | bool | None = None
    reflection_activate_on_provider_change: bool = False
    #: The previous observations the Observer is shown, cut from the oldest end to this many tokens
    #: (``observation.previousObserverTokens``; 0: none; None or False: all).
    previous_observer_tokens: int | bool | None = None
    #: Retrieval mode (``retrieval``: true or ``{vector, scope, instructions}``): observation groups keep the range
    #: of messages they came from, and the agent gets the ``recall`` tool to read those messages back.
    retrieval: bool | dict[str, Any] = False

    def __post_init__(self) -> None:
        _one_of(self.enabled, (True, False), "observationalMemory.enabled")
        for name, ttl in (("activateAfterIdle", self.activate_after_idle),
                          ("reflection.activateAfterIdle", self.reflection_activate_after_idle)):
            parse_activation_ttl(ttl, name)
        if self.reflection_block_after is not None:
            at = self.reflection_block_after
            if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
                raise ConfigError(f"reflection.blockAfter must be a number, got {at!r}")
            resolved = round(self.observation_tokens * at) if 1 <= at < 100 else at
            if resolved < self.observation_tokens:
                raise ConfigError(f"reflection.blockAfter ({_num(resolved)}) must be >= reflection.observationTokens "
                                  f"({_num(self.observation_tokens)})")
            if self.reflection_buffer_activation is not None and not self.reflection_buffer_activation:
                raise ConfigError("reflection.blockAfter requires reflection.bufferActivation to be set (blockAfter "
                                  "only applies when async reflection is enabled)")
        _one_of(self.activate_on_provider_change, (True, False), "observationalMemory.activateOnProviderChange")
        _one_of(self.reflection_activate_on_provider_change, (True, False),
                "observationalMemory.reflection.activateOnProviderChange")
        previous = self.previous_observer_tokens
        if previous is not None and previous is not False and (
                isinstance(previous, bool) or not isinstance(previous, int) or previous < 0):
            raise ConfigError("observation.previousObserverTokens must be a non-negative integer or false, got "
                              f"{previous!r}")
        _retrieval_options(self.retrieval)
        _one_of(self.scope, ("thread", "resource"), "observationalMemory.scope")
        for name, value in (("observation.messageTokens", self.message_tokens),
                            ("reflection.observationTokens", self.observation_tokens)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
                raise ConfigError(f"observationalMemory.{name} must be a positive number, got {value!r}")
        buffer = self.buffer_tokens
        if isinstance(buffer, (int, float)) and not isinstance(buffer, bool):
            if self.scope == "resource":
                raise ConfigError("Async buffering is not yet supported with scope: 'resource'. Use scope: "
                                  "'thread', or set observation: { bufferTokens: false } to disable async buffering.")
            if not buffer > 0:
                raise ConfigError(f"observation.bufferTokens must be > 0, got {_num(buffer)}")
            absolute = buffer * self.message_tokens if 0 < buffer < 1 else buffer
            if absolute >= self.message_tokens:
                raise ConfigError(f"observation.bufferTokens ({_num(buffer)}) must be less than messageTokens "
                                  f"({_num(self.message_tokens)})")
        if self.block_after is not None:
            absolute = self.block_after * self.message_tokens if 1 <= self.block_after < 100 else self.block_after
            if absolute < self.message_tokens:
                raise ConfigError(f"observation.blockAfter ({_num(self.block_after)}) must be >= messageTokens "
                                  f"({_num(self.message_tokens)})")
        _one_of(self.thread_title, (True, False), "observation.threadTitle")
        _one_of(self.temporal_markers, (True, False), "observationalMemory.temporalMarkers")
        _one_of(self.manage_working_memory, (True, False), "observation.manageWorkingMemory")
        if self.observe_attachments not in (None, True, False, "auto"):
            raise ConfigError("observation.observeAttachments must be 'auto', true or false, got "
                              f"{self.observe_attachments!r}")
        for name, text in (("observation.instruction", self.instruction),
                           ("reflection.instruction", self.reflection_instruction)):
            if text is not None and not isinstance(text, str):
                raise ConfigError(f"observationalMemory.{name} must be a string, got {text!r}")
        _one_of(self.share_token_budget, (True, False), "observationalMemory.shareTokenBudget")
        if self.share_token_budget:  # Mastra's rule and words (threadmind observes in the background in any case)
            explicit = self.buffer_tokens is not None or self.buffer_activation is not None
            if not (self.buffer_tokens is False or (self.scope == "resource" and not explicit)):
                raise ConfigError(
                    "shareTokenBudget requires async buffering to be disabled (this is a temporary limitation). Add "
                    "observation: { bufferTokens: false } to your config:\n\n  observationalMemory: {\n    "
                    "shareTokenBudget: true,\n    observation: { bufferTokens: false },\n  }\n\n" + (
                        "Remove any other async buffering settings (bufferTokens, bufferActivation, blockAfter)."
                        if explicit else "Async buffering is enabled by default — this opt-out is only needed when "
                        "using shareTokenBudget."))

    @property
    def idle_ttl(self) -> float | Literal["auto"] | None:
        """Milliseconds of idleness after which buffered observations activate (``"auto"``: by provider)."""
        return parse_activation_ttl(self.activate_after_idle, "activateAfterIdle")

    @property
    def reflection_idle_ttl(self) -> float | Literal["auto"] | None:
        """As :attr:`idle_ttl`, for a buffered reflection (``reflection.activateAfterIdle``; not inherited)."""
        return parse_activation_ttl(self.reflection_activate_after_idle, "reflection.activateAfterIdle")

    @property
    def retrieval_options(self) -> tuple[bool, Literal["thread", "resource"], bool, str | None]:
        """``retrieval`` as (on, the recall tool's scope, vector search on, extra instructions)."""
        return _retrieval_options(self.retrieval)

    @property
    def buffer_size(self) -> int | None:
        """Unobserved tokens between two observations computed ahead (``observation.bufferTokens``, a share of
        ``messageTokens`` below 1), thread scope; None: buffering off (not set, ``false``, or resource scope)."""
        value = self.buffer_tokens
        if value is None or isinstance(value, bool) or self.scope != "thread" or not value > 0:
            return None
        return max(1, round(value * self.message_tokens) if value < 1 else int(value))

    @property
    def activation_ratio(self) -> float:
        """The share of the threshold an activation takes out of the messages (``bufferActivation``, 0.8)."""
        value = self.buffer_activation
        return 0.8 if value is None else max(0.0, min(1.0, float(value)))

    @property
    def reflection_buffer_at(self) -> int | None:
        """Observation tokens from which a reflection is computed ahead (``reflection.bufferActivation`` ×
        ``reflection.observationTokens``), when observations are buffered; None: never."""
        ratio = 0.5 if self.reflection_buffer_activation is None else float(self.reflection_buffer_activation)
        if self.buffer_size is None or not ratio > 0:
            return None
        return max(1, round(min(ratio, 1.0) * self.observation_tokens))

    @property
    def reflection_block_at(self) -> int | None:
        """Observation tokens from which a turn waits for a reflection the threshold needs (``reflection.blockAfter``
        resolved, 1.2× ``observationTokens`` by default) when reflections are computed ahead; None: always waits."""
        if self.reflection_buffer_at is None:
            return None
        at = 1.2 if self.reflection_block_after is None else float(self.reflection_block_after)
        return round(self.observation_tokens * at) if 1 <= at < 100 else int(at)

    def message_threshold(self, observation_tokens: int) -> int:
        """Unobserved tokens at which an observation runs: ``message_tokens``; with ``share_token_budget``, what the
        observations (``observation_tokens`` of them) leave of ``message_tokens + reflection.observationTokens``,
        never less than ``message_tokens`` (Mastra's ``calculateDynamicThreshold``)."""
        if not self.share_token_budget:
            return int(self.message_tokens)
        total = self.message_tokens + self.observation_tokens
        return math.floor(max(total - observation_tokens, self.message_tokens) + 0.5)


def _retrieval_options(value: object) -> tuple[bool, Literal["thread", "resource"], bool, str | None]:
    """Validate ``observationalMemory.retrieval`` (true/false or ``{vector, scope, instructions}``)."""
    if value is True or value is False:
        return bool(value), "resource", False, None
    if not isinstance(value, Mapping):
        raise ConfigError(f"observationalMemory.retrieval must be a boolean or an object, got {value!r}")
    unknown = sorted(set(value) - {"vector", "scope", "instructions"})
    if unknown:
        raise ConfigError(f"observationalMemory.retrieval has unknown option(s) {', '.join(map(str, unknown))}; "
                          "known: instructions, scope, vector")
    vector, scope, instructions = value.get("vector", False), value.get("scope", "resource"), \
        value.get("instructions")
    _one_of(vector, (True, False), "observationalMemory.retrieval.vector")
    _one_of(scope, ("thread", "resource"), "observationalMemory.retrieval.scope")
    if instructions is not None and not isinstance(instructions, str):
        raise ConfigError(f"observationalMemory.retrieval.instructions must be a string, got {instructions!r}")
    return True, scope, bool(vector), instructions
