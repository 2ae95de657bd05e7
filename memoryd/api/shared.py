"""What every group of operations shares (`OpsBase`), the runtime they run in, and
the limits they keep."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import aiosqlite
import structlog

from memoryd.api import args as arg
from memoryd.clock import Clock
from memoryd.config import Settings, SourceKind
from memoryd.errors import ApiError, MemorydError
from memoryd.lifecycle.recovery import SyncReport
from memoryd.memory import Capability, MemoryBackend, MemoryType, RecallOrder, RecallResult
from memoryd.memory.models import Memory, visible_to
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
from memoryd.store import holds, links
from memoryd.store.injections import Injection, record_injection

log = structlog.get_logger("memoryd.api")

#: The most results one request may ask for.
MAX_LIMIT = 200


class Runtime(Protocol):
    """What only a process that ingests can do: the daemon, or a direct fallback."""

    async def follow(self, path: str, kind: SourceKind, *, read_to_end: bool) -> None:
        """Follow this transcript; with `read_to_end`, return once it is stored to its end."""
        ...

    async def catch_up(self, seconds: float) -> None:
        """Read what the transcripts hold now, for at most `seconds` (no-op without a
        daemon: the hook then reads the stores as they are)."""
        ...

    async def sync(self, session_id: int | None) -> SyncReport:
        """Save the unsynced messages of one session (or all) to memory now."""
        ...

    def sync_later(self, session_id: int, delay: float, *,
                   settle_questions: bool = False) -> None:
        """Ask for a sync of this session after `delay` seconds (later asks replace it);
        `settle_questions` holds back a question still waiting for its answer."""
        ...

    async def open_ui(self) -> str:
        """Serve the web viewer (started on first use); the address that logs a browser in."""
        ...


class OpsBase:
    """The state every group of operations shares: settings, clock, the daemon's store
    connection, the memory backend, the runtime, and the helpers they all use."""

    def __init__(self, settings: Settings, clock: Clock, conn: aiosqlite.Connection,
                 backend: MemoryBackend, runtime: Runtime) -> None:
        self.settings = settings
        self.clock = clock
        self._conn = conn
        self._backend = backend
        self._runtime = runtime
        # One transaction at a time on the shared connection (concurrent requests).
        self._writing = asyncio.Lock()
        self._refused: set[str] = set()  # transcript paths refused (said once each)
        rerank = settings.memory.rerank
        self._reranker = None if rerank.provider == "none" else HttpReranker(RerankOptions(
            base_url=rerank.base_url, model=rerank.model, api_key_env=rerank.api_key_env,
            candidates=rerank.candidates, timeout=rerank.timeout))

    @property
    def store(self) -> aiosqlite.Connection:
        """The daemon's store connection (the viewer's read-only queries)."""
        return self._conn

    @property
    def memory(self) -> MemoryBackend:
        return self._backend

    async def _recall(self, query: str, args: Mapping[str, Any], *, limit: int,
                      types: Sequence[MemoryType] | None = None,
                      order: RecallOrder = "score") -> list[RecallResult]:
        now = self.clock.now()
        kinds = types if types is not None else arg.types(args)
        ranked = order == "score" and bool(query.strip())
        reranking = self._reranker is not None and ranked
        wanted = max(limit, self.settings.memory.rerank.candidates) if reranking else limit
        scope: dict[str, Any] = {
            "project": await self._linked(args), "all_projects": arg.flag(args, "all_projects"),
            "types": kinds, "agent": arg.agent(args)}
        since, until = arg.when(args, "since", now), arg.when(args, "until", now)
        spoken = spoken_time(query, arg.when(args, "as_of", now) or now) if ranked else None
        results: list[RecallResult] = []
        only_time = False
        if spoken is not None and spoken.only_time:
            results = await self._recall_then(spoken, scope, limit=wanted, since=since,
                                              until=until)
            only_time = bool(results)
            if not only_time:
                spoken = None  # nothing then: the words as they were asked
        if not only_time:
            # With a time spoken of, more are weighed: one of then may rank lower.
            results = await self._backend.recall(
                query, limit=max(wanted, SPOKEN_TIME_POOL) if spoken else wanted,
                since=since, until=until, order=order, **scope)
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
        floor = self.settings.memory.embeddings.min_similarity
        return [r for r in results if above_floor(asked_of(r, query, spoken),
                                                  r.excerpt or r.content, r.similarity, floor)]

    async def _recall_then(self, spoken: SpokenTime, scope: dict[str, Any], *, limit: int,
                           since: datetime | None, until: datetime | None,
                           ) -> list[RecallResult]:
        """The memories of the time a query that is only a time speaks of ("what did we do
        yesterday?"), best first by weight; [] when the backend cannot select by time."""
        if Capability.TEMPORAL not in self._backend.capabilities:
            return []
        start = max(spoken.start, since) if since is not None else spoken.start
        end = min(spoken.end, until) if until is not None else spoken.end
        if start >= end:
            return []
        return await self._backend.recall("", limit=limit, since=start, until=end, **scope)

    async def _linked(self, args: Mapping[str, Any]) -> str | None:
        """The request's project, by its new path when it was linked to one."""
        return await links.resolve(self._conn, arg.project(args))

    @staticmethod
    def _visible(memory: Memory | None, args: Mapping[str, Any]) -> Memory | None:
        """`memory`, unless an agent asks and it is another agent's private memory (a
        person, asking without an agent, sees all of their own memories by id)."""
        if memory is None or "agent" not in args or visible_to(memory.private_to,
                                                               arg.agent(args)):
            return memory
        return None

    def _require(self, capability: Capability) -> None:
        if capability not in self._backend.capabilities:
            raise ApiError(501, f"the {self._backend.name} memory backend cannot"
                                f" {capability.value}")

    def _noting_copies(self, answer: dict[str, Any], capability: Capability) -> dict[str, Any]:
        """`answer`, plus the layers that cannot do `capability` and so keep their copy as it
        was (the Memory Gateway keeps what is forgotten or corrected elsewhere)."""
        cannot = getattr(self._backend, "cannot", None)
        remains = cannot(capability) if cannot is not None else []
        return {**answer, "remains_in": remains} if remains else answer

    async def _record(self, injection: Injection) -> None:
        try:
            async with self._writing:
                await record_injection(self._conn, injection, self.clock.now())
        except MemorydError as exc:
            # What was given is still given; only its record is lost.
            log.warning("injection_not_recorded", error=str(exc))


def refuse_if_held(held: holds.Holds, project: str | None, session_id: int | None,
                    session_external_id: str | None) -> None:
    if held.covers(project=project, session_id=session_id,
                   session_external_id=session_external_id):
        raise ApiError(409, "a legal hold covers this (`memoryd hold list`); release it"
                            " before deleting anything it keeps")
