"""Embeddings for hybrid recall: one small interface, three providers.

- `none`: no vectors; recall is keyword search only (always available).
- `local`: all-MiniLM-L6-v2 from the `local-embeddings` extra, under ONNX Runtime
  or in NumPy (local.py).
- `openai`: any OpenAI-compatible `/v1/embeddings` endpoint over httpx (openai.py).

`auto` (the default) is `local` when its extra is installed, else `none`.
Vectors are computed off the save path: the SQLite backend's `embed_pending`
drains chunks that have no vector yet, in the background.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.config import EmbeddingSettings
from daemon.memory.embeddings import local
from daemon.memory.embeddings.base import (
    Embedder,
    EmbeddingError,
    EmbeddingUnavailable,
    Vectors,
    normalise,
)
from daemon.memory.embeddings.openai import OpenAIEmbedder, OpenAIOptions

__all__ = [
    "Embedder",
    "EmbeddingError",
    "EmbeddingUnavailable",
    "LazyLocalEmbedder",
    "OpenAIEmbedder",
    "OpenAIOptions",
    "Vectors",
    "make_embedder",
    "normalise",
    "resolve_provider",
]


class LazyLocalEmbedder:
    """The local model, loaded on first use: a `memoryd recall` without words never pays
    for it, and the daemon loads it in the background worker, not at start-up."""

    name = local.LocalEmbedder.name
    dimensions = local.LocalEmbedder.dimensions
    on_this_machine = True

    def __init__(self, runtime: local.Runtime = "auto") -> None:
        self._runtime = runtime
        self._model: local.LocalEmbedder | None = None

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self._loaded().embed(texts)

    def embed_query(self, text: str) -> Vectors:
        return self._loaded().embed_query(text)

    def _loaded(self) -> local.LocalEmbedder:
        if self._model is None:
            self._model = local.LocalEmbedder.load(self._runtime)
        return self._model


def resolve_provider(settings: EmbeddingSettings) -> str:
    """The provider in use: `auto` becomes `local` when its extra is installed, else `none`."""
    if settings.provider == "auto":
        return "local" if local.available() else "none"
    return settings.provider


def make_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The configured embedder, or None for `none` (EmbeddingError if `local` is missing)."""
    provider = resolve_provider(settings)
    if provider == "none":
        return None
    if provider == "local":
        if not local.available():
            raise EmbeddingError(
                "the local model is not installed (pip install 'memoryd[local-embeddings]')",
                provider="local")
        return LazyLocalEmbedder(settings.local_runtime)
    o = settings.openai
    return OpenAIEmbedder(OpenAIOptions(
        base_url=o.base_url, model=o.model, dimensions=o.dimensions,
        api_key_env=o.api_key_env, batch_size=o.batch_size, timeout=o.timeout,
    ))
