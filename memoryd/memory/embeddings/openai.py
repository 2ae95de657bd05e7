"""The `openai` provider: any OpenAI-compatible `POST {base_url}/embeddings` endpoint.

OpenAI (`text-embedding-3-small` with `dimensions: 512`), Ollama, vLLM and the
like all answer the same request: `{"model", "input": [texts], "dimensions"}` ->
`{"data": [{"index", "embedding"}]}`. Texts go in batches of `batch_size`; a
429, a 5xx, a timeout or a refused connection is retried with exponential
backoff (tenacity), anything else (401, 400, a malformed answer) fails at once.
The API key is read from the environment variable named in the settings, sent
only in the Authorization header, and never appears in a log event or an error
message (errors name the provider, the status and the URL only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
import numpy as np
import structlog
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from memoryd.errors import EmbeddingError, EmbeddingUnavailable
from memoryd.memory.embeddings.interface import (
    Vectors,
    normalise,
)

log = structlog.get_logger("memoryd.memory.embeddings")

PROVIDER = "openai"


@dataclass(frozen=True, slots=True)
class OpenAIOptions:
    base_url: str = "https://api.openai.com/v1"
    model: str = "text-embedding-3-small"
    dimensions: int = 512
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 64
    timeout: float = 30.0
    retry_attempts: int = 5
    retry_wait_max: float = 20.0


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible HTTP endpoint (blocking httpx client)."""

    on_this_machine = False

    def __init__(self, options: OpenAIOptions, *,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.options = options
        self.name = f"{PROVIDER}:{options.model}:{options.dimensions}"
        self.dimensions = options.dimensions
        self._url = options.base_url.rstrip("/") + "/embeddings"
        key = os.environ.get(options.api_key_env, "") if options.api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(headers=headers, timeout=options.timeout,
                                    transport=transport)

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        size = max(1, self.options.batch_size)
        for start in range(0, len(texts), size):
            out[start:start + size] = self._batch(list(texts[start:start + size]))
        return out

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self.embed([text])[0]
        return vector

    def _batch(self, texts: list[str]) -> Vectors:
        for attempt in Retrying(
            retry=retry_if_exception_type(EmbeddingUnavailable),
            stop=stop_after_attempt(self.options.retry_attempts),
            wait=wait_exponential(multiplier=0.05, max=self.options.retry_wait_max),
            reraise=True,
        ):
            with attempt:
                return self._post(texts)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def _post(self, texts: list[str]) -> Vectors:
        body = {"model": self.options.model, "input": texts,
                "dimensions": self.options.dimensions, "encoding_format": "float"}
        try:
            response = self._client.post(self._url, json=body)
        except httpx.TransportError as exc:
            # The exception text may echo the request; keep only its class.
            raise EmbeddingUnavailable(f"{self._url}: {type(exc).__name__}",
                                       provider=PROVIDER) from None
        status = response.status_code
        if status == 429 or status >= 500:
            # Each attempt quietly: the daemon says once when embedding begins to fail.
            log.debug("embeddings_retry", provider=PROVIDER, status=status, url=self._url)
            raise EmbeddingUnavailable(f"{self._url}: HTTP {status}", provider=PROVIDER)
        if status != 200:
            raise EmbeddingError(f"{self._url}: HTTP {status}", provider=PROVIDER)
        try:
            data = sorted(response.json()["data"], key=lambda item: int(item["index"]))
            vectors = np.array([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"{self._url}: malformed answer ({type(exc).__name__})",
                                 provider=PROVIDER) from None
        if vectors.shape != (len(texts), self.dimensions):
            raise EmbeddingError(
                f"{self._url}: expected {len(texts)} vectors of {self.dimensions},"
                f" got shape {vectors.shape}", provider=PROVIDER)
        return normalise(vectors)
