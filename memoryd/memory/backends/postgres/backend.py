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
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError
from memoryd.memory import writes
from memoryd.memory.backends.postgres import edits, forgetting
from memoryd.memory.backends.postgres.connection import Connections, fetch_all, open_pool
from memoryd.memory.backends.postgres.hybrid import Filters, PostgresChannels
from memoryd.memory.backends.postgres.owner import Owner, mine
from memoryd.memory.backends.postgres.recall import filters_for, listed
from memoryd.memory.backends.postgres.rows import (
    CHAIN,
    CHAIN_FOR_UPDATE,
    insert_many,
    insert_once,
    recall_result,
    row_memory,
    utc,
)
from memoryd.memory.backends.postgres.schema import (
    BACKEND_NAME,
    describe,
    migrate,
    password_of,
    translate,
)
from memoryd.memory.backends.postgres.vectors import ChunkVectors, query_vector, vector_index
from memoryd.memory.export_format import memory_to_record, record_to_memory
from memoryd.memory.models import (
    ConversationSegment,
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
from memoryd.memory.policy import ForgetScope
from memoryd.memory.protocol import Capability, RecallOrder, Relabelled
from memoryd.memory.recall import hybrid
from memoryd.memory.recall.fusion import PARAPHRASE_VECTOR_WEIGHT, VECTOR_WEIGHT, Fusion
from memoryd.memory.recall.words import terms

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from memoryd.memory.embeddings.interface import Embedder

log = structlog.get_logger("memoryd.memory.postgres")

EXPORT_PAGE_SIZE = 500
IMPORT_BATCH = 500
ANALYZE_AFTER = 1000  # an import this large refreshes the planner's statistics


class PostgresMemoryBackend:
    """Memory in PostgreSQL: `await PostgresMemoryBackend.open(dsn, owner=o, clock=c)`."""

    name = BACKEND_NAME
    _ALWAYS = frozenset({Capability.REMEMBER, Capability.RECALL, Capability.FORGET,
                         Capability.CORRECT, Capability.EXPORT, Capability.TEMPORAL})

    def __init__(self, db: Connections, owner: Owner, clock: Clock, *,
                 embedder: Embedder | None,
                 fusion: Fusion, vector_weight: float, paraphrase_vector_weight: float) -> None:
        self._db = db
        self._owner = owner
        self._clock = clock
        self._embedder = embedder
        self._fusion: Fusion = fusion
        self._vector_weight = vector_weight
        self._paraphrase_vector_weight = paraphrase_vector_weight
        self._chunk_vectors = ChunkVectors(embedder, owner, clock, db)

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
                    await vector_index(probe, embedder)
        except BackendError:
            raise
        except Exception as exc:
            raise translate(exc, secret) from None

        async def new_pool() -> AsyncConnectionPool[Any]:
            return await open_pool(dsn, secret, connect_timeout, max_connections)

        pool = await new_pool()
        log.debug("memory_backend_opened", backend=BACKEND_NAME, user=owner.user,
                  origin=owner.origin)
        return cls(Connections(pool, secret, new_pool), owner, clock, embedder=embedder,
                   fusion=fusion, vector_weight=vector_weight,
                   paraphrase_vector_weight=paraphrase_vector_weight)

    async def __aenter__(self) -> PostgresMemoryBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- protocol -------------------------------------------------------------

    async def is_available(self) -> bool:
        """Whether the server answers now (`Connections.is_available`: a pool that lost
        its connections in an outage is replaced once the server is back)."""
        return await self._db.is_available()

    async def remember(
        self, content: str, *, type: MemoryType = MemoryType.FACT,
        importance: float | None = None, project: str | None = None,
        tags: Iterable[str] = (), provenance: Provenance | None = None,
        private_to: str | None = None,
    ) -> Memory:
        memory = writes.new_memory(content, type=type, importance=importance, project=project,
                                   tags=tags, provenance=provenance, now=self._clock.now(),
                                   private_to=private_to)
        async with self._db.write() as conn:
            await insert_once(conn, self._owner, memory)
        log.info("memory_remembered", backend=BACKEND_NAME, memory_id=memory.id,
                 type=memory.type.value, project=memory.project)
        return memory

    async def recall(
        self, query: str, *, project: str | None = None, limit: int = 10,
        since: datetime | None = None, until: datetime | None = None,
        types: Iterable[MemoryType] | None = None, all_projects: bool = False,
        order: RecallOrder = "score", agent: str | None = None,
    ) -> list[RecallResult]:
        filters = filters_for(self._owner, now=self._clock.now(), project=project,
                              since=since, until=until, types=types,
                              all_projects=all_projects, agent=agent)
        if filters is None or limit <= 0:
            return []
        words = terms(query)
        if order == "score" and words:
            results = await self._hybrid(query, words, filters, limit)
        else:
            results = await listed(self._db.read, filters, limit, order)
        log.debug("memory_recalled", backend=BACKEND_NAME, results=len(results),
                  project=project, order=order)
        return results

    async def _hybrid(self, query: str, words: list[str], filters: Filters, limit: int
                      ) -> list[RecallResult]:
        vector = None
        if self._embedder is not None:
            vector = asyncio.create_task(query_vector(self._embedder, query))
        try:
            found = await hybrid.rank(
                PostgresChannels(self._db.read, filters, words, vector, self._embedder,
                                 self._chunk_vectors.few_chunks),
                query, limit=limit, fusion=self._fusion, vector_weight=self._vector_weight,
                paraphrase_vector_weight=self._paraphrase_vector_weight)
        finally:
            if vector is not None and not vector.done():
                vector.cancel()
        return [recall_result(f.row, f.score, relevance=f.relevance, chunks=f.chunks,
                             session_matches=f.session_matches, similarity=f.similarity)
                for f in found]

    async def pending_embeddings(self) -> int:
        return await self._chunk_vectors.pending_embeddings()

    async def embed_pending(self, limit: int = 256) -> int:
        """Embed up to `limit` of this owner's chunks that have no vector from the model yet."""
        return await self._chunk_vectors.embed_pending(limit)

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return
        try:
            async with self._db.write() as conn:
                await conn.execute(
                    "UPDATE memories SET access_count = access_count + 1,"
                    " last_accessed_at = %s WHERE owner_user = %s AND id = ANY(%s)",
                    (self._clock.now(), self._owner.user, ids))
        except BackendError as exc:
            log.warning("memory_use_not_recorded", backend=BACKEND_NAME, error=str(exc))

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        async with self._db.write() as conn:
            chain = await fetch_all(conn, CHAIN_FOR_UPDATE,
                                     {"user": self._owner.user, "id": memory_id})
            changed = await forgetting.delete_versions(conn, self._owner, chain, hard=hard,
                                                       now=self._clock.now())
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
        where, params = forgetting.forget_filter(
            self._owner, session_id=session_id, session_external_id=session_external_id,
            project=project, as_of=as_of, memory_ids=memory_ids)
        async with self._db.write() as conn:
            rows = await fetch_all(conn, f"SELECT * FROM memories WHERE {where}", params)
            count = await forgetting.delete_versions(conn, self._owner, rows, hard=hard,
                                                     now=self._clock.now())
            scopes = scope.lasting(
                (r["session_external_id"] for r in rows),
                session_id_value=None if session_id is None
                else f"{self._owner.origin}:{session_id}")
            await forgetting.remember_forgotten(conn, self._owner, scopes,
                                                as_of or self._clock.now())
        log.info("memories_forgotten", backend=BACKEND_NAME, count=count, hard=hard,
                 session_id=session_id, session_external_id=session_external_id,
                 project=project, all=all)
        return count

    async def correct(
        self, memory_id: str, new_content: str, *, reason: str | None = None,
        provenance: Provenance | None = None,
    ) -> Memory:
        now = self._clock.now()
        async with self._db.write() as conn:
            rows = await fetch_all(
                conn, "SELECT * FROM memories WHERE owner_user = %s AND id = %s FOR UPDATE",
                (self._owner.user, memory_id))
            new = writes.correction(row_memory(rows[0]) if rows else None, memory_id,
                                    new_content, reason=reason, provenance=provenance, now=now,
                                    backend=BACKEND_NAME)
            await insert_once(conn, self._owner, new)
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
        async with self._db.write() as conn:
            created = (not await forgetting.forgotten(conn, self._owner, memory)
                       and await insert_once(conn, self._owner, memory))
            if created:
                await edits.supersede_tails(conn, self._owner, segment, now)
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
        async with self._db.write() as conn:
            created = (not await forgetting.forgotten(conn, self._owner, memory)
                       and await insert_once(conn, self._owner, memory))
            if created and memory.type is MemoryType.SESSION_DIGEST:
                await edits.supersede_digests(conn, self._owner, memory,
                                              self._clock.now())
            if created and memory.type is MemoryType.OBSERVATION and memory.supersedes:
                await edits.supersede_observation(conn, self._owner, memory,
                                                  self._clock.now())
        log.debug("memory_saved", backend=BACKEND_NAME, memory_id=memory.id,
                  type=memory.type.value, created=created)
        return SaveResult(id=memory.id, created=created)

    async def get(self, memory_id: str) -> Memory | None:
        rows = await self._db.read("SELECT * FROM memories WHERE owner_user = %s AND id = %s",
                                (self._owner.user, memory_id))
        return row_memory(rows[0]) if rows else None

    async def history(self, memory_id: str) -> list[Memory]:
        rows = await self._db.read(CHAIN, {"user": self._owner.user, "id": memory_id})
        return chain_order([row_memory(r) for r in rows])

    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        return await forgetting.deletion_records(self._db, self._owner, memory_id)

    async def export(self, project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        after = ""
        owned, params = mine(self._owner)
        while True:
            sql = (f"SELECT * FROM memories m WHERE {owned} AND m.deleted_at IS NULL"
                   " AND m.id > %(after)s")
            page = {**params, "after": after, "limit": EXPORT_PAGE_SIZE}
            if project is not None:
                sql += " AND m.project = %(project)s"
                page["project"] = project
            rows = await self._db.read(sql + " ORDER BY m.id COLLATE \"C\" LIMIT %(limit)s", page)
            for row in rows:
                yield memory_to_record(row_memory(row))
            if len(rows) < EXPORT_PAGE_SIZE:
                return
            after = rows[-1]["id"]

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        created = 0
        number = 0
        batch: list[Memory] = []
        async with self._db.write() as conn:
            for number, record in enumerate(records, 1):
                try:
                    memory = record_to_memory(record)
                except ValueError as exc:
                    raise BackendError(f"import record {number}: {exc}",
                                       backend=BACKEND_NAME) from exc
                memory = writes.imported(memory)
                if await forgetting.forgotten(conn, self._owner, memory):
                    continue
                batch.append(memory)
                if len(batch) >= IMPORT_BATCH:
                    created += await insert_many(conn, self._owner, batch)
                    batch = []
            created += await insert_many(conn, self._owner, batch)
        if created >= ANALYZE_AFTER:
            # Fresh statistics now, not when autovacuum gets to it: with stale ones the
            # planner ranks every chunk holding a word before filtering by project
            # (100,000 memories: 277 ms a recall until the table is analyzed, 20 ms after).
            async with self._db.connection() as conn:
                await conn.execute("ANALYZE memories, memory_chunks")
        log.info("memories_imported", backend=BACKEND_NAME, records=number, created=created)
        return created

    async def import_deletions(self, records: Iterable[DeletionRecord]) -> int:
        """Copy deletion records from another store; a hard one keeps its id out for good."""
        async with self._db.write() as conn:
            return await forgetting.import_deletions(conn, self._owner, records)

    async def session_memories(self, session_id: int) -> list[Memory]:
        rows = await self._db.read(
            "SELECT * FROM memories WHERE owner_user = %(user)s AND origin = %(origin)s"
            " AND session_id = %(sid)s ORDER BY first_index, created_at, id",
            {"user": self._owner.user, "origin": self._owner.origin, "sid": session_id})
        return [row_memory(r) for r in rows]

    async def daily_counts(self, since: datetime) -> list[tuple[str, str | None, int]]:
        rows = await self._db.read(
            "SELECT to_char(COALESCE(started_at, created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
            " AS day, project, COUNT(*) AS n FROM memories WHERE owner_user = %(user)s"
            " AND deleted_at IS NULL AND superseded_by IS NULL"
            " AND COALESCE(started_at, created_at) >= %(since)s"
            " GROUP BY day, project ORDER BY day, project",
            {"user": self._owner.user, "since": utc(since)})
        return [(r["day"], r["project"], int(r["n"])) for r in rows]

    async def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        rows = await self._db.read(
            "SELECT id FROM memories WHERE owner_user = %s AND id >= %s AND id < %s"
            " ORDER BY id LIMIT %s", (self._owner.user, prefix, prefix + "g", limit))
        return [str(r["id"]) for r in rows]

    async def rewrite_content(self, memory_id: str, content: str) -> bool:
        async with self._db.write() as conn:
            return await edits.rewrite_content(conn, self._owner, memory_id, content,
                                               self._clock.now())

    async def add_evidence(self, memory_id: str, message_uuids: Sequence[str]) -> bool:
        async with self._db.write() as conn:
            return await edits.add_evidence(conn, self._owner, memory_id, message_uuids,
                                            self._clock.now())

    async def relabel_project(self, old: str, new: str) -> Relabelled:
        """Move this user's memories of project `old` to `new` (a renamed folder)."""
        if not old or not new or old == new:
            raise ValueError("give two different projects")
        async with self._db.write() as conn:
            moved = await edits.relabel_project(conn, self._owner, old, new)
        self._chunk_vectors.forget_sizes()
        log.info("memory_project_relabelled", backend=BACKEND_NAME, moved=moved)
        return Relabelled(moved)

    async def forgotten_scopes(self) -> list[ForgottenScope]:
        """This user's forgotten sessions and projects (`forgetting.forgotten_scopes`)."""
        return await forgetting.forgotten_scopes(self._db, self._owner)

    async def import_forgotten_scopes(self, scopes: Iterable[ForgottenScope]) -> int:
        """Keep scopes forgotten in another store of this machine forgotten here too."""
        async with self._db.write() as conn:
            return await forgetting.import_forgotten_scopes(conn, self._owner, scopes)

    async def close(self) -> None:
        await self._db.close()

    def describe_error(self, message: str) -> str:
        """`message` without this backend's password (for callers that format their own)."""
        return self._db.describe(message)
