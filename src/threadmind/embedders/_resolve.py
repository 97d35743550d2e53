"""Embedder strings: ``"openai/<model>"`` → :class:`OpenAIEmbedder`; an :class:`Embedder` passes through."""

from __future__ import annotations

from ..errors import ConfigError
from ._protocol import Embedder

__all__ = ("resolve_embedder",)

_SUPPORTED = "'openai/<model>' (e.g. 'openai/text-embedding-3-small')"


def resolve_embedder(spec: str | Embedder) -> Embedder:
    """An embedder from a ``"<provider>/<model>"`` string, or ``spec`` itself when it already is one.

    :raises ~threadmind.errors.ConfigError: an unknown provider, a string without one, an object that is not
        an embedder, or httpx missing for ``openai/…``.
    """
    if isinstance(spec, str):
        provider, sep, name = spec.partition("/")
        if not sep or not provider or not name:
            raise ConfigError(f"embedder {spec!r} must be a '<provider>/<model>' string; supported: {_SUPPORTED}")
        if provider == "openai":
            from ._openai import OpenAIEmbedder

            return OpenAIEmbedder(name)
        raise ConfigError(f"embedder provider {provider!r} in {spec!r} is not supported; supported: {_SUPPORTED}")
    if isinstance(spec, Embedder):
        return spec
    raise ConfigError(f"embedder must be a '<provider>/<model>' string or an Embedder, not {type(spec).__name__}")
