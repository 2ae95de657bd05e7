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

import asyncio
import functools
import json
import sqlite3
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import aiosqlite
import orjson
import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError, BackendUnavailable, EmbeddingLoading, StoreOwnedElsewhere
from memoryd.memory import writes
from memoryd.memory.backends.sqlite import fts
from memoryd.memory.backends.sqlite import hybrid as sqlite_hybrid
from memoryd.memory.backends.sqlite import recall as sqlite_recall
from memoryd.memory.backends.sqlite.rows import (
    CHAIN,
    COLUMNS,
    INSERT_ONCE,
    chain_order,
    insert_many,
    json_list,
    row_memory,
    row_params,
    row_provenance,
    values,
)
from memoryd.memory.backends.sqlite.schema import (
    BACKEND_NAME,
    connect,
    migrate,
    translate,
)
from memoryd.memory.export_format import (
    from_utc_text,
    memory_to_record,
    record_to_memory,
    to_utc_text,
)
from memoryd.memory.models import (
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
)
from memoryd.memory.policy import ForgetScope, VectorMark, began
from memoryd.memory.protocol import Capability, RecallOrder, Relabelled
from memoryd.memory.recall import hybrid, ranking
from memoryd.memory.recall.chunks import chunk_memory
from memoryd.memory.recall.fusion import PARAPHRASE_VECTOR_WEIGHT, VECTOR_WEIGHT, Fusion
from memoryd.sqlite import call_on_connection, immediate_transaction, shrink_memory

if TYPE_CHECKING:  # NumPy is needed only with an embedder: keyword recall runs without it
    from memoryd.memory.backends.sqlite.vector_index import Floats, VectorIndex
    from memoryd.memory.embeddings.interface import Embedder

log = structlog.get_logger("memoryd.memory.sqlite")

EXPORT_PAGE_SIZE = 500
IMPORT_BATCH_SIZE = 500
#: Vectors read per query when the index loads (about 30 MB at 384 dimensions).
INDEX_PAGE = 20_000
#: How long a recall waits for the index to load before it goes by keywords alone.
INDEX_WAIT = 2.0

# Chunks of live memories with no vector from the current model.
_PENDING_FROM = (
    "FROM memory_chunks c JOIN memories m ON m.seq = c.memory_seq"
    " LEFT JOIN chunk_vectors v ON v.chunk_seq = c.seq AND v.model = :model"
    " WHERE v.chunk_seq IS NULL AND m.deleted_at IS NULL AND m.superseded_by IS NULL"
)

_FORGOTTEN = (
    "SELECT 1 FROM forgotten_scopes WHERE (kind = 'session' AND value = :external)"
    " OR (kind = 'session_id' AND value = :session_id)"
    " OR (kind = 'project' AND value = :project AND forgotten_at >= :began) LIMIT 1")
# For each segment of a batch (a JSON array of [id, session id, session external id,
# source, first index, last index]): the live shorter saves of its messages, oldest first.
_SHORTER_TAILS = (
    "SELECT j.key, m.id FROM json_each(?) j JOIN memories m"
    " ON m.session_id IS json_extract(j.value, '$[1]')"
    " AND m.session_external_id IS json_extract(j.value, '$[2]')"
    " AND m.source IS json_extract(j.value, '$[3]')"
    " AND m.first_index = json_extract(j.value, '$[4]')"
    " AND m.last_index < json_extract(j.value, '$[5]')"
    " AND m.id != json_extract(j.value, '$[0]')"
    " WHERE m.type = 'conversation' AND m.superseded_by IS NULL AND m.deleted_at IS NULL"
    " ORDER BY j.key, m.seq")
_SUPERSEDE_TAIL = ("UPDATE memories SET superseded_by = ?, updated_at = ?,"
                   " reason = 'extended by a later save of the same messages' WHERE id = ?")
_SUPERSEDES = "UPDATE memories SET supersedes = ? WHERE id = ?"

#: A chunk without its memory: ordinal, start and end (characters), text, first and last
#: message index, uuids (as JSON text).
ChunkSpan = tuple[int, int, int, str, int | None, int | None, str]

#: Statements bind at most this many values: SQLite's default limit since 3.32 (a
#: build with a lower one is asked, `Connection.getlimit`).
MAX_VARIABLES = 32_766
#: The most rows one statement inserts. Statements come in power-of-two sizes up to it:
#: `sqlite3` keeps each distinct statement prepared (128 per connection), and one of
#: many rows holds ~2 KB a row, so a size per batch kept 71 MB after 150 batches.
MAX_ROWS = 512


@functools.lru_cache(maxsize=16)
def _insert_chunks_sql(rows: int) -> str:
    """Chunks in one statement, bound as values (memory seq, *ChunkSpan, the memory's
    project): a batch's index work then runs in one step outside Python's lock, instead
    of a step per chunk that must take the lock back each time. The scope token (schema
    v3) is `p<id>` of the memory's project, `p0` without one."""
    return ("INSERT INTO memory_chunks (memory_seq, ordinal, start_char, end_char, content,"
            " first_index, last_index, message_uuids, scope)"
            " SELECT column1, column2, column3, column4, column5, column6, column7, column8,"
            " 'p' || COALESCE((SELECT id FROM memory_projects WHERE project = column9), 0)"
            f" FROM ({values(9, rows)})")


