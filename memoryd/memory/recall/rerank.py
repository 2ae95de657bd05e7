"""An optional reranker served elsewhere: recall's best candidates, reordered by a model
that reads the query and each memory together (a cross-encoder).

Any endpoint with the common `/rerank` shape works (Cohere, Jina, vLLM, Hugging Face
TEI, Infinity): `POST {base_url}/rerank` with `{"model", "query", "documents",
"top_n"}`; the answer is `{"results": [{"index", "relevance_score"}]}` or TEI's bare
list `[{"index", "score"}]`. A cross-encoder of MiniLM's size needs seconds per query
on a laptop's CPU, so it runs where there is a GPU, and is off by default
(`memory.rerank.provider: none`).

A reranker that fails (down, slow past `timeout`, an error status, a malformed
answer) never fails recall: the candidates keep their order, the failure is
logged once, and the reranker is not asked again for DOWN_FOR seconds. The API
key is read from the environment variable the settings name and sent only in the
Authorization header; errors and logs carry the URL and status, never the key.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger("memoryd.memory.rerank")

#: After a failure, recall goes without the reranker this long.
DOWN_FOR = 30.0


@dataclass(frozen=True, slots=True)
class RerankOptions:
    base_url: str
    model: str = ""
    api_key_env: str = "MEMORYD_RERANK_API_KEY"
    #: How many of recall's best candidates are sent to be reordered.
    candidates: int = 30
    timeout: float = 2.0


class HttpReranker:
    def __init__(self, options: RerankOptions, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.options = options
        self._transport = transport
        self._down_until = 0.0

    @property
    def url(self) -> str:
        return self.options.base_url.rstrip("/") + "/rerank"

    async def scores(self, query: str, documents: Sequence[str]) -> list[float] | None:
        """One relevance score per document, or None when the reranker cannot answer."""
        if not documents or time.monotonic() < self._down_until:
            return None
        headers = {}
        key = os.environ.get(self.options.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body: dict[str, Any] = {"query": query, "documents": list(documents),
                                "top_n": len(documents), "return_documents": False}
        if self.options.model:
            body["model"] = self.options.model
        import httpx  # only with a reranker configured: the daemon's memory is smaller without

        try:
            async with httpx.AsyncClient(timeout=self.options.timeout,
                                         transport=self._transport) as client:
                response = await client.post(self.url, json=body, headers=headers)
            if not 200 <= response.status_code < 300:
                problem = f"HTTP {response.status_code}"
            else:
                found = _parse(response.json(), len(documents))
                if found is not None:
                    return found
                problem = "the answer has no results with an index and a score"
        except httpx.HTTPError as exc:
            problem = type(exc).__name__
        except ValueError:
            problem = "the answer is not JSON"
        self._down_until = time.monotonic() + DOWN_FOR
        log.warning("rerank_failed", url=self.url, problem=problem, retry_in_s=DOWN_FOR)
        return None


def _parse(answer: Any, count: int) -> list[float] | None:
    items = answer.get("results") if isinstance(answer, dict) else answer
    if not isinstance(items, list):
        return None
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            return None
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count
                or not isinstance(score, int | float) or isinstance(score, bool)):
            return None
        scores[index] = float(score)
    if any(s is None for s in scores):
        return None
    return [float(s) for s in scores if s is not None]


def reorder(scores: Sequence[float], count: int) -> list[int]:
    """The candidates' new order: by score, best first, ties in their old order."""
    return sorted(range(count), key=lambda i: (-scores[i], i))
