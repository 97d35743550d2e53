"""The threadmind error hierarchy.

Every error carries a machine-readable ``code`` (the reference's identifier where one exists, else an
upper-snake ``THREADMIND_*`` code), a human message that names the field and the fix (for logs and the operator),
and a ``public_message`` that may be shown to whoever sent the request: it never names another resource's ids or
threads (a browser is not trusted with them)::

    ThreadmindError
    ├── ConfigError (also ValueError)        invalid options, missing storage, closed Memory
    ├── ValidationError (also ValueError)    bad arguments or messages
    │   ├── InvalidMessage                   a message that does not decode / validate
    │   ├── MessageIdTaken                   a message id that already belongs to another thread
    │   └── PayloadTooLarge                  a request body over the size a chat server accepts
    ├── ThreadNotFound                       the thread does not exist
    ├── ResourceMismatch                     the thread belongs to another resource
    ├── StorageError                         the database failed (wraps sqlite3 errors)
    ├── ThreadBusy                           a turn is running and thread_concurrency="reject"
    ├── LeaseLost                            a frozen holder's lease was taken over; its write is refused
    ├── EmbeddingDimensionMismatch           embedder dimension differs from the configured one
    ├── EmbedderError                        the embedder raised
    ├── ModelError                           the language model raised or ran out of script
    └── TripWire                             a processor aborted the run
"""

from __future__ import annotations

__all__ = (
    "ConfigError",
    "EmbedderError",
    "EmbeddingDimensionMismatch",
    "InvalidMessage",
    "LeaseLost",
    "MessageIdTaken",
    "ModelError",
    "PayloadTooLarge",
    "ResourceMismatch",
    "StorageError",
    "ThreadBusy",
    "ThreadNotFound",
    "ThreadmindError",
    "TripWire",
    "ValidationError",
    "error_code",
)


class ThreadmindError(Exception):
    """Base of every threadmind error: a stable ``code`` plus a readable message."""

    default_code = "THREADMIND_ERROR"

    def __init__(self, *args: str, code: str | None = None, public_message: str | None = None) -> None:
        """``ThreadmindError(message, code=...)``, or ``ThreadmindError(code, message)`` as SPEC §7 writes it;
        ``public_message``: what a client may be told, when ``message`` names what it must not learn."""
        if len(args) == 2 and code is None:
            code, message = args
        elif len(args) == 1:
            (message,) = args
        else:
            raise TypeError(f"{type(self).__name__}() takes a message (and code=...), or a code and a message")
        super().__init__(message)
        self.code: str = code or self.default_code
        self.message: str = message
        #: The message for the client of a request (a browser): ``message`` without other tenants' ids.
        self.public_message: str = message if public_message is None else public_message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ConfigError(ThreadmindError, ValueError):
    """Options are invalid or inconsistent (raised at construction or first use)."""

    default_code = "THREADMIND_CONFIG_INVALID"


class ValidationError(ThreadmindError, ValueError):
    """An argument or message is invalid; nothing was written."""

    default_code = "THREADMIND_VALIDATION_FAILED"


class InvalidMessage(ValidationError):
    """A message failed to decode or validate; the message names the offending field."""

    default_code = "INVALID_MESSAGE_CONTENT"


class MessageIdTaken(ValidationError):
    """A message id that already belongs to another thread: a message never moves between threads. The public
    message does not name the other thread."""

    default_code = "THREADMIND_MESSAGE_ID_TAKEN"

    def __init__(self, message_id: str, other_thread: str, thread_id: str | None = None) -> None:
        self.message_id = message_id
        self.other_thread = other_thread
        detail = f"; a message cannot move to thread {thread_id!r}" if thread_id is not None else ""
        super().__init__(f"message id {message_id!r} already belongs to thread {other_thread!r}{detail}",
                         public_message=f"message id {message_id!r} is already used by another conversation; a new "
                                        "message needs an id of its own")


class PayloadTooLarge(ValidationError):
    """A request body is larger than the chat server accepts (HTTP 413); it was not read further."""

    default_code = "THREADMIND_PAYLOAD_TOO_LARGE"


class ThreadNotFound(ThreadmindError, LookupError):
    """The thread does not exist."""

    default_code = "THREADMIND_THREAD_NOT_FOUND"

    def __init__(self, thread_id: str, *, code: str | None = None, message: str | None = None) -> None:
        self.thread_id = thread_id
        super().__init__(message or f"thread {thread_id!r} does not exist", code=code)


class ResourceMismatch(ThreadmindError):
    """The thread is owned by another resource than the one given."""

    default_code = "THREADMIND_RESOURCE_MISMATCH"

    def __init__(
        self,
        thread_id: str,
        owner: str,
        resource_id: str,
        *,
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.owner = owner
        self.resource_id = resource_id
        super().__init__(
            message
            or f"Thread with id {thread_id} is for resource with id {owner} "
            f"but resource {resource_id} was queried.",
            code=code,
            public_message=f"thread {thread_id!r} belongs to another resource",
        )


class StorageError(ThreadmindError):
    """The storage backend failed; the cause is chained."""

    default_code = "THREADMIND_STORAGE_FAILED"


class ThreadBusy(ThreadmindError):
    """A turn is already running on this thread and ``thread_concurrency="reject"``."""

    default_code = "THREADMIND_THREAD_BUSY"

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(f"thread {thread_id!r} already has a turn in progress (thread_concurrency='reject')")


class LeaseLost(ThreadmindError):
    """A write by a holder whose lease on a thread expired (it was frozen or too slow) and was taken over.

    Nothing of the refused write is stored; what the holder wrote while its lease was valid stays.
    """

    default_code = "THREADMIND_LEASE_LOST"

    def __init__(self, key: str, detail: str = "") -> None:
        self.key = key
        super().__init__(f"the lease on {key!r} was lost{': ' + detail if detail else ''}; nothing was written")


class EmbeddingDimensionMismatch(ThreadmindError):

    """The embedder returned vectors of another dimension than ``embedding_dimension``."""

    default_code = "MASTRA_MEMORY_EMBEDDING_DIMENSION_MISMATCH"

    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"embedding_dimension is {expected} but the embedder returned vectors of dimension {actual}; "
            "use a matching embedder or change embedding_dimension"
        )


class EmbedderError(ThreadmindError):
    """The embedder raised; the original error is chained as ``__cause__``."""

    default_code = "THREADMIND_EMBEDDER_FAILED"


class ModelError(ThreadmindError):
    """The language model raised, or a scripted model ran out of responses."""

    default_code = "THREADMIND_MODEL_FAILED"


class TripWire(ThreadmindError):
    """A processor called ``abort(reason)``: the run ends and nothing is persisted."""

    default_code = "THREADMIND_TRIPWIRE"

    def __init__(self, reason: str, *, processor_id: str | None = None, retry: bool = False) -> None:
        self.reason = reason
        self.processor_id = processor_id
        self.retry = retry
        super().__init__(reason)


def error_code(exc: BaseException) -> str:
    """What a log line may say of a failure without its text: a threadmind error's ``code``, else the class name
    (the text of a failure can quote what a user wrote)."""
    return exc.code if isinstance(exc, ThreadmindError) else type(exc).__name__
