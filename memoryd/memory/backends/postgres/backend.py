"""The PostgreSQL + pgvector memory backend: one database shared by several memoryds.

Recall with words is hybrid, ranked as every backend ranks (`memoryd/memory/recall/hybrid.py`)
over this backend's channels (`hybrid.py` here): PostgreSQL full text and pgvector, each
statement carrying the filters (owner, live, project, time span, types).
Without query words (or ordered by time) the same weight is computed in SQL.

Ownership: every row carries `owner_user`, `owner_agent` and `project`, and
every statement filters by the user (and by the agents when the settings name
some), so several users can share one database without seeing each other's
memories. `origin` names the memoryd that saved a row: session ids are local
to a memoryd, so `forget_where(session_id=...)` and forgotten-session records
apply to that memoryd's sessions only, while forgetting by the agent's own
session id or a project applies everywhere.

Several memoryds may write at once: saves are `INSERT ... ON CONFLICT DO
NOTHING` on (user, id) in one transaction each, so a segment saved by two of
them, or twice by one after a crash, exists once. Transient failures (the
server restarting, a lost connection, the pool exhausted) are retried a few
times when the failure happened before anything was sent, and then raise
BackendUnavailable, which the chain and the recovery worker treat as "try
again later".
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from memoryd.clock import Clock
from memoryd.errors import BackendError, BackendUnavailable, EmbeddingLoading
from memoryd.memory import policy, writes
from memoryd.memory.backends.postgres.hybrid import AGE_DAYS, Filters, PostgresChannels
from memoryd.memory.backends.postgres.schema import (
    BACKEND_NAME,
    describe,
    migrate,
    password_of,
    sanitize,
    translate,
    vector_literal,
)
from memoryd.memory.export_format import memory_to_record, record_to_memory
from memoryd.memory.models import (
    DECAYING_TYPES,
    ConversationSegment,
    DeletionMode,
    DeletionRecord,
    DistilledMemory,
    ForgottenScope,
    Memory,
    MemoryType,
    Provenance,
    RecallResult,
    RequestedMemory,
    SaveResult,
    SessionSummary,
    chain_order,
)
from memoryd.memory.policy import ForgetScope, VectorMark, began
from memoryd.memory.protocol import Capability, RecallOrder, Relabelled
from memoryd.memory.recall import hybrid, ranking
from memoryd.memory.recall.chunks import chunk_memory
from memoryd.memory.recall.fusion import PARAPHRASE_VECTOR_WEIGHT, VECTOR_WEIGHT, Fusion
from memoryd.memory.recall.words import terms

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from memoryd.memory.embeddings.interface import Embedder

log = structlog.get_logger("memoryd.memory.postgres")

#: A project with at most this many chunks is searched by exact distance, not HNSW.
EXACT_SCAN_MAX = 20_000
SCOPE_SIZE_TTL = 60.0
EXPORT_PAGE_SIZE = 500
IMPORT_BATCH = 500
ANALYZE_AFTER = 1000  # an import this large refreshes the planner's statistics
ATTEMPTS = 2  # a second try after a short pause; then the caller (the chain) falls back
PERSON = "person"  # owner_agent of what a person stored by hand

_COLUMNS = (
    "owner_user", "owner_agent", "origin", "id", "type", "content", "importance", "project",
    "tags", "tags_text", "session_id", "session_external_id", "source", "source_project",
    "first_index", "last_index", "message_uuids", "started_at", "ended_at", "created_at",
    "updated_at", "supersedes", "superseded_by", "reason", "deleted_at", "access_count",
    "last_accessed_at", "private_to",
)
_INSERT_ONCE = (
    f"INSERT INTO memories ({', '.join(_COLUMNS)}) "
    f"SELECT {', '.join('%s' for _ in _COLUMNS)} "
    "WHERE NOT EXISTS (SELECT 1 FROM memory_deletions WHERE owner_user = %s"
    " AND memory_id = %s AND mode = 'hard') "
    "ON CONFLICT (owner_user, id) DO NOTHING RETURNING seq"
)
_INSERT_CHUNK = (
    "INSERT INTO memory_chunks (memory_seq, ordinal, start_char, end_char, content, first_index,"
    " last_index, message_uuids, owner_user, project)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_DECAYING = tuple(t.value for t in DECAYING_TYPES)
# ranking.score's weight in SQL, for recall without words: importance * decay, see `ranking`.
_WEIGHT = (
    "(0.5 + 0.5 * m.importance * CASE WHEN m.type = ANY(%(decaying)s) THEN GREATEST("
    f"CASE WHEN m.access_count > 0 THEN {ranking.USED_DECAY_FLOOR} ELSE {ranking.DECAY_FLOOR}"
    f" END, power(0.5, GREATEST({AGE_DAYS}, 0) / {ranking.HALF_LIFE_DAYS})) ELSE 1 END)"
)
_CHAIN = """
WITH RECURSIVE
  back(id, supersedes) AS (
    SELECT id, supersedes FROM memories WHERE owner_user = %(user)s AND id = %(id)s
    UNION SELECT m.id, m.supersedes FROM memories m JOIN back b ON m.id = b.supersedes
      AND m.owner_user = %(user)s),
  fwd(id, superseded_by) AS (
    SELECT id, superseded_by FROM memories WHERE owner_user = %(user)s AND id = %(id)s
    UNION SELECT m.id, m.superseded_by FROM memories m JOIN fwd f ON m.id = f.superseded_by
      AND m.owner_user = %(user)s)
SELECT * FROM memories WHERE owner_user = %(user)s
  AND id IN (SELECT id FROM back UNION SELECT id FROM fwd)
"""
# The same, its rows locked for the transaction: a forget and a correction of one chain
# at the same moment wait for each other instead of leaving a live correction behind.
_CHAIN_FOR_UPDATE = _CHAIN + " FOR UPDATE"


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose memories a backend reads and writes.

    `user` is on every row and in every query. `agents`, when given, narrows reads
    to memories those agents wrote (None: every agent of the user). `origin` names
    this memoryd (one per state directory).
    """

    user: str
    origin: str
    agents: tuple[str, ...] | None = None


