"""The Postgres store's vectors: the HNSW index for an embedder's size, the query's
embedding, this owner's chunks still without a vector embedded, and whether a project
is small enough to compare exactly."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError, EmbeddingLoading
from memoryd.memory.backends.postgres.connection import Connections
from memoryd.memory.backends.postgres.hybrid import Filters
from memoryd.memory.backends.postgres.owner import Owner, mine
from memoryd.memory.backends.postgres.schema import BACKEND_NAME, vector_literal
from memoryd.memory.policy import VectorMark

if TYPE_CHECKING:
    import psycopg

    from memoryd.memory.embeddings.interface import Embedder

log = structlog.get_logger("memoryd.memory.postgres")

#: A project with at most this many chunks is searched by exact distance, not HNSW.
EXACT_SCAN_MAX = 20_000
SCOPE_SIZE_TTL = 60.0


async def vector_index(conn: psycopg.AsyncConnection[Any], embedder: Embedder) -> None:
    """One HNSW (cosine) index per embedding size: pgvector indexes a fixed dimension."""
    dims = int(embedder.dimensions)
    await conn.execute(
        f"CREATE INDEX IF NOT EXISTS memory_chunks_hnsw_{dims} ON memory_chunks"
        f" USING hnsw ((embedding::vector({dims})) vector_cosine_ops)"
        f" WHERE vector_dims(embedding) = {dims}")


async def query_vector(embedder: Embedder, query: str) -> list[float] | None:
    try:
        vector = await asyncio.to_thread(embedder.embed_query, query)
    except EmbeddingLoading:
        return None  # not a failure: the model loads behind this recall
    except BackendError as exc:
        log.warning("memory_recall_keywords_only", backend=BACKEND_NAME, error=str(exc))
        return None
    return [float(v) for v in vector]


class ChunkVectors:
    """This owner's chunk vectors from one embedder (None: keyword search only)."""

    def __init__(self, embedder: Embedder | None, owner: Owner, clock: Clock,
                 db: Connections) -> None:
        self._embedder = embedder
        self._owner = owner
        self._clock = clock
        self._db = db
        self._embed_lock = asyncio.Lock()
        self._vectors = VectorMark()
        # Project -> (when counted, whether its chunks are few): counted once a minute.
        self._scope_sizes: dict[str, tuple[float, bool]] = {}

    def forget_sizes(self) -> None:
        """Count the projects' chunks again (their memories moved)."""
        self._scope_sizes.clear()

    async def few_chunks(self, filters: Filters, params: Mapping[str, Any]) -> bool:
        """Whether the scope holds at most EXACT_SCAN_MAX chunks (counting stops there;
        a project's answer is reused for a minute)."""
        project = str(params.get("project"))
        now = self._clock.monotonic()
        known = self._scope_sizes.get(project)
        if known is not None and now - known[0] < SCOPE_SIZE_TTL:
            return known[1]
        rows = await self._db.read(
            "SELECT COUNT(*) AS n FROM (SELECT 1 FROM memory_chunks c"
            f" WHERE {filters.chunk_where} LIMIT {EXACT_SCAN_MAX + 1}) AS scope_rows", params)
        few = int(rows[0]["n"]) <= EXACT_SCAN_MAX
        if len(self._scope_sizes) > 10_000:
            self._scope_sizes.clear()
        self._scope_sizes[project] = (now, few)
        return few

    async def pending_embeddings(self) -> int:
        if self._embedder is None:
            return 0
        where, params = mine(self._owner)
        rows = await self._db.read(
            "SELECT COUNT(*) AS n FROM memory_chunks c JOIN memories m ON m.seq = c.memory_seq"
            f" WHERE {where} AND (c.model IS DISTINCT FROM %(model)s)"
            " AND m.deleted_at IS NULL AND m.superseded_by IS NULL",
            {**params, "model": self._embedder.name})
        return int(rows[0]["n"])

    async def embed_pending(self, limit: int = 256) -> int:
        """Embed up to `limit` of this owner's chunks that have no vector from the model yet."""
        embedder = self._embedder
        if embedder is None or limit <= 0:
            return 0
        async with self._embed_lock:
            where, params = mine(self._owner)
            now = self._clock.monotonic()
            after, full = self._vectors.start(now)
            # The newest seq first: a chunk added after it is read has a higher one.
            newest = (await self._db.read("SELECT COALESCE(MAX(seq), 0) AS seq"
                                       " FROM memory_chunks", {}))[0]["seq"]
            rows = await self._db.read(
                "SELECT c.seq, c.content FROM memory_chunks c JOIN memories m"
                f" ON m.seq = c.memory_seq WHERE {where} AND (c.model IS DISTINCT FROM %(model)s)"
                " AND m.deleted_at IS NULL AND m.superseded_by IS NULL"
                " AND c.seq > %(after)s ORDER BY c.seq LIMIT %(limit)s",
                {**params, "model": embedder.name, "limit": limit, "after": after})
            # Up to here every live chunk has a vector once these are stored.
            through = int(newest) if len(rows) < limit else int(rows[-1]["seq"])
            if not rows:
                self._vectors.caught_up(through, full, now)
                return 0
            vectors = await asyncio.to_thread(embedder.embed, [r["content"] for r in rows])
            async with self._db.write() as conn, conn.cursor() as cur:
                await cur.executemany(
                    "UPDATE memory_chunks SET model = %s, embedding = %s::vector WHERE seq = %s",
                    [(embedder.name, vector_literal(vectors[i]), r["seq"])
                     for i, r in enumerate(rows)])
            self._vectors.caught_up(through, full, now)
        log.debug("memory_chunks_embedded", backend=BACKEND_NAME, count=len(rows),
                  model=embedder.name)
        return len(rows)
