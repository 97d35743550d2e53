"""Language models: the ``LanguageModel`` protocol, a scripted fake and an OpenAI-compatible HTTP client.

A model answers a step with ``generate``; one that can also ``stream`` (``StreamingLanguageModel``) yields
``ModelChunk`` s. ``stream_model`` streams any model (one without ``stream`` as one chunk) and
``collect_response`` joins chunks back into the ``ModelResponse`` ``generate`` would return.

Importing this package does not import httpx; ``OpenAIChatModel`` imports it when constructed.
"""

from __future__ import annotations

from .._public import present_as
from ._openai import OpenAIChatModel as OpenAIChatModel
from ._openai import resolve_model as resolve_model
from ._protocol import LanguageModel as LanguageModel
from ._protocol import ModelChunk as ModelChunk
from ._protocol import ModelRequest as ModelRequest
from ._protocol import ModelResponse as ModelResponse
from ._protocol import StreamingLanguageModel as StreamingLanguageModel
from ._protocol import ToolCall as ToolCall
from ._protocol import ToolInputDelta as ToolInputDelta
from ._protocol import ToolSpec as ToolSpec
from ._scripted import ScriptedModel as ScriptedModel
from ._stream import stream_model as stream_model

__all__ = (
    "LanguageModel",
    "ModelChunk",
    "ModelRequest",
    "ModelResponse",
    "OpenAIChatModel",
    "ScriptedModel",
    "StreamingLanguageModel",
    "ToolCall",
    "ToolInputDelta",
    "ToolSpec",
    "resolve_model",
    "stream_model",
)

present_as(globals(), __name__)
