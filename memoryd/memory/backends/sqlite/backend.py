"""The embedded memory backend: one private SQLite file with an FTS5 index.

Recall ranks with `ranking.score` (see memoryd/memory/recall/ranking.py):

    score = bm25/(bm25 + 1) * (0.5 + 0.5 * importance * decay)

with bm25 taken positive, decay = 1 for facts, corrections and project context
and 0.5 ** (age_days / 30), floored at 0.25, for conversation and session
summaries. Every filter (live only, project, time span, types) is applied in
SQL, in the statement that ranks the candidates (see sqlite_recall.py).

Recall with words is hybrid: BM25 over chunks (and, with an embedder, vector
similarity), fused, then the same importance/recency weighting: the ranking in
`memoryd/memory/recall/hybrid.py`, over this backend's channels (`hybrid.py` here).
Every memory is chunked in the transaction that saves it, and the chunks are the only
full-text index; vectors are added later by `embed_pending`.

Decisions worth knowing:

- A correction is a new memory of type `correction` whose importance is the
  higher of the old memory's and the correction default (0.9), and which never
  decays: a person said it. It inherits project, tags and (unless given)
  provenance, so bulk forgets by session or project catch whole chains.
- `forget` acts on the whole correction chain. Hard forgets delete the rows (the
  FTS rows go with them by trigger), merge the FTS index so no term of the
  content survives in it, and checkpoint the WAL; with `secure_delete` on, the
  freed pages are zeroed. The `memory_deletions` audit keeps id, type, project,
  session and time, never content, and a hard-forgotten id is never stored again.
- All writes go through one connection, serialized by an asyncio lock, in
  `BEGIN IMMEDIATE` transactions so other processes on the same file see whole
  changes only. sqlite3 errors become BackendError / BackendUnavailable here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError, BackendUnavailable
from memoryd.memory import writes
from memoryd.memory.backends.sqlite import bulk, edits, forgetting, fts
from memoryd.memory.backends.sqlite import hybrid as sqlite_hybrid
from memoryd.memory.backends.sqlite import recall as sqlite_recall
from memoryd.memory.backends.sqlite.connection import (
    LockedConnection,
    check_owner,
    claim_owner,
)
from memoryd.memory.backends.sqlite.results import hybrid_result, ranked_result
from memoryd.memory.backends.sqlite.rows import CHAIN, chain_order, fetch_all, row_memory
from memoryd.memory.backends.sqlite.schema import BACKEND_NAME, connect, migrate
from memoryd.memory.backends.sqlite.vectors import ChunkVectors
from memoryd.memory.export_format import memory_to_record, to_utc_text
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
)
from memoryd.memory.policy import ForgetScope
from memoryd.memory.protocol import Capability, RecallOrder, Relabelled
from memoryd.memory.recall import hybrid
from memoryd.memory.recall.fusion import PARAPHRASE_VECTOR_WEIGHT, VECTOR_WEIGHT, Fusion
from memoryd.sqlite import call_on_connection, shrink_memory

if TYPE_CHECKING:
    from memoryd.memory.embeddings.interface import Embedder

log = structlog.get_logger("memoryd.memory.sqlite")

EXPORT_PAGE_SIZE = 500


class SQLiteMemoryBackend:
    """The default memory backend; open it with `await SQLiteMemoryBackend.open(path, clock=c)`."""

    name = BACKEND_NAME
    _ALWAYS = frozenset({Capability.REMEMBER, Capability.RECALL, Capability.FORGET,
                         Capability.CORRECT, Capability.EXPORT, Capability.TEMPORAL})

    def __init__(self, conn: aiosqlite.Connection, path: Path, clock: Clock, *,
                 embedder: Embedder | None = None,
                 fusion: Fusion = "adaptive",
                 vector_weight: float = VECTOR_WEIGHT,
                 paraphrase_vector_weight: float = PARAPHRASE_VECTOR_WEIGHT,
                 ) -> None:
        self._db = LockedConnection(conn)
        self._path = path
        self._clock = clock
        self._embedder = embedder
        self._fusion: Fusion = fusion
        self._vector_weight = writes.fraction("vector_weight", vector_weight)
        self._paraphrase_vector_weight = writes.fraction("paraphrase_vector_weight",
                                                   paraphrase_vector_weight)
        self._chunk_vectors = ChunkVectors(embedder, clock, read=self._db.read,
                                           write=self._db.write)

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self._ALWAYS | ({Capability.VECTORS} if self._embedder else frozenset())

    @property
    def embedder(self) -> Embedder | None:
        """The embedder hybrid recall uses, or None (keyword search only)."""
        return self._embedder

    @classmethod
    async def open(
        cls, path: Path, *, clock: Clock, busy_timeout: float = 5.0,
        embedder: Embedder | None = None,
        fusion: Fusion = "adaptive",
        vector_weight: float = VECTOR_WEIGHT,
        paraphrase_vector_weight: float = PARAPHRASE_VECTOR_WEIGHT,
        owner: str | None = None,
        readonly: bool = False,
    ) -> SQLiteMemoryBackend:
        """Open or create the memory database at `path` and bring its schema up to date
        (`readonly`: open it as it is, for reading only: a hook on a full disk).

        `owner` is the user whose memories these are: the first owner to open the store
        claims it, and it refuses to open for anyone else (StoreOwnedElsewhere), so
        memories never cross users (None: no check, for tools that only copy).

        `busy_timeout` is how long (seconds) to wait for another writer before a
        write fails with BackendUnavailable. Recall with words is hybrid
        (`memoryd/memory/recall/hybrid.py`), by keywords alone without an `embedder`; vectors are
        added by `embed_pending`, never on the save path.
        `vector_weight` is the share of vector similarity in hybrid recall's
        fused score (the rest is keyword relevance) when the query's words are
        found, `paraphrase_vector_weight` when they are not (`adaptive` fusion).
        """
        writes.fraction("vector_weight", vector_weight)  # before a connection exists to leak
        writes.fraction("paraphrase_vector_weight", paraphrase_vector_weight)

        async def prepare(conn: aiosqlite.Connection) -> None:
            if not readonly:
                await migrate(conn, to_utc_text(clock.now()))
            await conn.create_function(
                sqlite_recall.SCORE_FUNCTION, 5, sqlite_recall.score_sql, deterministic=True
            )
            if readonly:
                if owner is not None:
                    await check_owner(conn, owner, path)
                return
            await bulk.chunk_missing(conn)
            if owner is not None:
                await claim_owner(conn, owner, to_utc_text(clock.now()), path)

        conn = await connect(path, busy_timeout=busy_timeout, then=prepare, readonly=readonly)
        log.debug("memory_backend_opened", backend=BACKEND_NAME, path=str(path))
        return cls(conn, path, clock, embedder=embedder, fusion=fusion,
                   vector_weight=vector_weight, paraphrase_vector_weight=paraphrase_vector_weight)

    async def __aenter__(self) -> SQLiteMemoryBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------

    async def _fetch_memory(self, conn: aiosqlite.Connection, memory_id: str) -> Memory | None:
        rows = await fetch_all(conn, "SELECT * FROM memories WHERE id = ?", (memory_id,))
        return row_memory(rows[0]) if rows else None

    # -- protocol -----------------------------------------------------------

    async def is_available(self) -> bool:
        if self._db.conn is None:
            return False
        try:
            async with self._db.conn.execute("SELECT 1") as cur:
                await cur.fetchone()
        except (sqlite3.Error, ValueError):
            return False
        return True

    async def remember(
        self,
        content: str,
        *,
        type: MemoryType = MemoryType.FACT,
        importance: float | None = None,
        project: str | None = None,
        tags: Iterable[str] = (),
        provenance: Provenance | None = None,
        private_to: str | None = None,
    ) -> Memory:
        memory = writes.new_memory(content, type=type, importance=importance, project=project,
                                   tags=tags, provenance=provenance, now=self._clock.now(),
                                   private_to=private_to)
        async with self._db.write() as conn:
            await bulk.insert_once(conn, memory)
        log.info("memory_remembered", memory_id=memory.id, type=memory.type.value,
                 project=memory.project)
        return memory

    async def recall(
        self,
        query: str,
        *,
        project: str | None = None,
        limit: int = 10,
        since: datetime | None = None,
        until: datetime | None = None,
        types: Iterable[MemoryType] | None = None,
        all_projects: bool = False,
        order: RecallOrder = "score",
        agent: str | None = None,
    ) -> list[RecallResult]:
        now = self._clock.now()
        if order == "score" and fts.terms(query):
            results = await self._hybrid_recall(
                query, now=now, project=project, limit=limit, since=since, until=until,
                types=types, all_projects=all_projects, agent=agent)
            log.debug("memory_recalled", results=len(results), project=project, order=order,
                      hybrid=True)
            return results
        recall = sqlite_recall.plan(query, now=now, project=project, since=since, until=until,
                                    types=types, all_projects=all_projects, agent=agent)
        if recall is None or limit <= 0:
            return []

        async def fetch(sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
            return await fetch_all(conn, sql, params)

        async with self._db.read() as conn:
            ranked = await sqlite_recall.ranked_rows(fetch, recall, limit=limit, order=order)
        results = [ranked_result(row, score) for row, score in ranked]
        log.debug("memory_recalled", results=len(results), project=project, order=order)
        return results

    async def _hybrid_recall(
        self, query: str, *, now: datetime, project: str | None, limit: int,
        since: datetime | None, until: datetime | None,
        types: Iterable[MemoryType] | None, all_projects: bool, agent: str | None,
    ) -> list[RecallResult]:
        filters = sqlite_recall.plan("", now=now, project=project, since=since, until=until,
                                     types=types, all_projects=all_projects, agent=agent)
        if filters is None or limit <= 0:
            return []
        query_vector = await self._chunk_vectors.query_vector(query)

        async def fetch(sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
            return await fetch_all(conn, sql, params)

        try:
            async with self._db.read() as conn:
                found = await hybrid.rank(
                    sqlite_hybrid.SQLiteChannels(fetch, filters, query, query_vector,
                                                 lambda: self._chunk_vectors.index),
                    query, limit=limit, fusion=self._fusion, vector_weight=self._vector_weight,
                    paraphrase_vector_weight=self._paraphrase_vector_weight)
        finally:
            if query_vector is not None and not query_vector.done():
                query_vector.cancel()
        return [hybrid_result(hit) for hit in found]

    async def pending_embeddings(self) -> int:
        """How many chunks of live memories still wait for a vector (0 without an embedder)."""
        return await self._chunk_vectors.pending_embeddings()

    async def embed_pending(self, limit: int = 256) -> int:
        """Embed up to `limit` chunks that have no vector yet (`ChunkVectors.embed_pending`)."""
        return await self._chunk_vectors.embed_pending(limit)

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return
        now = self._clock.now()
        try:
            async with self._db.write() as conn:
                await conn.execute(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?"
                    f" WHERE id IN ({', '.join('?' for _ in ids)})",
                    (to_utc_text(now), *ids),
                )
        except BackendError as exc:
            log.warning("memory_use_not_recorded", backend=BACKEND_NAME, error=str(exc))

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        async with self._db.write() as conn:
            chain = await fetch_all(conn, CHAIN, {"id": memory_id})
            changed = await forgetting.delete_versions(conn, chain, hard=hard,
                                                      now=self._clock.now())
        if changed and hard:
            await self._scrub()
        log.info("memory_forgotten", memory_id=memory_id, hard=hard, versions=changed)
        return changed > 0
    async def forget_where(
        self,
        *,
        session_id: int | None = None,
        session_external_id: str | None = None,
        project: str | None = None,
        all: bool = False,
        hard: bool = False,
        as_of: datetime | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> int:
        scope = ForgetScope(session_id, session_external_id, project, all, memory_ids)
        scope.check()
        where, params = forgetting.forget_filter(
            session_id=session_id, session_external_id=session_external_id, project=project,
            memory_ids=memory_ids, as_of=as_of)
        async with self._db.write() as conn:
            rows = await fetch_all(
                conn,
                "SELECT id, type, project, session_id, session_external_id, deleted_at"
                f" FROM memories WHERE {where}",
                params,
            )
            count = await forgetting.delete_versions(conn, rows, hard=hard,
                                                    now=self._clock.now())
            await forgetting.remember_forgotten(
                conn, scope.lasting(r["session_external_id"] for r in rows),
                at=as_of or self._clock.now())
        if count and hard:
            await self._scrub()
        log.info("memories_forgotten", count=count, hard=hard, session_id=session_id,
                 session_external_id=session_external_id, project=project, all=all)
        return count

    async def _scrub(self) -> None:
        """Leave no trace of hard-deleted content in the FTS index or the WAL.

        The deletion itself is already committed, so a busy database only defers
        this to the next hard forget (logged), rather than failing the forget.
        """
        try:
            async with self._db.read() as conn:
                await forgetting.scrub(conn)
        except BackendUnavailable as exc:
            log.warning("memory_scrub_deferred", backend=BACKEND_NAME, error=str(exc))

    async def correct(
        self,
        memory_id: str,
        new_content: str,
        *,
        reason: str | None = None,
        provenance: Provenance | None = None,
    ) -> Memory:
        now = self._clock.now()
        async with self._db.write() as conn:
            old = await self._fetch_memory(conn, memory_id)
            new = writes.correction(old, memory_id, new_content, reason=reason,
                                    provenance=provenance, now=now, backend=BACKEND_NAME)
            await bulk.insert_once(conn, new)
            await conn.execute(
                "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
                (new.id, to_utc_text(now), memory_id),
            )
        log.info("memory_corrected", memory_id=memory_id, corrected_by=new.id)
        return new

    async def _save_once(self, memory: Memory) -> SaveResult:
        async with self._db.write() as conn:
            created = (not await forgetting.forgotten(conn, memory)
                       and await bulk.insert_once(conn, memory))
            if created and memory.type is MemoryType.SESSION_DIGEST:
                await edits.supersede_digests(conn, memory, self._clock.now())
            if created and memory.type is MemoryType.OBSERVATION and memory.supersedes:
                await edits.supersede_observation(conn, memory, self._clock.now())
        log.debug("memory_saved", memory_id=memory.id, type=memory.type.value, created=created)
        return SaveResult(id=memory.id, created=created)

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        """Store the segment once; in the same transaction, supersede any live segment of
        the same session that starts at the same message and ends earlier.

        Such a shorter segment is a session's tail saved just before a crash, before the
        sync index could move past it: saved again with the messages that came after,
        the tail gets a new id (ids hold the last index), and both would be recalled.
        The shorter one stays for audit, superseded, so every message is in one live
        segment whatever the session did after the crash.
        """
        return (await self.save_conversation_segments([segment]))[0]

    async def save_conversation_segments(
            self, segments: Sequence[ConversationSegment]) -> list[SaveResult]:
        """`save_conversation_segment` for each, in one transaction (recovery's batches:
        one commit, one fsync, for a page of segments), and in one call on the store's
        thread: a page of segments is several hundred statements, and a round trip
        through the event loop for each cost more than the statements."""
        prepared = (segments if isinstance(segments, bulk.PreparedSegments)
                    and segments.owner is self
                    else self.prepare_conversation_segments(segments))
        batch, now = prepared.rows, prepared.now
        async with self._db.lock:
            with self._db.translated():
                outcome = await call_on_connection(
                    self._db.connection(), bulk.save_segments, batch, to_utc_text(now))
        results = []
        for (segment, memory, _spans), (created, forgotten, superseded) in zip(
                batch, outcome, strict=True):
            if forgotten:
                forgetting.log_not_saved(memory)
            if superseded:
                log.info("memory_tail_superseded", memory_id=segment.id,
                         superseded=superseded)
            results.append(SaveResult(id=memory.id, created=created))
        log.debug("memory_segments_saved", segments=len(results),
                  created=sum(r.created for r in results))
        return results

    def prepare_conversation_segments(
            self, segments: Sequence[ConversationSegment]) -> bulk.PreparedSegments:
        """`segments` with their memories and chunks made (Python on the caller's thread;
        recovery makes a batch's while the one before is written)."""
        now = self._clock.now()
        return bulk.PreparedSegments(segments, owner=self, now=now, rows=[
            (segment, memory, bulk.chunk_spans(memory)) for segment in segments
            for memory in (writes.segment_memory(segment, now),)])

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        return await self._save_once(writes.summary_memory(summary, self._clock.now()))

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        return await self._save_once(writes.requested_memory(requested, self._clock.now()))

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        return await self._save_once(writes.distilled_memory(distilled, self._clock.now()))

    async def get(self, memory_id: str) -> Memory | None:
        async with self._db.read() as conn:
            return await self._fetch_memory(conn, memory_id)

    async def history(self, memory_id: str) -> list[Memory]:
        async with self._db.read() as conn:
            rows = await fetch_all(conn, CHAIN, {"id": memory_id})
        return chain_order([row_memory(r) for r in rows])


    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        async with self._db.read() as conn:
            return await forgetting.deletion_records(conn, memory_id)

    async def export(self, project: str | None = None) -> AsyncIterator[dict[str, Any]]:
        after = ""
        while True:
            sql = "SELECT * FROM memories WHERE deleted_at IS NULL AND id > ?"
            params: list[Any] = [after]
            if project is not None:
                sql += " AND project = ?"
                params.append(project)
            params.append(EXPORT_PAGE_SIZE)
            # The lock is held per page only, never across a yield.
            async with self._db.read() as conn:
                rows = await fetch_all(conn, sql + " ORDER BY id LIMIT ?", params)
            for row in rows:
                yield memory_to_record(row_memory(row))
            if len(rows) < EXPORT_PAGE_SIZE:
                return
            after = rows[-1]["id"]

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        async with self._db.write() as conn:
            number, created = await bulk.import_records(conn, records)
        log.info("memories_imported", records=number, created=created)
        return created

    async def import_deletions(self, records: Iterable[DeletionRecord]) -> int:
        """Copy deletion records from another store (`memoryd memory copy`); a hard one also
        keeps its id from ever being stored here. Returns how many were new."""
        async with self._db.write() as conn:
            return await forgetting.import_deletions(conn, records)

    async def session_memories(self, session_id: int) -> list[Memory]:
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn, "SELECT * FROM memories WHERE session_id = ?"
                " ORDER BY first_index, created_at, id", (session_id,))
        return [row_memory(r) for r in rows]

    async def daily_counts(self, since: datetime) -> list[tuple[str, str | None, int]]:
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn, "SELECT substr(COALESCE(started_at, created_at), 1, 10) AS day, project,"
                " COUNT(*) AS n FROM memories WHERE deleted_at IS NULL"
                " AND superseded_by IS NULL AND COALESCE(started_at, created_at) >= ?"
                " GROUP BY day, project ORDER BY day, project", (to_utc_text(since),))
        return [(r["day"], r["project"], int(r["n"])) for r in rows]

    async def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        # ids are lower-case hex: the prefix's range of the unique index, no LIKE.
        async with self._db.read() as conn:
            rows = await fetch_all(
                conn, "SELECT id FROM memories WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (prefix, prefix + "g", limit))
        return [str(r["id"]) for r in rows]

    async def rewrite_content(self, memory_id: str, content: str) -> bool:
        async with self._db.write() as conn:
            return await edits.rewrite_content(conn, memory_id, content, self._clock.now())

    async def add_evidence(self, memory_id: str, message_uuids: Sequence[str]) -> bool:
        async with self._db.write() as conn:
            return await edits.add_evidence(conn, memory_id, message_uuids, self._clock.now())

    async def relabel_project(self, old: str, new: str) -> Relabelled:
        """Move every memory of project `old` to `new` (a renamed folder); how many moved."""
        if not old or not new or old == new:
            raise ValueError("give two different projects")
        async with self._db.write() as conn:
            moved = await edits.relabel_project(conn, old, new)
        log.info("memory_project_relabelled", moved=moved)
        return Relabelled(moved)

    async def forgotten_scopes(self) -> list[ForgottenScope]:
        """The sessions and projects forgotten here (`memoryd memory copy` carries them)."""
        async with self._db.read() as conn:
            return await forgetting.forgotten_scopes(conn)

    async def import_forgotten_scopes(self, scopes: Iterable[ForgottenScope]) -> int:
        """Keep scopes forgotten in another store forgotten here too; how many were new."""
        async with self._db.write() as conn:
            return await forgetting.import_forgotten_scopes(conn, scopes)

    async def release_memory(self) -> None:
        if self._db.conn is not None:
            await shrink_memory(self._db.conn)

    async def close(self) -> None:
        await self._chunk_vectors.close()
        await self._db.close()
