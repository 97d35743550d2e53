"""Hypothesis strategies for Mastra message content: every content key the reference knows plus unknown keys.

Shared by the round-trip tests of the codecs, the stores, the CLI and the agent pipeline. ``canonical`` is the
comparison they use: JSON text with sorted keys, so that ``1`` and ``1.0`` or a lost key still differ.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ("MASTRA_CONTENT_KEYS", "PROPERTY", "canonical", "contents", "json_values", "messages")

MASTRA_CONTENT_KEYS = frozenset({
    "format", "parts", "content", "toolInvocations", "reasoning", "experimental_attachments", "annotations",
    "metadata", "providerMetadata",
})
"""The content keys of reference §4.1, spelled as Mastra writes them."""

PROPERTY = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
"""Reproducible runs (no example database, no timing limits: the machine is shared)."""

_text = st.text(max_size=12)
_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
            | st.floats(allow_nan=False, allow_infinity=False) | _text)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_objects = st.dictionaries(_text, json_values, max_size=3)
_stamp = st.integers(min_value=0, max_value=2**41)


def _with_optional(base: dict[str, Any], **optional: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(base, optional=optional)


_STATES = ("partial-call", "call", "approval-requested", "approval-responded", "result", "output-error",
           "output-denied")
_parts = st.one_of(
    _with_optional({"type": st.just("text"), "text": _text}, createdAt=_stamp, providerMetadata=_objects),
    _with_optional({"type": st.just("reasoning"), "reasoning": _text,
                    "details": st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
                                        max_size=2)}, providerMetadata=_objects),
    _with_optional({"type": st.just("tool-invocation"),
                    "toolInvocation": _with_optional({"state": st.sampled_from(_STATES), "toolCallId": _text,
                                                      "toolName": _text, "args": _objects},
                                                     result=json_values.filter(lambda v: v is not None))},
                   createdAt=_stamp),
    _with_optional({"type": st.just("step-start")}, model=_text),
    _with_optional({"type": st.just("file"), "data": _text, "mimeType": st.just("image/png")}, filename=_text),
    st.fixed_dictionaries({"type": st.just("source"), "source": _objects}),
    # types and shapes threadmind does not model: kept as they are
    _with_optional({"type": st.just("data-progress"), "data": json_values}, id=_text),
    st.fixed_dictionaries({"type": st.just("source-url"), "sourceId": _text, "url": _text}),
    st.fixed_dictionaries({"type": st.just("error"), "error": st.fixed_dictionaries({"name": _text,
                                                                                     "message": _text})}),
    st.fixed_dictionaries({"type": st.just("text"), "text": _text, "futureField": json_values}),
)
_attachments = st.lists(
    _with_optional({"url": _text}, name=_text, contentType=st.sampled_from(["image/png", "application/pdf"]),
                   size=st.integers(min_value=0, max_value=10**9)),
    max_size=3,
)
_unknown_keys = st.text(min_size=1, max_size=10).filter(lambda k: k not in MASTRA_CONTENT_KEYS)

contents = st.builds(
    lambda known, unknown: {**unknown, **known},  # unknown keys first: any key order must survive
    _with_optional(
        {"format": st.just(2), "parts": st.lists(_parts, max_size=4)},
        content=_text, toolInvocations=st.lists(_objects, max_size=2), reasoning=_text,
        experimental_attachments=_attachments, annotations=st.lists(json_values, max_size=2),
        metadata=_objects, providerMetadata=_objects,
    ),
    st.dictionaries(_unknown_keys, json_values, max_size=3),
)
"""A content object as Mastra (or a newer Mastra) writes it: known keys with non-null values, unknown keys."""


def messages(thread_id: str = "t1", resource_id: str = "r1") -> st.SearchStrategy[dict[str, Any]]:
    """Whole messages in Mastra's JSON shape around :data:`contents`, with distinct ids per draw."""
    return st.builds(
        lambda n, role, content: {"id": f"m-{n}", "content": content, "role": role,
                                  "createdAt": f"2025-01-01T00:00:{n % 60:02d}.{n % 1000:03d}Z",
                                  "threadId": thread_id, "resourceId": resource_id},
        st.integers(min_value=0, max_value=10**9), st.sampled_from(["user", "assistant"]), contents,
    )


def canonical(value: Any) -> str:
    """JSON text with sorted keys: equal exactly when two values are equivalent JSON."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
