"""Language models: the ``LanguageModel`` protocol, a scripted fake and an OpenAI-compatible HTTP client.

Importing this package does not import httpx; ``OpenAIChatModel`` imports it when constructed.
"""

from __future__ import annotations

from ._openai import OpenAIChatModel as OpenAIChatModel
from ._openai import resolve_model as resolve_model
from ._protocol import LanguageModel as LanguageModel
from ._protocol import ModelRequest as ModelRequest
from ._protocol import ModelResponse as ModelResponse
from ._protocol import ToolCall as ToolCall
from ._protocol import ToolSpec as ToolSpec
from ._scripted import ScriptedModel as ScriptedModel

__all__ = (
    "LanguageModel",
    "ModelRequest",
    "ModelResponse",
    "OpenAIChatModel",
    "ScriptedModel",
    "ToolCall",
    "ToolSpec",
    "resolve_model",
)

