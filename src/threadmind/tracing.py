"""OpenTelemetry helpers: one tracer lookup, GenAI memory attribute names, and span shortcuts.

Only ``opentelemetry-api`` is used; without an SDK every span is a cheap no-op. The tracer is looked up
at call time (not cached at import) so a provider installed later is honoured. Message text is never put
on a span unless ``capture_content`` is switched on by the caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

__all__ = (
    "ATTR_CONVERSATION_ID",
    "ATTR_DB_SYSTEM",
    "ATTR_MAILBOX_DEPTH",
    "ATTR_OPERATION",
    "ATTR_RESOURCE_ID",
    "ATTR_THREAD_ID",
    "get_tracer",
    "mark_error",
    "operation_span",
    "tracing_enabled",
)

ATTR_OPERATION = "gen_ai.operation.name"
ATTR_CONVERSATION_ID = "gen_ai.conversation.id"
ATTR_THREAD_ID = "threadmind.thread.id"
ATTR_RESOURCE_ID = "threadmind.resource.id"
ATTR_MAILBOX_DEPTH = "threadmind.mailbox.depth"
ATTR_DB_SYSTEM = "db.system.name"

_VERSION = "0.1.0"
# The thread and resource an operation names travel in the OpenTelemetry context (which mailboxes carry), so
# the spans nested inside it (an index query in resource scope, an actor's store write) name them too.
_THREAD_KEY = otel_context.create_key("threadmind.thread")
_RESOURCE_KEY = otel_context.create_key("threadmind.resource")


class _TracerCache:
    """Remembers the tracer of the last provider seen; a new global provider is picked up on the next call."""

    __slots__ = ("checked", "enabled", "provider", "tracer")

    def __init__(self) -> None:
        self.provider: object = None
        self.tracer: trace.Tracer | None = None
        self.enabled = False
        self.checked = False


_cache = _TracerCache()


def tracing_enabled() -> bool:
    """False while no tracer provider is installed: every span would be a no-op, so none is made at all.

    The global provider can be set only once, so once this is True it stays True.
    """
    if _cache.enabled:
        return True
    # ``get_tracer_provider()`` consults ``os.environ`` on every call while no provider is set, which costs
    # more than a whole mailbox hop; the API's module global says the same thing for free. The environment
    # variable path is still honoured: it is read once, by the first call below.
    if _cache.checked and getattr(trace, "_TRACER_PROVIDER", True) is None:
        return False
    _cache.checked = True
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return False
    _cache.enabled = True
    return True


def mark_error(exc: BaseException) -> None:
    """Mark the current span as failed by ``exc`` (a failure that is handled, so no span ends with it)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def get_tracer() -> trace.Tracer:
    """The threadmind tracer from the current global provider (cached per provider: this is a hot path)."""
    provider = trace.get_tracer_provider()
    tracer = _cache.tracer
    if tracer is None or _cache.provider is not provider:
        tracer = provider.get_tracer("threadmind", _VERSION)
        _cache.provider, _cache.tracer = provider, tracer
    return tracer


class _NoSpan(AbstractContextManager[Span]):
    """What ``operation_span`` returns while tracing is off: one shared object, nothing to allocate."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return trace.INVALID_SPAN

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def operation_span(
    name: str,
    operation: str,
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    **attributes: Any,
) -> AbstractContextManager[Span]:
    """A span for one public memory operation, with the GenAI memory attributes set.

    A span that names no thread (or resource) takes the one of the operation it runs inside, across mailbox
    hops too: every span of a call that names a thread carries ``gen_ai.conversation.id``. Exceptions are
    recorded and mark the span as an error; they propagate unchanged. Without a tracer provider this is a
    shared no-op (no span objects, no context switches: the hot paths stay hot).
    """
    if not tracing_enabled():
        return _NO_SPAN
    return _recording_span(name, operation, thread_id, resource_id, kind, attributes)


@contextmanager
def _recording_span(
    name: str,
    operation: str,
    thread_id: str | None,
    resource_id: str | None,
    kind: SpanKind,
    attributes: dict[str, Any],
) -> Iterator[Span]:
    ctx = otel_context.get_current()
    if thread_id is None:
        thread_id = otel_context.get_value(_THREAD_KEY, ctx)  # type: ignore[assignment]
    else:
        ctx = otel_context.set_value(_THREAD_KEY, thread_id, ctx)
    if resource_id is None:
        resource_id = otel_context.get_value(_RESOURCE_KEY, ctx)  # type: ignore[assignment]
    else:
        ctx = otel_context.set_value(_RESOURCE_KEY, resource_id, ctx)
    attrs: dict[str, Any] = {ATTR_OPERATION: operation}
    if thread_id is not None:
        attrs[ATTR_CONVERSATION_ID] = thread_id
        attrs[ATTR_THREAD_ID] = thread_id
    if resource_id is not None:
        attrs[ATTR_RESOURCE_ID] = resource_id
    for key, value in attributes.items():
        if value is not None:
            attrs[key.replace("__", ".")] = value
    token = otel_context.attach(ctx)
    try:
        with get_tracer().start_as_current_span(
            name, kind=kind, attributes=attrs, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except BaseException as exc:
                if span.is_recording() and isinstance(exc, Exception):
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
    finally:
        otel_context.detach(token)