def _utc(value: datetime | None) -> datetime | None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValueError(f"naive datetime {value.isoformat()}: pass a timezone-aware one")
    return value


#: A session's live digests other than `%(id)s`, the one covering the most messages last.
_LIVE_DIGESTS = """
    SELECT id, last_index FROM memories
    WHERE owner_user = %(user)s AND origin = %(origin)s AND type = 'session_digest'
      AND id <> %(id)s AND superseded_by IS NULL AND deleted_at IS NULL
      AND session_id IS NOT DISTINCT FROM %(session_id)s
      AND session_external_id IS NOT DISTINCT FROM %(external)s
      AND source IS NOT DISTINCT FROM %(source)s
    ORDER BY COALESCE(last_index, -1), seq
    FOR UPDATE
"""


class PostgresMemoryBackend:
    """Memory in PostgreSQL: `await PostgresMemoryBackend.open(dsn, owner=o, clock=c)`."""

    name = BACKEND_NAME
    _ALWAYS = frozenset({Capability.REMEMBER, Capability.RECALL, Capability.FORGET,
                         Capability.CORRECT, Capability.EXPORT, Capability.TEMPORAL})

    def __init__(self, pool: AsyncConnectionPool[Any], owner: Owner, clock: Clock, *,
                 secret: str | None, embedder: Embedder | None,
                 fusion: Fusion, vector_weight: float, paraphrase_vector_weight: float) -> None:
        self._pool: AsyncConnectionPool[Any] | None = pool
        self._owner = owner
        self._clock = clock
        self._secret = secret
        self._embedder = embedder
        self._fusion: Fusion = fusion
        self._vector_weight = vector_weight
        self._paraphrase_vector_weight = paraphrase_vector_weight
        self._embed_lock = asyncio.Lock()
        self._vectors = VectorMark()
        # Project -> (when counted, whether its chunks are few): counted once a minute.
        self._scope_sizes: dict[str, tuple[float, bool]] = {}
        self._new_pool: Callable[[], Awaitable[AsyncConnectionPool[Any]]] | None = None
        self._pool_lock = asyncio.Lock()

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self._ALWAYS | ({Capability.VECTORS} if self._embedder else frozenset())

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

    @property
    def owner(self) -> Owner:
        return self._owner

    @classmethod
    async def open(
        cls, dsn: str, *, owner: Owner, clock: Clock, embedder: Embedder | None = None,
        fusion: Fusion = "adaptive", vector_weight: float = VECTOR_WEIGHT,
        paraphrase_vector_weight: float = PARAPHRASE_VECTOR_WEIGHT,
        connect_timeout: float = 10.0, max_connections: int = 4,
    ) -> PostgresMemoryBackend:
        """Connect, bring the schema up to date, and make the vector index for `embedder`.

        Raises BackendUnavailable when the server cannot be reached, BackendError
        otherwise; neither ever holds the connection string's password.
        """
        writes.fraction("vector_weight", vector_weight)
        writes.fraction("paraphrase_vector_weight", paraphrase_vector_weight)
        if not owner.user or not owner.origin:
            raise ValueError("a Postgres memory backend needs an owner user and an origin")
        try:
            import psycopg
            import psycopg_pool  # noqa: F401 - said here, before any connection, when missing
        except ImportError as exc:
            raise BackendError("the postgres backend needs psycopg: pip install"
                               " 'memoryd[postgres]'", backend=BACKEND_NAME) from exc
        secret = password_of(dsn)
        where = describe(dsn)
        # One direct connection first: its error says why (the pool's only says it timed out).
        try:
            probe = await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, connect_timeout=max(1, math.ceil(connect_timeout)))
        except Exception as exc:
            error = translate(exc, secret)
            raise type(error)(f"cannot connect to {where}: {error.detail}",
                              backend=BACKEND_NAME) from None
        try:
            async with probe:
                await probe.execute("SET TIME ZONE 'UTC'")
                await migrate(probe)
                if embedder is not None:
                    await cls._vector_index(probe, embedder)
        except BackendError:
            raise
        except Exception as exc:
            raise translate(exc, secret) from None

        async def new_pool() -> AsyncConnectionPool[Any]:
            return await _open_pool(dsn, secret, connect_timeout, max_connections)

        pool = await new_pool()
        log.debug("memory_backend_opened", backend=BACKEND_NAME, user=owner.user,
                  origin=owner.origin)
        backend = cls(pool, owner, clock, secret=secret, embedder=embedder, fusion=fusion,
                      vector_weight=vector_weight,
                      paraphrase_vector_weight=paraphrase_vector_weight)
        backend._new_pool = new_pool
        return backend

    @staticmethod
    async def _vector_index(conn: psycopg.AsyncConnection[Any], embedder: Embedder) -> None:
        """One HNSW (cosine) index per embedding size: pgvector indexes a fixed dimension."""
        dims = int(embedder.dimensions)
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS memory_chunks_hnsw_{dims} ON memory_chunks"
            f" USING hnsw ((embedding::vector({dims})) vector_cosine_ops)"
            f" WHERE vector_dims(embedding) = {dims}")

    async def __aenter__(self) -> PostgresMemoryBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing -----------------------------------------------------------

    def _pool_or_raise(self) -> AsyncConnectionPool[Any]:
        if self._pool is None:
            raise BackendError("the memory backend is closed", backend=BACKEND_NAME)
        return self._pool

    def _error(self, exc: Exception) -> BackendError:
        return translate(exc, self._secret)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection; getting one is retried while the server is away.

        Driver errors inside become BackendError (BackendUnavailable when transient).
        """
        pool = self._pool_or_raise()

        async def get() -> psycopg.AsyncConnection[Any]:
            try:
                got: psycopg.AsyncConnection[Any] = await pool.getconn()
            except Exception as exc:
                raise self._error(exc) from None
            return got

        conn: psycopg.AsyncConnection[Any] = await _transient_retries()(get)
        try:
            yield conn
        except (BackendError, ValueError):
            raise  # ours already, or the caller's bad argument (the protocol's ValueError)
        except Exception as exc:
            raise self._error(exc) from None
        finally:
            await pool.putconn(conn)

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._connection() as conn, conn.transaction():
            yield conn

    async def _rows(self, conn: psycopg.AsyncConnection[Any], sql: str,
                    params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        cur = await conn.execute(sql, params)
        return list(await cur.fetchall()) if cur.description else []

    async def _read(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
                    ) -> list[dict[str, Any]]:
        """A read, retried as a whole while the server is away (reads change nothing)."""

        async def once() -> list[dict[str, Any]]:
            async with self._connection() as conn:
                return await self._rows(conn, sql, params)

        return await _transient_retries()(once)

    def _mine(self, alias: str = "m") -> tuple[str, dict[str, Any]]:
        where = f"{alias}.owner_user = %(user)s"
        params: dict[str, Any] = {"user": self._owner.user}
        if self._owner.agents is not None:
            where += f" AND {alias}.owner_agent = ANY(%(agents)s)"
            params["agents"] = list(self._owner.agents)
        return where, params

    def _agent_of(self, memory: Memory) -> str:
        return memory.provenance.source or PERSON

    def _params(self, memory: Memory) -> tuple[Any, ...]:
        p = memory.provenance
        return (
            self._owner.user, self._agent_of(memory), self._owner.origin, memory.id,
            memory.type.value, memory.content, memory.importance, memory.project,
            list(memory.tags), " ".join(memory.tags), p.session_id, p.session_external_id,
            p.source, p.project, p.first_index, p.last_index, list(p.message_uuids),
            _utc(p.started_at), _utc(p.ended_at), _utc(memory.created_at),
            _utc(memory.updated_at), memory.supersedes, memory.superseded_by, memory.reason,
            _utc(memory.deleted_at), memory.access_count, _utc(memory.last_accessed_at),
            memory.private_to, self._owner.user, memory.id,
        )

    async def _insert_once(self, conn: psycopg.AsyncConnection[Any], memory: Memory) -> bool:
        rows = await self._rows(conn, _INSERT_ONCE, self._params(memory))
        if not rows:
            return False
        await self._insert_chunks(conn, rows[0]["seq"], memory)
        return True

    async def _insert_chunks(self, conn: psycopg.AsyncConnection[Any], seq: int,
                             memory: Memory) -> None:
        chunks = chunk_memory(memory.content, memory.type, memory.provenance)
        async with conn.cursor() as cur:
            await cur.executemany(_INSERT_CHUNK, [
                (seq, c.ordinal, c.start, c.end, c.text, c.first_index, c.last_index,
                 list(c.message_uuids), self._owner.user, memory.project) for c in chunks])

    @staticmethod
    def _provenance(row: Mapping[str, Any]) -> Provenance:
        return Provenance(
            session_id=row["session_id"], session_external_id=row["session_external_id"],
            source=row["source"], project=row["source_project"],
            first_index=row["first_index"], last_index=row["last_index"],
            message_uuids=tuple(row["message_uuids"] or ()),
            started_at=row["started_at"], ended_at=row["ended_at"])

    @classmethod
    def _memory(cls, row: Mapping[str, Any]) -> Memory:
        return Memory(
            id=row["id"], content=row["content"], type=MemoryType(row["type"]),
            importance=float(row["importance"]), project=row["project"],
            tags=tuple(row["tags"] or ()), provenance=cls._provenance(row),
            created_at=row["created_at"], updated_at=row["updated_at"],
            superseded_by=row["superseded_by"], supersedes=row["supersedes"],
            reason=row["reason"], deleted_at=row["deleted_at"],
            access_count=int(row["access_count"]), last_accessed_at=row["last_accessed_at"],
            private_to=row["private_to"])

    # -- protocol -------------------------------------------------------------

    async def is_available(self) -> bool:
        """Whether the server answers now. After an outage the pool only tries to reconnect
        with a growing back-off (1, 2, 4 ... s): when it has no connection to give but the
        server answers a direct connection, the pool is replaced, so the chain's outbox
        drains as soon as the server is back rather than minutes later."""
        pool = self._pool
        if pool is None:
            return False
        try:
            async with pool.connection(timeout=2.0) as conn:
                await conn.execute("SELECT 1")
        except Exception:
            return await self._replace_pool(pool)
        return True

    async def _replace_pool(self, stale: AsyncConnectionPool[Any]) -> bool:
        if self._new_pool is None:
            return False
        async with self._pool_lock:
            if self._pool is not stale:
                return self._pool is not None
            try:
                fresh = await self._new_pool()
            except BackendError:
                return False
            self._pool = fresh
        await stale.close(timeout=1.0)
        log.info("postgres_pool_replaced", backend=BACKEND_NAME)
        return True

    async def remember(
        self, content: str, *, type: MemoryType = MemoryType.FACT,
        importance: float | None = None, project: str | None = None,
        tags: Iterable[str] = (), provenance: Provenance | None = None,
        private_to: str | None = None,
    ) -> Memory:
        memory = writes.new_memory(content, type=type, importance=importance, project=project,
                                   tags=tags, provenance=provenance, now=self._clock.now(),
                                   private_to=private_to)
        async with self._write() as conn:
            await self._insert_once(conn, memory)
        log.info("memory_remembered", backend=BACKEND_NAME, memory_id=memory.id,
                 type=memory.type.value, project=memory.project)
        return memory

    def _filters(self, *, now: datetime, project: str | None, since: datetime | None,
                 until: datetime | None, types: Iterable[MemoryType] | None,
                 all_projects: bool, agent: str | None = None) -> Filters | None:
        rules = policy.recall_filters(
            lambda name: f"%({name})s", moment=_utc, project=project, since=since,
            until=until, types=types, all_projects=all_projects, agent=agent)
        if rules is None:
            return None
        mine, params = self._mine()
        where = [mine, *rules.where]
        params.update(rules.params, now=now, decaying=list(_DECAYING))
        tier = rules.tier
        chunk_where = ["c.owner_user = %(user)s"]
        if rules.in_project is not None:
            chunk_where.append("(c.project = %(project)s OR c.project IS NULL)")
        return Filters(" AND ".join(where), params, tier, " AND ".join(chunk_where),
                        scoped=rules.in_project is not None)

    async def recall(
        self, query: str, *, project: str | None = None, limit: int = 10,
        since: datetime | None = None, until: datetime | None = None,
        types: Iterable[MemoryType] | None = None, all_projects: bool = False,
        order: RecallOrder = "score", agent: str | None = None,
    ) -> list[RecallResult]:
        filters = self._filters(now=self._clock.now(), project=project, since=since,
                                until=until, types=types, all_projects=all_projects,
                                agent=agent)
        if filters is None or limit <= 0:
            return []
        words = terms(query)
        if order == "score" and words:
            results = await self._hybrid(query, words, filters, limit)
        else:
            results = await self._listed(filters, limit, order)
        log.debug("memory_recalled", backend=BACKEND_NAME, results=len(results),
                  project=project, order=order)
        return results

    async def _listed(self, filters: Filters, limit: int, order: RecallOrder
                      ) -> list[RecallResult]:
        """Without words: by weight (tier first), oldest first, or newest first."""
        order_by = {
            "score": f"tier, {_WEIGHT} DESC, m.id",
            "time": "COALESCE(m.started_at, m.created_at), m.created_at, m.id",
            "recent": "COALESCE(m.started_at, m.created_at) DESC, m.created_at DESC, m.id",
        }[order]
        rows = await self._read(
            f"SELECT m.*, {filters.tier} AS tier, {_WEIGHT} AS weight FROM memories m"
            f" WHERE {filters.where} ORDER BY {order_by} LIMIT %(limit)s",
            {**filters.params, "limit": limit})
        return [self._result(row, float(row["weight"])) for row in rows]

    def _result(self, row: Mapping[str, Any], score: float, *, relevance: float = 1.0,
                chunks: Sequence[Mapping[str, Any]] = (),
                similarity: float | None = None, session_matches: int = 1) -> RecallResult:
        provenance = self._provenance(row)
        excerpt = None
        if chunks:
            ordered = chunks  # in the conversation's order (`recall.hybrid.Found`)
            text = "\n…\n".join(c["content"] for c in ordered)
            if text != row["content"]:
                excerpt = text
                firsts = [c["first_index"] for c in ordered if c["first_index"] is not None]
                lasts = [c["last_index"] for c in ordered if c["last_index"] is not None]
                uuids: dict[str, None] = {}
                for c in ordered:
                    uuids.update(dict.fromkeys(c["message_uuids"] or ()))
                provenance = replace(provenance, first_index=min(firsts) if firsts else None,
                                     last_index=max(lasts) if lasts else None,
                                     message_uuids=tuple(uuids))
        return RecallResult(
            memory_id=row["id"], type=MemoryType(row["type"]), content=row["content"],
            score=score, provenance=provenance, created_at=row["created_at"],
            project=row["project"], importance=float(row["importance"]),
            tags=tuple(row["tags"] or ()), excerpt=excerpt, relevance=relevance,
            private_to=row["private_to"], similarity=similarity,
            session_matches=session_matches)

    async def _hybrid(self, query: str, words: list[str], filters: Filters, limit: int
                      ) -> list[RecallResult]:
        query_vector = None
        if self._embedder is not None:
            query_vector = asyncio.create_task(self._query_vector(self._embedder, query))
        try:
            found = await hybrid.rank(
                PostgresChannels(self._read, filters, words, query_vector, self._embedder,
                                 self._few_chunks),
                query, limit=limit, fusion=self._fusion, vector_weight=self._vector_weight,
                paraphrase_vector_weight=self._paraphrase_vector_weight)
        finally:
            if query_vector is not None and not query_vector.done():
                query_vector.cancel()
        return [self._result(f.row, f.score, relevance=f.relevance, chunks=f.chunks,
                             session_matches=f.session_matches, similarity=f.similarity)
                for f in found]

    async def _few_chunks(self, filters: Filters, params: Mapping[str, Any]) -> bool:
        """Whether the scope holds at most EXACT_SCAN_MAX chunks (counting stops there;
        a project's answer is reused for a minute)."""
        project = str(params.get("project"))
        now = self._clock.monotonic()
        known = self._scope_sizes.get(project)
        if known is not None and now - known[0] < SCOPE_SIZE_TTL:
            return known[1]
        rows = await self._read(
            "SELECT COUNT(*) AS n FROM (SELECT 1 FROM memory_chunks c"
            f" WHERE {filters.chunk_where} LIMIT {EXACT_SCAN_MAX + 1}) AS scope_rows", params)
        few = int(rows[0]["n"]) <= EXACT_SCAN_MAX
        if len(self._scope_sizes) > 10_000:
            self._scope_sizes.clear()
        self._scope_sizes[project] = (now, few)
        return few

    async def _query_vector(self, embedder: Embedder, query: str) -> list[float] | None:
        try:
            vector = await asyncio.to_thread(embedder.embed_query, query)
        except EmbeddingLoading:
            return None  # not a failure: the model loads behind this recall
        except BackendError as exc:
            log.warning("memory_recall_keywords_only", backend=BACKEND_NAME, error=str(exc))
            return None
        return [float(v) for v in vector]

    async def pending_embeddings(self) -> int:
        if self._embedder is None:
            return 0
        mine, params = self._mine()
        rows = await self._read(
            "SELECT COUNT(*) AS n FROM memory_chunks c JOIN memories m ON m.seq = c.memory_seq"
            f" WHERE {mine} AND (c.model IS DISTINCT FROM %(model)s)"
            " AND m.deleted_at IS NULL AND m.superseded_by IS NULL",
            {**params, "model": self._embedder.name})
        return int(rows[0]["n"])

    async def embed_pending(self, limit: int = 256) -> int:
        """Embed up to `limit` of this owner's chunks that have no vector from the model yet."""
        embedder = self._embedder
        if embedder is None or limit <= 0:
            return 0
        async with self._embed_lock:
            mine, params = self._mine()
            now = self._clock.monotonic()
            after, full = self._vectors.start(now)
            # The newest seq first: a chunk added after it is read has a higher one.
            newest = (await self._read("SELECT COALESCE(MAX(seq), 0) AS seq"
                                       " FROM memory_chunks", {}))[0]["seq"]
            rows = await self._read(
                "SELECT c.seq, c.content FROM memory_chunks c JOIN memories m"
                f" ON m.seq = c.memory_seq WHERE {mine} AND (c.model IS DISTINCT FROM %(model)s)"
                " AND m.deleted_at IS NULL AND m.superseded_by IS NULL"
                " AND c.seq > %(after)s ORDER BY c.seq LIMIT %(limit)s",
                {**params, "model": embedder.name, "limit": limit, "after": after})
            # Up to here every live chunk has a vector once these are stored.
            through = int(newest) if len(rows) < limit else int(rows[-1]["seq"])
            if not rows:
                self._vectors.caught_up(through, full, now)
                return 0
            vectors = await asyncio.to_thread(embedder.embed, [r["content"] for r in rows])
            async with self._write() as conn, conn.cursor() as cur:
                await cur.executemany(
                    "UPDATE memory_chunks SET model = %s, embedding = %s::vector WHERE seq = %s",
                    [(embedder.name, vector_literal(vectors[i]), r["seq"])
                     for i, r in enumerate(rows)])
            self._vectors.caught_up(through, full, now)
        log.debug("memory_chunks_embedded", backend=BACKEND_NAME, count=len(rows),
                  model=embedder.name)
        return len(rows)

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return
        try:
            async with self._write() as conn:
                await conn.execute(
                    "UPDATE memories SET access_count = access_count + 1,"
                    " last_accessed_at = %s WHERE owner_user = %s AND id = ANY(%s)",
                    (self._clock.now(), self._owner.user, ids))
        except BackendError as exc:
            log.warning("memory_use_not_recorded", backend=BACKEND_NAME, error=str(exc))

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        async with self._write() as conn:
            chain = await self._rows(conn, _CHAIN_FOR_UPDATE,
                                     {"user": self._owner.user, "id": memory_id})
            changed = await self._delete(conn, chain, hard=hard)
        log.info("memory_forgotten", backend=BACKEND_NAME, memory_id=memory_id, hard=hard,
                 versions=changed)
        return changed > 0

    async def forget_where(
        self, *, session_id: int | None = None, session_external_id: str | None = None,
        project: str | None = None, all: bool = False, hard: bool = False,
        as_of: datetime | None = None, memory_ids: Sequence[str] | None = None,
    ) -> int:
        scope = ForgetScope(session_id, session_external_id, project, all, memory_ids)
        scope.check()
        filters: list[str] = []
        params: dict[str, Any] = {"user": self._owner.user, "origin": self._owner.origin}
        if memory_ids is not None:
            filters.append("id = ANY(%(ids)s)")
            params["ids"] = list(memory_ids)
        if session_id is not None:
            filters.append("session_id = %(session_id)s AND origin = %(origin)s")
            params["session_id"] = session_id
        if session_external_id is not None:
            filters.append("session_external_id = %(external)s")
            params["external"] = session_external_id
        if project is not None:
            filters.append("project = %(project)s")
            params["project"] = project
        if as_of is not None:
            filters.append("created_at <= %(as_of)s")
            params["as_of"] = _utc(as_of)
        where = " AND ".join(["owner_user = %(user)s", *filters])
        async with self._write() as conn:
            rows = await self._rows(conn, f"SELECT * FROM memories WHERE {where}", params)
            count = await self._delete(conn, rows, hard=hard)
            scopes = scope.lasting(
                (r["session_external_id"] for r in rows),
                session_id_value=None if session_id is None
                else f"{self._owner.origin}:{session_id}")
            if scopes:
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO forgotten_scopes (owner_user, kind, value, forgotten_at)"
                        " VALUES (%s, %s, %s, %s) ON CONFLICT (owner_user, kind, value)"
                        " DO UPDATE SET forgotten_at ="
                        " GREATEST(forgotten_scopes.forgotten_at, excluded.forgotten_at)",
                        [(self._owner.user, k, v, as_of or self._clock.now())
                         for k, v in sorted(scopes)])
        log.info("memories_forgotten", backend=BACKEND_NAME, count=count, hard=hard,
                 session_id=session_id, session_external_id=session_external_id,
                 project=project, all=all)
        return count

    async def _forgotten(self, conn: psycopg.AsyncConnection[Any], memory: Memory) -> bool:
        prov = memory.provenance
        rows = await self._rows(
            conn,
            "SELECT 1 FROM forgotten_scopes WHERE owner_user = %(user)s AND ("
            "(kind = 'session' AND value = %(external)s)"
            " OR (kind = 'session_id' AND value = %(session)s)"
            " OR (kind = 'project' AND value = %(project)s AND forgotten_at >= %(began)s))"
            " LIMIT 1",
            {"user": self._owner.user, "external": prov.session_external_id,
             "session": (None if prov.session_id is None
                         else f"{self._owner.origin}:{prov.session_id}"),
             "project": memory.project, "began": began(memory)})
        if rows:
            log.info("memory_not_saved_forgotten", backend=BACKEND_NAME, memory_id=memory.id,
                     session_external_id=prov.session_external_id, project=memory.project)
        return bool(rows)

    async def _delete(self, conn: psycopg.AsyncConnection[Any],
                      rows: Sequence[Mapping[str, Any]], *, hard: bool) -> int:
        targets = list(rows) if hard else [r for r in rows if r["deleted_at"] is None]
        if not targets:
            return 0
        now = self._clock.now()
        mode = DeletionMode.HARD if hard else DeletionMode.SOFT
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO memory_deletions (owner_user, origin, memory_id, mode, type,"
                " project, session_id, session_external_id, deleted_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [(self._owner.user, r["origin"], r["id"], mode.value, r["type"], r["project"],
                  r["session_id"], r["session_external_id"], now) for r in targets])
        ids = [r["id"] for r in targets]
        if hard:
            await conn.execute("DELETE FROM memories WHERE owner_user = %s AND id = ANY(%s)",
                               (self._owner.user, ids))
        else:
            await conn.execute(
                "UPDATE memories SET deleted_at = %s, updated_at = %s"
                " WHERE owner_user = %s AND id = ANY(%s)", (now, now, self._owner.user, ids))
        return len(targets)

    async def correct(
        self, memory_id: str, new_content: str, *, reason: str | None = None,
        provenance: Provenance | None = None,
    ) -> Memory:
        now = self._clock.now()
        async with self._write() as conn:
            rows = await self._rows(
                conn, "SELECT * FROM memories WHERE owner_user = %s AND id = %s FOR UPDATE",
                (self._owner.user, memory_id))
            new = writes.correction(self._memory(rows[0]) if rows else None, memory_id,
                                    new_content, reason=reason, provenance=provenance, now=now,
                                    backend=BACKEND_NAME)
            await self._insert_once(conn, new)
            await conn.execute(
                "UPDATE memories SET superseded_by = %s, updated_at = %s"
                " WHERE owner_user = %s AND id = %s", (new.id, now, self._owner.user, memory_id))
        log.info("memory_corrected", backend=BACKEND_NAME, memory_id=memory_id,
                 corrected_by=new.id)
        return new

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        """Stored once by id; a live shorter tail of the same messages is superseded (see the
        embedded backend's docstring: every message ends in exactly one live segment)."""
        now = self._clock.now()
        memory = writes.segment_memory(segment, now)
        async with self._write() as conn:
            created = (not await self._forgotten(conn, memory)
                       and await self._insert_once(conn, memory))
            if created:
                tails = await self._rows(
                    conn,
                    "SELECT id FROM memories WHERE owner_user = %(user)s AND origin = %(origin)s"
                    " AND type = 'conversation' AND id <> %(id)s AND superseded_by IS NULL"
                    " AND deleted_at IS NULL AND session_id IS NOT DISTINCT FROM %(session)s"
                    " AND session_external_id IS NOT DISTINCT FROM %(external)s"
                    " AND source IS NOT DISTINCT FROM %(source)s AND first_index = %(first)s"
                    " AND last_index < %(last)s ORDER BY last_index",
                    {"user": self._owner.user, "origin": self._owner.origin, "id": segment.id,
                     "session": segment.session_id, "external": segment.session_external_id,
                     "source": segment.source, "first": segment.first_index,
                     "last": segment.last_index})
                if tails:
                    await conn.execute(
                        "UPDATE memories SET superseded_by = %s, updated_at = %s,"
                        " reason = 'extended by a later save of the same messages'"
                        " WHERE owner_user = %s AND id = ANY(%s)",
                        (segment.id, now, self._owner.user, [t["id"] for t in tails]))
                    await conn.execute(
                        "UPDATE memories SET supersedes = %s WHERE owner_user = %s AND id = %s",
                        (tails[-1]["id"], self._owner.user, segment.id))
        log.debug("memory_saved", backend=BACKEND_NAME, memory_id=memory.id,
                  type=memory.type.value, created=created)
        return SaveResult(id=memory.id, created=created)

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        return await self._save_auto(writes.summary_memory(summary, self._clock.now()))

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        return await self._save_auto(writes.requested_memory(requested, self._clock.now()))

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        return await self._save_auto(writes.distilled_memory(distilled, self._clock.now()))

    async def _save_auto(self, memory: Memory) -> SaveResult:
        async with self._write() as conn:
            created = (not await self._forgotten(conn, memory)
                       and await self._insert_once(conn, memory))
            if created and memory.type is MemoryType.SESSION_DIGEST:
                await self._supersede_digests(conn, memory)
            if created and memory.type is MemoryType.OBSERVATION and memory.supersedes:
                await self._supersede_observation(conn, memory)
        log.debug("memory_saved", backend=BACKEND_NAME, memory_id=memory.id,
                  type=memory.type.value, created=created)
        return SaveResult(id=memory.id, created=created)

    async def _supersede_observation(self, conn: psycopg.AsyncConnection[Any],
                                     new: Memory) -> None:
        """See the embedded backend's `_supersede_observation`."""
        cursor = await conn.execute(
            "UPDATE memories SET superseded_by = %s, updated_at = %s WHERE owner_user = %s"
            " AND id = %s AND type = 'observation' AND superseded_by IS NULL"
            " AND deleted_at IS NULL",
            (new.id, self._clock.now(), self._owner.user, new.supersedes))
        if cursor.rowcount == 0:
            await conn.execute("UPDATE memories SET supersedes = NULL WHERE owner_user = %s"
                               " AND id = %s", (self._owner.user, new.id))

    async def _supersede_digests(self, conn: psycopg.AsyncConnection[Any], new: Memory) -> None:
        """One live digest a session (see the embedded backend's `_supersede_digests`)."""
        p = new.provenance
        now = self._clock.now()
        live = await self._rows(conn, _LIVE_DIGESTS, {
            "user": self._owner.user, "origin": self._owner.origin, "id": new.id,
            "session_id": p.session_id, "external": p.session_external_id,
            "source": p.source})
        newer = [r for r in live if (r["last_index"] or -1) > (p.last_index or -1)]
        if newer:
            await conn.execute(
                "UPDATE memories SET superseded_by = %s, updated_at = %s"
                " WHERE owner_user = %s AND id = %s",
                (newer[-1]["id"], now, self._owner.user, new.id))
            return
        older = [r["id"] for r in live]
        if not older:
            return
        await conn.execute(
            "UPDATE memories SET superseded_by = %s, updated_at = %s"
            " WHERE owner_user = %s AND id = ANY(%s)", (new.id, now, self._owner.user, older))
        await conn.execute("UPDATE memories SET supersedes = %s WHERE owner_user = %s AND id = %s",
                           (older[-1], self._owner.user, new.id))

    async def get(self, memory_id: str) -> Memory | None:
        rows = await self._read("SELECT * FROM memories WHERE owner_user = %s AND id = %s",
                                (self._owner.user, memory_id))
        return self._memory(rows[0]) if rows else None

    async def history(self, memory_id: str) -> list[Memory]:
        rows = await self._read(_CHAIN, {"user": self._owner.user, "id": memory_id})
        return chain_order([self._memory(r) for r in rows])

    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        sql = "SELECT * FROM memory_deletions WHERE owner_user = %(user)s"
        params: dict[str, Any] = {"user": self._owner.user}
        if memory_id is not None:
            sql += " AND memory_id = %(id)s"
            params["id"] = memory_id
        rows = await self._read(sql + " ORDER BY seq", params)
        return [DeletionRecord(
            memory_id=r["memory_id"], mode=DeletionMode(r["mode"]), type=MemoryType(r["type"]),
            project=r["project"], session_id=r["session_id"],
            session_external_id=r["session_external_id"], deleted_at=r["deleted_at"])
            for r in rows]

    async def export(self, project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        after = ""
        mine, params = self._mine()
        while True:
            sql = (f"SELECT * FROM memories m WHERE {mine} AND m.deleted_at IS NULL"
                   " AND m.id > %(after)s")
            page = {**params, "after": after, "limit": EXPORT_PAGE_SIZE}
            if project is not None:
                sql += " AND m.project = %(project)s"
                page["project"] = project
            rows = await self._read(sql + " ORDER BY m.id COLLATE \"C\" LIMIT %(limit)s", page)
            for row in rows:
                yield memory_to_record(self._memory(row))
            if len(rows) < EXPORT_PAGE_SIZE:
                return
            after = rows[-1]["id"]

    async def _insert_many(self, conn: psycopg.AsyncConnection[Any],
                           memories: Sequence[Memory]) -> int:
        """`_insert_once` for many, in two round trips (rows, then their chunks)."""
        if not memories:
            return 0
        seqs: list[tuple[int, Memory]] = []
        async with conn.cursor() as cur:
            await cur.executemany(_INSERT_ONCE, [self._params(m) for m in memories],
                                  returning=True)
            for memory in memories:
                row = await cur.fetchone()
                if row is not None:
                    seqs.append((row["seq"], memory))
                if not cur.nextset():
                    break
            await cur.executemany(_INSERT_CHUNK, [
                (seq, c.ordinal, c.start, c.end, c.text, c.first_index, c.last_index,
                 list(c.message_uuids), self._owner.user, m.project) for seq, m in seqs
                for c in chunk_memory(m.content, m.type, m.provenance)])
        return len(seqs)

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        created = 0
        number = 0
        batch: list[Memory] = []
        async with self._write() as conn:
            for number, record in enumerate(records, 1):
                try:
                    memory = record_to_memory(record)
                except ValueError as exc:
                    raise BackendError(f"import record {number}: {exc}",
                                       backend=BACKEND_NAME) from exc
                memory = writes.imported(memory)
                if await self._forgotten(conn, memory):
                    continue
                batch.append(memory)
                if len(batch) >= IMPORT_BATCH:
                    created += await self._insert_many(conn, batch)
                    batch = []
            created += await self._insert_many(conn, batch)
        if created >= ANALYZE_AFTER:
            # Fresh statistics now, not when autovacuum gets to it: with stale ones the
            # planner ranks every chunk holding a word before filtering by project
            # (100,000 memories: 277 ms a recall until the table is analyzed, 20 ms after).
            async with self._connection() as conn:
                await conn.execute("ANALYZE memories, memory_chunks")
        log.info("memories_imported", backend=BACKEND_NAME, records=number, created=created)
        return created

    async def import_deletions(self, records: Iterable[DeletionRecord]) -> int:
        """Copy deletion records from another store; a hard one keeps its id out for good."""
        added = 0
        async with self._write() as conn:
            for r in records:
                rows = await self._rows(
                    conn,
                    "INSERT INTO memory_deletions (owner_user, origin, memory_id, mode, type,"
                    " project, session_id, session_external_id, deleted_at)"
                    " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s WHERE NOT EXISTS (SELECT 1 FROM"
                    " memory_deletions WHERE owner_user = %s AND memory_id = %s AND mode = %s"
                    " AND deleted_at = %s) RETURNING seq",
                    (self._owner.user, self._owner.origin, r.memory_id, r.mode.value,
                     r.type.value, r.project, r.session_id, r.session_external_id,
                     r.deleted_at, self._owner.user, r.memory_id, r.mode.value, r.deleted_at))
                added += len(rows)
        return added

    async def session_memories(self, session_id: int) -> list[Memory]:
        rows = await self._read(
            "SELECT * FROM memories WHERE owner_user = %(user)s AND origin = %(origin)s"
            " AND session_id = %(sid)s ORDER BY first_index, created_at, id",
            {"user": self._owner.user, "origin": self._owner.origin, "sid": session_id})
        return [self._memory(r) for r in rows]

    async def daily_counts(self, since: datetime) -> list[tuple[str, str | None, int]]:
        rows = await self._read(
            "SELECT to_char(COALESCE(started_at, created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
            " AS day, project, COUNT(*) AS n FROM memories WHERE owner_user = %(user)s"
            " AND deleted_at IS NULL AND superseded_by IS NULL"
            " AND COALESCE(started_at, created_at) >= %(since)s"
            " GROUP BY day, project ORDER BY day, project",
            {"user": self._owner.user, "since": _utc(since)})
        return [(r["day"], r["project"], int(r["n"])) for r in rows]

    async def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        rows = await self._read(
            "SELECT id FROM memories WHERE owner_user = %s AND id >= %s AND id < %s"
            " ORDER BY id LIMIT %s", (self._owner.user, prefix, prefix + "g", limit))
        return [str(r["id"]) for r in rows]

    async def rewrite_content(self, memory_id: str, content: str) -> bool:
        async with self._write() as conn:
            rows = await self._rows(
                conn, "SELECT * FROM memories WHERE owner_user = %s AND id = %s"
                " AND deleted_at IS NULL AND superseded_by IS NULL FOR UPDATE",
                (self._owner.user, memory_id))
            if not rows or rows[0]["content"] == content:
                return False
            seq = rows[0]["seq"]
            memory = replace(self._memory(rows[0]), content=content)
            await conn.execute("DELETE FROM memory_chunks WHERE memory_seq = %s", (seq,))
            await conn.execute("UPDATE memories SET content = %s, updated_at = %s WHERE seq = %s",
                               (content, self._clock.now(), seq))
            await self._insert_chunks(conn, seq, memory)
        return True

    async def add_evidence(self, memory_id: str, message_uuids: Sequence[str]) -> bool:
        async with self._write() as conn:
            rows = await self._rows(
                conn, "SELECT message_uuids FROM memories WHERE owner_user = %s AND id = %s"
                " AND deleted_at IS NULL AND superseded_by IS NULL FOR UPDATE",
                (self._owner.user, memory_id))
            if not rows:
                return False
            have = list(rows[0]["message_uuids"] or ())
            grown = writes.grow_evidence(have, message_uuids)
            if grown == have:
                return False
            await conn.execute(
                "UPDATE memories SET message_uuids = %s, updated_at = %s"
                " WHERE owner_user = %s AND id = %s",
                (grown, self._clock.now(), self._owner.user, memory_id))
        return True

    async def relabel_project(self, old: str, new: str) -> Relabelled:
        """Move this user's memories of project `old` to `new` (a renamed folder)."""
        if not old or not new or old == new:
            raise ValueError("give two different projects")
        async with self._write() as conn:
            cur = await conn.execute(
                "UPDATE memories SET project = %(new)s WHERE owner_user = %(user)s"
                " AND project = %(old)s", {"new": new, "old": old, "user": self._owner.user})
            moved = cur.rowcount
            await conn.execute(
                "UPDATE memory_chunks SET project = %(new)s WHERE owner_user = %(user)s"
                " AND project = %(old)s", {"new": new, "old": old, "user": self._owner.user})
        self._scope_sizes.clear()
        log.info("memory_project_relabelled", backend=BACKEND_NAME, moved=moved)
        return Relabelled(moved)

    async def forgotten_scopes(self) -> list[ForgottenScope]:
        """This user's forgotten sessions and projects. memoryd's own session numbers are
        this machine's (stored as `origin:number`): other machines' are not given."""
        rows = await self._read(
            "SELECT kind, value, forgotten_at FROM forgotten_scopes WHERE owner_user = %s"
            " ORDER BY kind, value", (self._owner.user,))
        mine = f"{self._owner.origin}:"
        scopes = []
        for r in rows:
            value = r["value"]
            if r["kind"] == "session_id":
                if not value.startswith(mine):
                    continue
                value = value[len(mine):]
            scopes.append(ForgottenScope(r["kind"], value, r["forgotten_at"]))
        return scopes

    async def import_forgotten_scopes(self, scopes: Iterable[ForgottenScope]) -> int:
        """Keep scopes forgotten in another store of this machine forgotten here too."""
        added = 0
        async with self._write() as conn:
            for scope in scopes:
                value = (f"{self._owner.origin}:{scope.value}" if scope.kind == "session_id"
                         else scope.value)
                rows = await self._rows(
                    conn,
                    "INSERT INTO forgotten_scopes (owner_user, kind, value, forgotten_at)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (owner_user, kind, value)"
                    " DO UPDATE SET forgotten_at = excluded.forgotten_at"
                    " WHERE excluded.forgotten_at > forgotten_scopes.forgotten_at RETURNING 1",
                    (self._owner.user, scope.kind, value, scope.at))
                added += len(rows)
        return added

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def describe_error(self, message: str) -> str:
        """`message` without this backend's password (for callers that format their own)."""
        return sanitize(message, self._secret)


async def _open_pool(dsn: str, secret: str | None, connect_timeout: float,
                     max_connections: int) -> AsyncConnectionPool[Any]:
    """A connection pool, open, with a connection ready (BackendError when there is none)."""
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("SET TIME ZONE 'UTC'")
        # HNSW stops at ef_search candidates, before the owner and project filters: as many
        # as recall asks for, and iterative scans (pgvector 0.8) go on until enough pass the
        # filters. The scan's order is then approximate; recall sorts.
        await conn.execute(f"SET hnsw.ef_search = {hybrid.CANDIDATES}")
        await conn.execute("SET hnsw.iterative_scan = relaxed_order")

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=max_connections, open=False, timeout=connect_timeout,
        kwargs={"autocommit": True, "row_factory": dict_row,
                "connect_timeout": max(1, math.ceil(connect_timeout))},
        configure=configure, name="memoryd-postgres",
        # A server that restarted leaves every pooled connection dead: each is checked (one
        # round trip) when taken, so a dead one is replaced instead of failing a call.
        check=AsyncConnectionPool.check_connection)
    try:
        await pool.open(wait=True, timeout=connect_timeout)
    except BaseException as exc:
        await pool.close()
        if isinstance(exc, Exception):
            raise translate(exc, secret) from None
        raise
    return pool


def _transient_retries() -> AsyncRetrying:
    """A second try after a short pause, for transient failures only (BackendUnavailable);
    then the error goes to the caller (the chain falls back)."""
    return AsyncRetrying(stop=stop_after_attempt(ATTEMPTS), wait=wait_fixed(0.2),
                         retry=retry_if_exception_type(BackendUnavailable), reraise=True)


def origin_id(text: str) -> str:
    """A short stable id for a memoryd instance (from its state directory's path and host)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
