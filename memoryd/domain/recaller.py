"""Recall as every interface gets it (`Recaller`): the backend's ranking, then what a
time spoken of in the words selects, the reranker when one is configured, one result per
session and the relevance floor."""

from __future__ import annotations

from memoryd.domain.core import Core
from memoryd.domain.requests import Scope
from memoryd.memory import Capability, RecallOrder, RecallResult
from memoryd.memory.recall import per_session
from memoryd.memory.recall.gate import above_floor
from memoryd.memory.recall.rerank import HttpReranker, RerankOptions, reorder
from memoryd.memory.recall.spoken_time import (
    SPOKEN_TIME_POOL,
    SpokenTime,
    asked_of,
    spoken_first,
    spoken_scores,
    spoken_time,
)


class Recaller:
    """Recall over the core's backend, with the reranker the settings name."""

    def __init__(self, core: Core) -> None:
        self._core = core
        rerank = core.settings.memory.rerank
        self._reranker = None if rerank.provider == "none" else HttpReranker(RerankOptions(
            base_url=rerank.base_url, model=rerank.model, api_key_env=rerank.api_key_env,
            candidates=rerank.candidates, timeout=rerank.timeout))

    async def recall(self, query: str, scope: Scope, *, limit: int,
                     order: RecallOrder = "score") -> list[RecallResult]:
        """The memories for `query` in `scope`, best first (`order="score"`), or newest or
        in time order; at most `limit`."""
        core = self._core
        ranked = order == "score" and bool(query.strip())
        reranking = self._reranker is not None and ranked
        wanted = max(limit, core.settings.memory.rerank.candidates) if reranking else limit
        project = await core.linked(scope.project)
        kinds = list(scope.types) if scope.types is not None else None
        spoken = spoken_time(query, scope.as_of or core.clock.now()) if ranked else None
        results: list[RecallResult] = []
        only_time = False
        if spoken is not None and spoken.only_time:
            results = await self._recall_then(spoken, scope, project, limit=wanted)
            only_time = bool(results)
            if not only_time:
                spoken = None  # nothing then: the words as they were asked
        if not only_time:
            # With a time spoken of, more are weighed: one of then may rank lower.
            results = await core.backend.recall(
                query, limit=max(wanted, SPOKEN_TIME_POOL) if spoken else wanted,
                since=scope.since, until=scope.until, order=order, project=project,
                all_projects=scope.all_projects, types=kinds, agent=scope.agent)
            if spoken is not None:
                results = spoken_first(results, spoken)
        if reranking and self._reranker is not None and len(results) > 1:
            scores = await self._reranker.scores(
                query, [r.excerpt or r.content for r in results])
            if scores is not None:
                if spoken is not None:  # the reranker reads texts, not when they were said
                    scores = spoken_scores(results, scores, spoken)
                results = [results[i] for i in reorder(scores, len(results))]
        if not ranked:
            return results[:limit]
        # Backends answer one memory per session already; a chain's layers merged may not.
        results = per_session.one_per_session(results, limit)
        if only_time:
            return results
        floor = core.settings.memory.embeddings.min_similarity
        return [r for r in results if above_floor(asked_of(r, query, spoken),
                                                  r.excerpt or r.content, r.similarity, floor)]

    async def _recall_then(self, spoken: SpokenTime, scope: Scope, project: str | None, *,
                           limit: int) -> list[RecallResult]:
        """The memories of the time a query that is only a time speaks of ("what did we do
        yesterday?"), best first by weight; [] when the backend cannot select by time."""
        backend = self._core.backend
        if Capability.TEMPORAL not in backend.capabilities:
            return []
        start = max(spoken.start, scope.since) if scope.since is not None else spoken.start
        end = min(spoken.end, scope.until) if scope.until is not None else spoken.end
        if start >= end:
            return []
        return await backend.recall(
            "", limit=limit, since=start, until=end, project=project,
            all_projects=scope.all_projects,
            types=list(scope.types) if scope.types is not None else None, agent=scope.agent)