def _cuts(conn: sqlite3.Connection, width: int, count: int) -> Iterator[tuple[int, int]]:
    """(start, size) of the statements that insert `count` rows of `width` values on
    `conn`: sizes are powers of two, at most MAX_ROWS and what the limit allows."""
    limit = min(MAX_VARIABLES, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    largest = max(1, min(MAX_ROWS, limit // width))
    largest = 1 << (largest.bit_length() - 1)
    at = 0
    while at < count:
        size = min(largest, 1 << ((count - at).bit_length() - 1))
        yield at, size
        at += size


def _insert_chunk_rows(conn: sqlite3.Connection,
                       chunks: Sequence[tuple[int, str | None, ChunkSpan]]) -> None:
    """Insert (memory seq, memory project, span) chunks, in the statements `_cuts` gives."""
    for at, size in _cuts(conn, 9, len(chunks)):
        part = chunks[at:at + size]
        conn.execute(_insert_chunks_sql(size),
                     [v for seq, project, span in part for v in (seq, *span, project)]).close()


#: A session's live digests other than `:id`, the one covering the most messages last.
_LIVE_DIGESTS = """
    SELECT id, last_index FROM memories
    WHERE type = 'session_digest' AND id != :id AND superseded_by IS NULL
      AND deleted_at IS NULL AND session_id IS :session_id
      AND session_external_id IS :external AND source IS :source
    ORDER BY COALESCE(last_index, -1), seq
"""


def _chunk_spans(memory: Memory) -> list[ChunkSpan]:
    return [(c.ordinal, c.start, c.end, c.text, c.first_index, c.last_index,
             json_list(c.message_uuids))
            for c in chunk_memory(memory.content, memory.type, memory.provenance)]


class _PreparedSegments(tuple[ConversationSegment, ...]):
    """Segments with the rows that save them (`prepare_conversation_segments`), made by
    one backend at one moment."""

    owner: object
    now: datetime
    rows: list[tuple[ConversationSegment, Memory, list[ChunkSpan]]]

    def __new__(cls, segments: Sequence[ConversationSegment], *, owner: object,
                now: datetime, rows: list[tuple[ConversationSegment, Memory, list[ChunkSpan]]]
                ) -> _PreparedSegments:
        prepared = super().__new__(cls, segments)
        prepared.owner, prepared.now, prepared.rows = owner, now, rows
        return prepared


def _insert_chunks_of(conn: sqlite3.Connection, seq: int, memory: Memory) -> None:
    _insert_chunk_rows(conn, [(seq, memory.project, span) for span in _chunk_spans(memory)])


async def _insert_chunks(conn: aiosqlite.Connection, seq: int, memory: Memory) -> None:
    await call_on_connection(conn, _insert_chunks_of, seq, memory)


def _forgotten_params(memory: Memory) -> dict[str, Any]:
    prov = memory.provenance
    return {"external": prov.session_external_id,
            "session_id": None if prov.session_id is None else str(prov.session_id),
            "project": memory.project, "began": to_utc_text(began(memory))}


def _tail_key(segment: ConversationSegment) -> list[Any]:
    return [segment.id, segment.session_id, segment.session_external_id, segment.source,
            segment.first_index, segment.last_index]


def _log_not_saved(memory: Memory) -> None:
    log.info("memory_not_saved_forgotten", memory_id=memory.id,
             session_external_id=memory.provenance.session_external_id,
             project=memory.project)


def _insert_new(conn: sqlite3.Connection, memories: list[Memory]) -> dict[str, int]:
    """Insert each of `memories` neither stored yet nor hard-forgotten; the seq of each
    inserted, by id. One statement (one step outside Python's lock, where a statement a
    row must take the lock back after each, waiting for the event loop's thread to let
    it go) for as many rows as `_cuts` allows."""
    if not memories:
        return {}
    # The write lock is held (BEGIN IMMEDIATE): every row past the last seq is one of these.
    before = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM memories").fetchone()[0]
    for at, size in _cuts(conn, len(COLUMNS) + 1, len(memories)):
        part = memories[at:at + size]
        conn.execute(insert_many(size), [
            v for position, memory in enumerate(part, at)
            for v in (position, *row_params(memory))]).close()
    # As one row (one step): a row a step takes the lock back a row.
    inserted = conn.execute("SELECT json_group_array(json_array(id, seq)) FROM memories"
                            " WHERE seq > ?", (before,)).fetchone()[0]
    return dict(orjson.loads(inserted))


def _save_segments(conn: sqlite3.Connection,
                   batch: list[tuple[ConversationSegment, Memory, list[ChunkSpan]]],
                   now: str) -> list[tuple[bool, bool, list[str]]]:
    """The segments' memories, chunks and tails in one transaction, on the store's
    thread: (created, forgotten, ids superseded) for each."""
    outcome: list[tuple[bool, bool, list[str]]] = []
    chunks: list[tuple[int, str | None, ChunkSpan]] = []
    new_segments: dict[int, ConversationSegment] = {}  # position in the batch -> segment
    with immediate_transaction(conn):
        # Every cursor read to its end or closed: COMMIT refuses while one is open.
        anything_forgotten = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM forgotten_scopes)").fetchone()[0]
        kept: list[int] = []  # positions of the segments not forgotten
        for position, (_segment, memory, _spans) in enumerate(batch):
            forgotten = anything_forgotten and bool(conn.execute(
                _FORGOTTEN, _forgotten_params(memory)).fetchall())
            outcome.append((False, forgotten, []))
            if not forgotten:
                kept.append(position)
        inserted = _insert_new(conn, [batch[position][1] for position in kept])
        for position in kept:
            segment, memory, spans = batch[position]
            # pop: of two saves of one id in a batch, the first is the one inserted
            seq = inserted.pop(memory.id, None)
            if seq is not None:
                chunks += [(seq, memory.project, span) for span in spans]
                new_segments[position] = segment
                outcome[position] = (True, False, [])
        if new_segments:
            positions = list(new_segments)
            keys = json.dumps([_tail_key(new_segments[p]) for p in positions])
            tails: dict[int, list[str]] = {}
            for key, old in conn.execute(_SHORTER_TAILS, (keys,)).fetchall():
                tails.setdefault(positions[key], []).append(old)
            for position, superseded in tails.items():
                segment = new_segments[position]
                conn.executemany(_SUPERSEDE_TAIL, [(segment.id, now, old) for old in superseded])
                conn.execute(_SUPERSEDES, (superseded[-1], segment.id))
                outcome[position] = (True, False, superseded)
        _insert_chunk_rows(conn, chunks)
    return outcome


async def _claim(conn: aiosqlite.Connection, owner: str, now: str, path: Path) -> None:
    await conn.execute("INSERT OR IGNORE INTO store_owner (id, user, claimed_at)"
                       " VALUES (1, ?, ?)", (owner, now))
    await conn.commit()
    await _check_owner(conn, owner, path)


async def _check_owner(conn: aiosqlite.Connection, owner: str, path: Path) -> None:
    async with conn.execute("SELECT user FROM store_owner WHERE id = 1") as cursor:
        row = await cursor.fetchone()
    if row is not None and row[0] != owner:
        raise StoreOwnedElsewhere(
            f"the memory store {path} belongs to user {row[0]!r}, not {owner!r}: set"
            f" memory.user to {row[0]!r}, or give {owner!r} a state_dir of their own",
            backend=BACKEND_NAME)


async def _chunk_missing(conn: aiosqlite.Connection) -> int:
    """Chunk every memory that has none yet (after an import, or a database from before v2)."""
    async with conn.execute(
        "SELECT * FROM memories m WHERE NOT EXISTS"
        " (SELECT 1 FROM memory_chunks c WHERE c.memory_seq = m.seq)"
    ) as cur:
        rows = list(await cur.fetchall())
    if not rows:
        return 0
    own = not conn.in_transaction
    if own:
        await conn.execute("BEGIN IMMEDIATE")
    try:
        for row in rows:
            await _insert_chunks(conn, row["seq"], row_memory(row))
    except BaseException:
        if own:
            with suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
        raise
    if own:
        await conn.execute("COMMIT")
    return len(rows)


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
        self._conn: aiosqlite.Connection | None = conn
        self._path = path
        self._clock = clock
        self._lock = asyncio.Lock()
        self._embedder = embedder
        self._fusion: Fusion = fusion
        self._vector_weight = writes.fraction("vector_weight", vector_weight)
        self._paraphrase_vector_weight = writes.fraction("paraphrase_vector_weight",
                                                   paraphrase_vector_weight)
        self._index: VectorIndex | None = None
        self._query_vectors_failing: str | None = None
        self._index_loading: asyncio.Future[VectorIndex] | None = None
        self._embed_lock = asyncio.Lock()
        self._vectors = VectorMark()

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
                    await _check_owner(conn, owner, path)
                return
            await _chunk_missing(conn)
            if owner is not None:
                await _claim(conn, owner, to_utc_text(clock.now()), path)

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

    def _connection(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise BackendError("the memory backend is closed", backend=BACKEND_NAME)
        return self._conn

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise translate(exc) from exc

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            conn = self._connection()
            with self._translated():
                yield conn

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """The lock and one BEGIN IMMEDIATE transaction, rolled back on any error."""
        async with self._lock:
            conn = self._connection()
            with self._translated():
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    with suppress(sqlite3.Error):
                        await conn.execute("ROLLBACK")
                    raise
                try:
                    await conn.execute("COMMIT")
                except sqlite3.Error:
                    with suppress(sqlite3.Error):
                        await conn.execute("ROLLBACK")
                    raise

    async def _fetch_all(
        self, conn: aiosqlite.Connection, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[sqlite3.Row]:
        async with conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def _fetch_memory(self, conn: aiosqlite.Connection, memory_id: str) -> Memory | None:
        rows = await self._fetch_all(conn, "SELECT * FROM memories WHERE id = ?", (memory_id,))
        return row_memory(rows[0]) if rows else None

    async def _insert_once(self, conn: aiosqlite.Connection, memory: Memory) -> bool:
        cur = await conn.execute(INSERT_ONCE, (*row_params(memory), memory.id))
        created = cur.rowcount == 1
        seq = cur.lastrowid
        await cur.close()
        if created and seq is not None:
            await _insert_chunks(conn, seq, memory)
        return created

    # -- protocol -----------------------------------------------------------

    async def is_available(self) -> bool:
        if self._conn is None:
            return False
        try:
            async with self._conn.execute("SELECT 1") as cur:
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
        async with self._write() as conn:
            await self._insert_once(conn, memory)
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
            return await self._fetch_all(conn, sql, params)

        async with self._read() as conn:
            ranked = await sqlite_recall.ranked_rows(fetch, recall, limit=limit, order=order)
        results = [
            RecallResult(
                memory_id=row["id"],
                type=MemoryType(row["type"]),
                content=row["content"],
                score=score,
                provenance=row_provenance(row),
                created_at=from_utc_text(row["created_at"]),
                project=row["project"],
                importance=row["importance"],
                tags=tuple(json.loads(row["tags"])),
                relevance=ranking.relevance(row["bm"]),
                private_to=row["private_to"],
            )
            for row, score in ranked
        ]
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
        query_vector: asyncio.Task[Floats | None] | None = None
        if self._embedder is not None:
            # The index is loaded first (it reads through the lock that the search below
            # holds). A remote embedder's answer is awaited while SQLite runs the keyword
            # channel; a local model runs first, alone: on a few cores the model and SQLite
            # slow each other down by more than overlapping them saves (at 100,000
            # memories on 2 cores: the embedding 7 -> 10 ms, the keyword SQL 2 -> 6 ms).
            # A large index still loading (a million vectors take tens of seconds) is not
            # waited for: until it is in memory, recall is by keywords.
            index = None
            try:
                index = await self._load_index(wait=INDEX_WAIT)
            except BackendError as exc:
                log.warning("memory_recall_keywords_only", error=str(exc))
            if index is not None:
                query_vector = asyncio.create_task(self._query_vector(self._embedder, query))
                if self._embedder.on_this_machine:
                    await asyncio.wait([query_vector])

        async def fetch(sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
            return await self._fetch_all(conn, sql, params)

        try:
            async with self._read() as conn:
                found = await hybrid.rank(
                    sqlite_hybrid.SQLiteChannels(fetch, filters, query, query_vector,
                                                 lambda: self._index),
                    query, limit=limit, fusion=self._fusion, vector_weight=self._vector_weight,
                    paraphrase_vector_weight=self._paraphrase_vector_weight)
        finally:
            if query_vector is not None and not query_vector.done():
                query_vector.cancel()
        results = []
        for hit in found:
            row = hit.row
            provenance = row_provenance(row)
            excerpt = hit.excerpt
            if excerpt != row["content"]:
                first, last, uuids = hit.provenance_range(
                    lambda chunk: json.loads(chunk["message_uuids"]))
                provenance = replace(provenance, first_index=first, last_index=last,
                                     message_uuids=uuids)
            results.append(RecallResult(
                memory_id=row["id"],
                type=MemoryType(row["type"]),
                content=row["content"],
                score=hit.score,
                provenance=provenance,
                created_at=from_utc_text(row["created_at"]),
                project=row["project"],
                importance=row["importance"],
                tags=tuple(json.loads(row["tags"])),
                excerpt=None if excerpt == row["content"] else excerpt,
                relevance=hit.relevance,
                private_to=row["private_to"],
                similarity=hit.similarity,
                session_matches=hit.session_matches,
            ))
        return results

    async def _query_vector(self, embedder: Embedder, query: str) -> Floats | None:
        """The query's embedding, or None when the model fails."""
        try:
            vector: Floats = await asyncio.to_thread(embedder.embed_query, query)
        except EmbeddingLoading:
            return None  # not a failure: the model loads behind this recall
        except BackendError as exc:
            # A model or endpoint that fails leaves keyword search working: said once
            # when it begins and once when it ends, not at every recall.
            if self._query_vectors_failing is None:
                log.warning("memory_recall_keywords_only", error=str(exc))
            self._query_vectors_failing = str(exc)
            return None
        if self._query_vectors_failing is not None:
            log.info("memory_recall_vectors_back", failed_with=self._query_vectors_failing)
            self._query_vectors_failing = None
        return vector

    # -- embeddings -------------------------------------------------------

    async def _load_index(self, *, wait: float | None = None) -> VectorIndex | None:
        """The in-memory vector index, read from `chunk_vectors` on first use (in the
        background, page by page). With `wait`, None when it is not ready by then."""
        if self._embedder is None:
            return None
        if self._index is not None:
            return self._index
        if self._index_loading is None or self._index_loading.done():
            self._index_loading = asyncio.ensure_future(self._read_index(self._embedder))
        loading = self._index_loading
        if wait is None:
            return await asyncio.shield(loading)
        try:
            return await asyncio.wait_for(asyncio.shield(loading), wait)
        except TimeoutError:
            log.info("vector_index_loading", backend=BACKEND_NAME,
                     detail="recall is by keywords until the vectors are in memory")
            return None

    async def _read_index(self, embedder: Embedder) -> VectorIndex:
        from memoryd.memory.backends.sqlite.vector_index import VectorIndex

        started = self._clock.monotonic()
        index = VectorIndex(embedder.dimensions)
        after = -1
        while True:
            async with self._read() as conn:
                rows = await self._fetch_all(
                    conn,
                    "SELECT v.chunk_seq, c.memory_seq, v.vector FROM chunk_vectors v"
                    " JOIN memory_chunks c ON c.seq = v.chunk_seq WHERE v.model = ?"
                    " AND v.chunk_seq > ? ORDER BY v.chunk_seq LIMIT ?",
                    (embedder.name, after, INDEX_PAGE))
            if not rows:
                break
            # Off the event loop: a page is tens of megabytes of vectors to copy.
            await asyncio.to_thread(_add_rows, index, rows, embedder.dimensions)
            after = int(rows[-1][0])
        self._index = index
        log.info("vector_index_loaded", backend=BACKEND_NAME, vectors=len(index),
                 seconds=round(self._clock.monotonic() - started, 1))
        return index

    async def pending_embeddings(self) -> int:
        """How many chunks of live memories still wait for a vector (0 without an embedder)."""
        if self._embedder is None:
            return 0
        async with self._read() as conn:
            rows = await self._fetch_all(conn, f"SELECT COUNT(*) {_PENDING_FROM}",
                                         {"model": self._embedder.name})
        return int(rows[0][0])

    async def embed_pending(self, limit: int = 256) -> int:
        """Embed up to `limit` chunks that have no vector yet; returns how many were stored.

        The model runs in a worker thread without the database lock held, so
        saves and recalls go on meanwhile. Failures raise EmbeddingError
        (EmbeddingUnavailable when transient): nothing is lost, the chunks stay
        pending for the next call.
        """
        embedder = self._embedder
        if embedder is None or limit <= 0:
            return 0
        async with self._embed_lock:
            index = await self._load_index()
            now = self._clock.monotonic()
            after, full = self._vectors.start(now)
            async with self._read() as conn:
                # The newest seq first: a chunk added after it is read has a higher one.
                newest = (await self._fetch_all(
                    conn, "SELECT COALESCE(MAX(seq), 0) FROM memory_chunks"))[0][0]
                rows = await self._fetch_all(
                    conn,
                    f"SELECT c.seq, c.memory_seq, c.content {_PENDING_FROM}"
                    " AND c.seq > :after ORDER BY c.seq LIMIT :limit",
                    {"model": embedder.name, "limit": limit, "after": after})
            # Up to here every live chunk has a vector once these are stored.
            through = int(newest) if len(rows) < limit else int(rows[-1][0])
            if not rows:
                self._vectors.caught_up(through, full, now)
                return 0
            vectors = await asyncio.to_thread(embedder.embed, [r[2] for r in rows])
            import numpy as np

            async with self._write() as conn:
                await conn.executemany(
                    "INSERT OR REPLACE INTO chunk_vectors (chunk_seq, model, vector)"
                    " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM memory_chunks WHERE seq = ?)",
                    [(r[0], embedder.name, vectors[i].astype(np.float32).tobytes(), r[0])
                     for i, r in enumerate(rows)])
            if index is not None:
                index.add([r[0] for r in rows], [r[1] for r in rows], vectors)
            self._vectors.caught_up(through, full, now)
        log.debug("memory_chunks_embedded", count=len(rows), model=embedder.name)
        return len(rows)

    async def record_use(self, memory_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return
        now = self._clock.now()
        try:
            async with self._write() as conn:
                await conn.execute(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?"
                    f" WHERE id IN ({', '.join('?' for _ in ids)})",
                    (to_utc_text(now), *ids),
                )
        except BackendError as exc:
            log.warning("memory_use_not_recorded", backend=BACKEND_NAME, error=str(exc))

    async def forget(self, memory_id: str, *, hard: bool = False) -> bool:
        async with self._write() as conn:
            chain = await self._fetch_all(conn, CHAIN, {"id": memory_id})
            changed = await self._delete(conn, chain, hard=hard)
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
        filters: list[str] = []
        params: list[Any] = []
        for column, value in (("session_id", session_id),
                              ("session_external_id", session_external_id),
                              ("project", project)):
            if value is not None:
                filters.append(f"{column} = ?")
                params.append(value)
        if memory_ids is not None:
            filters.append("id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(memory_ids)))
        where = " AND ".join(filters) if filters else "1"
        if as_of is not None:
            where += " AND created_at <= ?"
            params.append(to_utc_text(as_of))
        async with self._write() as conn:
            rows = await self._fetch_all(
                conn,
                "SELECT id, type, project, session_id, session_external_id, deleted_at"
                f" FROM memories WHERE {where}",
                params,
            )
            count = await self._delete(conn, rows, hard=hard)
            await self._remember_forgotten(
                conn, scope.lasting(r["session_external_id"] for r in rows),
                at=as_of or self._clock.now())
        if count and hard:
            await self._scrub()
        log.info("memories_forgotten", count=count, hard=hard, session_id=session_id,
                 session_external_id=session_external_id, project=project, all=all)
        return count

    async def _remember_forgotten(self, conn: aiosqlite.Connection,
                                  scopes: set[tuple[str, str]], *, at: datetime) -> None:
        """Forgetting sticks (`policy`): what a session or project later brings (a later
        segment, a re-ingested transcript, a re-sync, an import) is never saved."""
        if scopes:
            await conn.executemany(
                "INSERT INTO forgotten_scopes (kind, value, forgotten_at) VALUES (?, ?, ?)"
                " ON CONFLICT (kind, value) DO UPDATE"
                " SET forgotten_at = MAX(forgotten_at, excluded.forgotten_at)",
                [(kind, value, to_utc_text(at)) for kind, value in scopes])

    async def _forgotten(self, conn: aiosqlite.Connection, memory: Memory) -> bool:
        """Whether `memory` (auto-saved or imported) belongs to a forgotten session, or to a
        conversation of a forgotten project that began before the project was forgotten."""
        rows = await self._fetch_all(conn, _FORGOTTEN, _forgotten_params(memory))
        if rows:
            _log_not_saved(memory)
        return bool(rows)

    async def _delete(self, conn: aiosqlite.Connection, rows: Sequence[sqlite3.Row], *,
                      hard: bool) -> int:
        """Tombstone (soft) or delete (hard) these versions with an audit row each."""
        targets = list(rows) if hard else [r for r in rows if r["deleted_at"] is None]
        if not targets:
            return 0
        now = to_utc_text(self._clock.now())
        mode = DeletionMode.HARD if hard else DeletionMode.SOFT
        await conn.executemany(
            "INSERT INTO memory_deletions (memory_id, mode, type, project, session_id,"
            " session_external_id, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r["id"], mode.value, r["type"], r["project"], r["session_id"],
              r["session_external_id"], now) for r in targets],
        )
        sql = ("DELETE FROM memories WHERE id = ?" if hard
               else "UPDATE memories SET deleted_at = ?, updated_at = ? WHERE id = ?")
        await conn.executemany(sql, [(r["id"],) if hard else (now, now, r["id"])
                                     for r in targets])
        return len(targets)

    async def _scrub(self) -> None:
        """Leave no trace of hard-deleted content in the FTS index or the WAL.

        The deletion itself is already committed, so a busy database only defers
        this to the next hard forget (logged), rather than failing the forget.
        """
        try:
            async with self._read() as conn:
                await conn.execute(
                    "INSERT INTO memory_chunks_fts (memory_chunks_fts) VALUES ('optimize')")
                # Its result row read: a statement left open would make the next
                # COMMIT on this connection fail ("SQL statements in progress").
                async with conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cursor:
                    await cursor.fetchall()
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
        async with self._write() as conn:
            old = await self._fetch_memory(conn, memory_id)
            new = writes.correction(old, memory_id, new_content, reason=reason,
                                    provenance=provenance, now=now, backend=BACKEND_NAME)
            await self._insert_once(conn, new)
            await conn.execute(
                "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
                (new.id, to_utc_text(now), memory_id),
            )
        log.info("memory_corrected", memory_id=memory_id, corrected_by=new.id)
        return new

    async def _save_once(self, memory: Memory) -> SaveResult:
        async with self._write() as conn:
            created = (not await self._forgotten(conn, memory)
                       and await self._insert_once(conn, memory))
            if created and memory.type is MemoryType.SESSION_DIGEST:
                await self._supersede_digests(conn, memory)
            if created and memory.type is MemoryType.OBSERVATION and memory.supersedes:
                await self._supersede_observation(conn, memory)
        log.debug("memory_saved", memory_id=memory.id, type=memory.type.value, created=created)
        return SaveResult(id=memory.id, created=created)

    async def _supersede_observation(self, conn: aiosqlite.Connection, new: Memory) -> None:
        """`new` replaces the observation it names, if that is still a live observation;
        otherwise it replaces nothing."""
        cursor = await conn.execute(
            "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?"
            " AND type = 'observation' AND superseded_by IS NULL AND deleted_at IS NULL",
            (new.id, to_utc_text(self._clock.now()), new.supersedes))
        if cursor.rowcount == 0:
            await conn.execute("UPDATE memories SET supersedes = NULL WHERE id = ?", (new.id,))

    async def _supersede_digests(self, conn: aiosqlite.Connection, new: Memory) -> None:
        """One live digest a session: `new` supersedes the session's digests that cover no
        more messages than it does; a later one (an older version replayed from the outbox
        after a newer one landed) supersedes `new` instead."""
        p = new.provenance
        now = to_utc_text(self._clock.now())
        live = await self._fetch_all(conn, _LIVE_DIGESTS, {
            "id": new.id, "session_id": p.session_id, "external": p.session_external_id,
            "source": p.source})
        newer = [r for r in live if (r["last_index"] or -1) > (p.last_index or -1)]
        if newer:
            await conn.execute(
                "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
                (newer[-1]["id"], now, new.id))
            return
        older = [r["id"] for r in live]
        if not older:
            return
        marks = ",".join("?" * len(older))
        await conn.execute(
            f"UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id IN ({marks})",
            (new.id, now, *older))
        await conn.execute("UPDATE memories SET supersedes = ? WHERE id = ?",
                           (older[-1], new.id))
        log.debug("memory_digest_superseded", memory_id=new.id, superseded=older)

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
        prepared = (segments if isinstance(segments, _PreparedSegments) and segments.owner is self
                    else self.prepare_conversation_segments(segments))
        batch, now = prepared.rows, prepared.now
        async with self._lock:
            with self._translated():
                outcome = await call_on_connection(
                    self._connection(), _save_segments, batch, to_utc_text(now))
        results = []
        for (segment, memory, _spans), (created, forgotten, superseded) in zip(
                batch, outcome, strict=True):
            if forgotten:
                _log_not_saved(memory)
            if superseded:
                log.info("memory_tail_superseded", memory_id=segment.id,
                         superseded=superseded)
            results.append(SaveResult(id=memory.id, created=created))
        log.debug("memory_segments_saved", segments=len(results),
                  created=sum(r.created for r in results))
        return results

    def prepare_conversation_segments(
            self, segments: Sequence[ConversationSegment]) -> _PreparedSegments:
        """`segments` with their memories and chunks made (Python on the caller's thread;
        recovery makes a batch's while the one before is written)."""
        now = self._clock.now()
        return _PreparedSegments(segments, owner=self, now=now, rows=[
            (segment, memory, _chunk_spans(memory)) for segment in segments
            for memory in (writes.segment_memory(segment, now),)])

    async def save_session_summary(self, summary: SessionSummary) -> SaveResult:
        return await self._save_once(writes.summary_memory(summary, self._clock.now()))

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        return await self._save_once(writes.requested_memory(requested, self._clock.now()))

    async def save_distilled_memory(self, distilled: DistilledMemory) -> SaveResult:
        return await self._save_once(writes.distilled_memory(distilled, self._clock.now()))

    async def get(self, memory_id: str) -> Memory | None:
        async with self._read() as conn:
            return await self._fetch_memory(conn, memory_id)

    async def history(self, memory_id: str) -> list[Memory]:
        async with self._read() as conn:
            rows = await self._fetch_all(conn, CHAIN, {"id": memory_id})
        return chain_order([row_memory(r) for r in rows])

    async def deletions(self, *, memory_id: str | None = None) -> list[DeletionRecord]:
        sql = "SELECT * FROM memory_deletions"
        params: tuple[Any, ...] = ()
        if memory_id is not None:
            sql += " WHERE memory_id = ?"
            params = (memory_id,)
        async with self._read() as conn:
            rows = await self._fetch_all(conn, sql + " ORDER BY seq", params)
        return [
            DeletionRecord(
                memory_id=r["memory_id"],
                mode=DeletionMode(r["mode"]),
                type=MemoryType(r["type"]),
                project=r["project"],
                session_id=r["session_id"],
                session_external_id=r["session_external_id"],
                deleted_at=from_utc_text(r["deleted_at"]),
            )
            for r in rows
        ]

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
            async with self._read() as conn:
                rows = await self._fetch_all(conn, sql + " ORDER BY id LIMIT ?", params)
            for row in rows:
                yield memory_to_record(row_memory(row))
            if len(rows) < EXPORT_PAGE_SIZE:
                return
            after = rows[-1]["id"]

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        created = 0
        number = 0
        batch: list[tuple[Any, ...]] = []
        async with self._write() as conn:
            for number, record in enumerate(records, 1):
                try:
                    memory = record_to_memory(record)
                except ValueError as exc:
                    raise BackendError(f"import record {number}: {exc}",
                                       backend=BACKEND_NAME) from exc
                # An export from elsewhere (or an older memoryd) may hold what masks now catch.
                memory = writes.imported(memory)
                if await self._forgotten(conn, memory):
                    continue  # an old export must not bring a forgotten session back
                batch.append((*row_params(memory), memory.id))
                if len(batch) >= IMPORT_BATCH_SIZE:
                    created += await self._insert_many(conn, batch)
                    batch = []
            created += await self._insert_many(conn, batch)
            await _chunk_missing(conn)
        log.info("memories_imported", records=number, created=created)
        return created

    async def import_deletions(self, records: Iterable[DeletionRecord]) -> int:
        """Copy deletion records from another store (`memoryd memory copy`); a hard one also
        keeps its id from ever being stored here. Returns how many were new."""
        added = 0
        async with self._write() as conn:
            for r in records:
                cur = await conn.execute(
                    "INSERT INTO memory_deletions (memory_id, mode, type, project, session_id,"
                    " session_external_id, deleted_at) SELECT ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS"
                    " (SELECT 1 FROM memory_deletions WHERE memory_id = ? AND mode = ?"
                    " AND deleted_at = ?)",
                    (r.memory_id, r.mode.value, r.type.value, r.project, r.session_id,
                     r.session_external_id, to_utc_text(r.deleted_at), r.memory_id,
                     r.mode.value, to_utc_text(r.deleted_at)))
                added += max(cur.rowcount, 0)
                await cur.close()
        return added

    async def session_memories(self, session_id: int) -> list[Memory]:
        async with self._read() as conn:
            rows = await self._fetch_all(
                conn, "SELECT * FROM memories WHERE session_id = ?"
                " ORDER BY first_index, created_at, id", (session_id,))
        return [row_memory(r) for r in rows]

    async def daily_counts(self, since: datetime) -> list[tuple[str, str | None, int]]:
        async with self._read() as conn:
            rows = await self._fetch_all(
                conn, "SELECT substr(COALESCE(started_at, created_at), 1, 10) AS day, project,"
                " COUNT(*) AS n FROM memories WHERE deleted_at IS NULL"
                " AND superseded_by IS NULL AND COALESCE(started_at, created_at) >= ?"
                " GROUP BY day, project ORDER BY day, project", (to_utc_text(since),))
        return [(r["day"], r["project"], int(r["n"])) for r in rows]

    async def ids_with_prefix(self, prefix: str, limit: int = 2) -> list[str]:
        # ids are lower-case hex: the prefix's range of the unique index, no LIKE.
        async with self._read() as conn:
            rows = await self._fetch_all(
                conn, "SELECT id FROM memories WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (prefix, prefix + "g", limit))
        return [str(r["id"]) for r in rows]

    async def rewrite_content(self, memory_id: str, content: str) -> bool:
        async with self._write() as conn:
            rows = await self._fetch_all(
                conn, "SELECT * FROM memories WHERE id = ? AND deleted_at IS NULL"
                " AND superseded_by IS NULL", (memory_id,))
            if not rows or rows[0]["content"] == content:
                return False
            seq = rows[0]["seq"]
            memory = replace(row_memory(rows[0]), content=content)
            # Deleting the chunks takes their index entries and vectors with them (triggers).
            await conn.execute("DELETE FROM memory_chunks WHERE memory_seq = ?", (seq,))
            await conn.execute("UPDATE memories SET content = ?, updated_at = ? WHERE seq = ?",
                               (content, to_utc_text(self._clock.now()), seq))
            await _insert_chunks(conn, seq, memory)
        return True

    async def add_evidence(self, memory_id: str, message_uuids: Sequence[str]) -> bool:
        async with self._write() as conn:
            rows = await self._fetch_all(
                conn, "SELECT message_uuids FROM memories WHERE id = ? AND deleted_at IS NULL"
                " AND superseded_by IS NULL", (memory_id,))
            if not rows:
                return False
            have = list(json.loads(rows[0]["message_uuids"] or "[]"))
            grown = writes.grow_evidence(have, message_uuids)
            if grown == have:
                return False
            await conn.execute(
                "UPDATE memories SET message_uuids = ?, updated_at = ? WHERE id = ?",
                (json.dumps(grown), to_utc_text(self._clock.now()), memory_id))
        return True

    async def relabel_project(self, old: str, new: str) -> Relabelled:
        """Move every memory of project `old` to `new` (a renamed folder); how many moved."""
        if not old or not new or old == new:
            raise ValueError("give two different projects")
        async with self._write() as conn:
            cursor = await conn.execute(
                "UPDATE memories SET project = ? WHERE project = ?", (new, old))
            moved = cursor.rowcount
            await conn.execute("INSERT OR IGNORE INTO memory_projects (project) VALUES (?)",
                               (new,))
            ids = {row[0]: row[1] for row in await self._fetch_all(
                conn, "SELECT project, id FROM memory_projects WHERE project IN (?, ?)",
                (old, new))}
            if old in ids:
                # The chunks' scope token follows their project: re-index the moved ones.
                before, after = f"p{ids[old]}", f"p{ids[new]}"
                await conn.execute(
                    "INSERT INTO memory_chunks_fts (memory_chunks_fts, rowid, content, scope)"
                    " SELECT 'delete', seq, content, scope FROM memory_chunks WHERE scope = ?",
                    (before,))
                await conn.execute(
                    "INSERT INTO memory_chunks_fts (rowid, content, scope)"
                    " SELECT seq, content, ? FROM memory_chunks WHERE scope = ?",
                    (after, before))
                await conn.execute("UPDATE memory_chunks SET scope = ? WHERE scope = ?",
                                   (after, before))
        log.info("memory_project_relabelled", moved=moved)
        return Relabelled(moved)

    async def forgotten_scopes(self) -> list[ForgottenScope]:
        """The sessions and projects forgotten here (`memoryd memory copy` carries them)."""
        async with self._read() as conn:
            rows = await self._fetch_all(
                conn, "SELECT * FROM forgotten_scopes ORDER BY kind, value", ())
        return [ForgottenScope(r["kind"], r["value"], from_utc_text(r["forgotten_at"]))
                for r in rows]

    async def import_forgotten_scopes(self, scopes: Iterable[ForgottenScope]) -> int:
        """Keep scopes forgotten in another store forgotten here too; how many were new."""
        added = 0
        async with self._write() as conn:
            for scope in scopes:
                cur = await conn.execute(
                    "INSERT INTO forgotten_scopes (kind, value, forgotten_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (kind, value) DO UPDATE"
                    " SET forgotten_at = MAX(forgotten_at, excluded.forgotten_at)"
                    " WHERE excluded.forgotten_at > forgotten_at",
                    (scope.kind, scope.value, to_utc_text(scope.at)))
                added += max(cur.rowcount, 0)
                await cur.close()
        return added

    async def _insert_many(self, conn: aiosqlite.Connection, rows: list[tuple[Any, ...]]) -> int:
        if not rows:
            return 0
        cur = await conn.executemany(INSERT_ONCE, rows)
        count = max(cur.rowcount, 0)
        await cur.close()
        return count

    async def release_memory(self) -> None:
        if self._conn is not None:
            await shrink_memory(self._conn)

    async def close(self) -> None:
        if self._index_loading is not None and not self._index_loading.done():
            self._index_loading.cancel()
            with suppress(asyncio.CancelledError, BackendError):
                await self._index_loading
        conn, self._conn = self._conn, None
        if conn is not None:
            with self._translated():
                await conn.close()


def _add_rows(index: VectorIndex, rows: Sequence[sqlite3.Row], dimensions: int) -> None:
    import numpy as np

    vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
    index.add([r[0] for r in rows], [r[1] for r in rows], vectors.reshape(len(rows), dimensions))
