"""Embeddings for hybrid recall: one small interface, three providers.

- `none`: no vectors; recall is keyword search only (always available).
- `local`: all-MiniLM-L6-v2 under ONNX Runtime or in NumPy (local.py); its weights
  from the `local-embeddings` extra, or fetched once by the daemon (weights.py).
- `openai`: any OpenAI-compatible `/v1/embeddings` endpoint over httpx (openai.py).

`auto` (the default) is `local` when it can run (always, in the default install,
unless fetching the weights is turned off and they are not installed), else `none`.
Vectors are computed off the save path: the SQLite backend's `embed_pending`
drains chunks that have no vector yet, in the background.

    interface.py  the embedder interface: text in, L2-normalised float32 vectors out
    local.py      the `local` provider: tokenizer, encoder, pooling, batches
    bert.py       the BERT encoder written out in NumPy (the reference forward pass)
    bert_onnx.py  the same encoder as an ONNX graph, run by ONNX Runtime
    weights.py    where the local model's weights come from (installed, or fetched once)
    openai.py     the `openai` provider over httpx
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from memoryd.config_memory import EmbeddingSettings
from memoryd.errors import EmbeddingError, EmbeddingLoading, EmbeddingUnavailable
from memoryd.memory.embeddings import local, weights
from memoryd.memory.embeddings.interface import (
    Embedder,
    Vectors,
    normalise,
)
from memoryd.process import return_freed_memory

log = structlog.get_logger("memoryd.memory.embeddings")

__all__ = [
    "Embedder",
    "EmbeddingError",
    "EmbeddingUnavailable",
    "LazyLocalEmbedder",
    "Vectors",
    "make_embedder",
    "normalise",
    "resolve_provider",
]


class LazyLocalEmbedder:
    """The local model, loaded on first use: a `memoryd recall` without words never pays
    for it, and the daemon loads it in the background worker, not at start-up.

    With `fetch`, embedding stored texts (the daemon's background job, never a
    recall) fetches the weights once when they are missing (`weights.fetch`),
    retrying a failed fetch only after FETCH_RETRY seconds. A query never fetches
    and never waits: without weights it raises EmbeddingUnavailable and recall
    answers by keywords. `release` drops the loaded model (an idle daemon's memory).
    """

    name = local.LocalEmbedder.name
    dimensions = local.LocalEmbedder.dimensions
    on_this_machine = True
    FETCH_RETRY = 3600.0

    def __init__(self, runtime: local.Runtime = "auto", models: Path | None = None,
                 fetch: bool = False, precision: local.Precision = "int8") -> None:
        self._runtime = runtime
        self._precision: local.Precision = precision
        self._models = models
        self._fetch = fetch
        self._model: local.LocalEmbedder | None = None
        self._lock = threading.Lock()
        self._fetch_failed_at: float | None = None
        self._last_used = time.monotonic()
        self._defer_to: Callable[[], bool] | None = None
        #: Whether a query waits while the model loads (a command's own recall); the
        #: daemon sets False: a hook's recall must not wait 0.5-2 s for a model, so it
        #: answers by keywords while `prepare` loads the model behind it.
        self.queries_wait = True
        self._preparing: threading.Thread | None = None
        self._preparing_lock = threading.Lock()

    @property
    def defer_to(self) -> Callable[[], bool] | None:
        """See `LocalEmbedder.defer_to`; kept across a release and a reload."""
        return self._defer_to

    @defer_to.setter
    def defer_to(self, busy: Callable[[], bool] | None) -> None:
        self._defer_to = busy
        if self._model is not None:
            self._model.defer_to = busy

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def embed(self, texts: Sequence[str]) -> Vectors:
        self._last_used = time.monotonic()
        return self._loaded(may_fetch=True).embed(texts)

    def embed_query(self, text: str) -> Vectors:
        self._last_used = time.monotonic()
        model = self._model
        if model is None or not model.query_ready:
            if not self.queries_wait:
                self.prepare()
                raise EmbeddingLoading("the local model is loading; keywords answer meanwhile",
                                       provider="local")
            model = self._loaded(may_fetch=False)
        return model.embed_query(text)

    def prepare(self) -> None:
        """Load the model and its query encoder on a thread of its own, unless they are
        loaded, being loaded, or not here (fetching is the background job's). Only where
        queries do not wait (the daemon): elsewhere the query itself loads them."""
        if self.queries_wait:
            return
        model = self._model
        if model is not None and model.query_ready:
            return
        # Not the model's own lock: a fetch under way holds that one for seconds.
        with self._preparing_lock:
            if self._preparing is not None and self._preparing.is_alive():
                return
            if local.model_dir(self._models) is None:
                return
            self._preparing = threading.Thread(target=self._prepare, daemon=True,
                                               name="memoryd-model-load")
            self._preparing.start()

    def _prepare(self) -> None:
        began = time.monotonic()
        try:
            self._loaded(may_fetch=False).prepare_query()
        except EmbeddingError as exc:
            log.info("embedding_model_not_loaded", error=str(exc))
            return
        log.info("embedding_model_loaded", seconds=round(time.monotonic() - began, 3))

    @property
    def yields_cores(self) -> bool:
        """See `LocalEmbedder.yields_cores` (before loading: whether ONNX Runtime will run)."""
        model = self._model
        if model is not None:
            return model.yields_cores
        return local.runtime_name(self._runtime) == "onnxruntime"

    def release_if_idle(self, seconds: float) -> bool:
        """Drop the loaded model when unused for `seconds` (about 190 MB of an idle
        daemon); the next embedding or query loads it again (0.4-1 s)."""
        with self._lock:
            if self._model is None or time.monotonic() - self._last_used < seconds:
                return False
            self._model.close()
            self._model = None
        gc.collect()
        # Freed heap back to the system: 233 -> 174 MB after a release without it, 99 MB with.
        return_freed_memory()
        log.info("embedding_model_released", idle_seconds=seconds)
        return True

    def _loaded(self, *, may_fetch: bool) -> local.LocalEmbedder:
        with self._lock:
            if self._model is None:
                if may_fetch and self._fetch and self._models is not None and (
                        local.model_dir(self._models) is None):
                    self._fetch_weights(self._models)
                self._model = local.LocalEmbedder.load(self._runtime, self._models,
                                                       self._precision)
                self._model.defer_to = self._defer_to
            return self._model

    def _fetch_weights(self, models: Path) -> None:
        failed = self._fetch_failed_at
        if failed is not None and time.monotonic() - failed < self.FETCH_RETRY:
            raise EmbeddingUnavailable("the local model's weights could not be fetched;"
                                       " retrying later", provider="local")
        try:
            weights.fetch(models)
        except EmbeddingError as exc:
            self._fetch_failed_at = time.monotonic()
            log.warning("model_fetch_failed", error=str(exc),
                        retry_in_seconds=self.FETCH_RETRY)
            raise
        self._fetch_failed_at = None


def resolve_provider(settings: EmbeddingSettings, models: Path | None = None) -> str:
    """The provider in use: `auto` becomes `local` when it can run (the tokenizer and
    runtime are installed, and the weights are here or may be fetched), else `none`."""
    if settings.provider == "auto":
        if local.can_run() and (local.available(models)
                                or (settings.fetch_model and models is not None)):
            return "local"
        return "none"
    return settings.provider


def make_embedder(settings: EmbeddingSettings, models: Path | None = None) -> Embedder | None:
    """The configured embedder, or None for `none` (EmbeddingError if `local` cannot run).

    `models` is where fetched weights live (`<state_dir>/models`)."""
    provider = resolve_provider(settings, models)
    if provider == "none":
        return None
    if provider == "local":
        if not local.can_run() or not (local.available(models) or (
                settings.fetch_model and models is not None)):
            raise EmbeddingError(
                "the local model is not here and fetching it is off"
                " (memory.embeddings.fetch_model), or the tokenizer is not installed",
                provider="local")
        return LazyLocalEmbedder(settings.local_runtime, models, fetch=settings.fetch_model,
                                 precision=settings.local_precision)
    # Imported here: httpx loads only when an endpoint is configured (a smaller daemon).
    from memoryd.memory.embeddings.openai import OpenAIEmbedder, OpenAIOptions

    o = settings.openai
    return OpenAIEmbedder(OpenAIOptions(
        base_url=o.base_url, model=o.model, dimensions=o.dimensions,
        api_key_env=o.api_key_env, batch_size=o.batch_size, timeout=o.timeout,
    ))
