"""The embedded store's vectors: the in-memory index read in the background, the query's
embedding, and chunks still without a vector embedded (NumPy only with an embedder)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from typing import TYPE_CHECKING

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.errors import BackendError, EmbeddingLoading
from memoryd.memory.backends.sqlite.rows import fetch_all
from memoryd.memory.backends.sqlite.schema import BACKEND_NAME
from memoryd.memory.policy import VectorMark

if TYPE_CHECKING:  # NumPy is needed only with an embedder: keyword recall runs without it
    from memoryd.memory.backends.sqlite.vector_index import Floats, VectorIndex
    from memoryd.memory.embeddings.interface import Embedder

log = structlog.get_logger("memoryd.memory.sqlite")

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

#: The backend's lock held and errors translated: its `_read` or `_write`.
Connect = Callable[[], AbstractAsyncContextManager[aiosqlite.Connection]]


class ChunkVectors:
    """The vectors of one store's chunks from one embedder (None: keyword search only),
    read and written through the backend's lock (`read`, `write`)."""

    def __init__(self, embedder: Embedder | None, clock: Clock, *, read: Connect,
                 write: Connect) -> None:
        self._embedder = embedder
        self._clock = clock
        self._read = read
        self._write = write
        self.index: VectorIndex | None = None
        self._query_vectors_failing: str | None = None
        self._index_loading: asyncio.Future[VectorIndex] | None = None
        self._embed_lock = asyncio.Lock()
        self._vectors = VectorMark()

    async def query_vector(self, query: str) -> asyncio.Task[Floats | None] | None:
        """The query's embedding, under way; None without an embedder, or while the index
        is not in memory (recall is then by keywords)."""
        if self._embedder is None:
            return None
        # The index is loaded first (it reads through the lock that the search
        # holds). A remote embedder's answer is awaited while SQLite runs the keyword
        # channel; a local model runs first, alone: on a few cores the model and SQLite
        # slow each other down by more than overlapping them saves (at 100,000
        # memories on 2 cores: the embedding 7 -> 10 ms, the keyword SQL 2 -> 6 ms).
        # A large index still loading (a million vectors take tens of seconds) is not
        # waited for: until it is in memory, recall is by keywords.
        index = None
        try:
            index = await self.load_index(wait=INDEX_WAIT)
        except BackendError as exc:
            log.warning("memory_recall_keywords_only", error=str(exc))
        if index is None:
            return None
        query_vector = asyncio.create_task(self._query_vector(self._embedder, query))
        if self._embedder.on_this_machine:
            await asyncio.wait([query_vector])
        return query_vector

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

    async def load_index(self, *, wait: float | None = None) -> VectorIndex | None:
        """The in-memory vector index, read from `chunk_vectors` on first use (in the
        background, page by page). With `wait`, None when it is not ready by then."""
        if self._embedder is None:
            return None
        if self.index is not None:
            return self.index
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
                rows = await fetch_all(
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
        self.index = index
        log.info("vector_index_loaded", backend=BACKEND_NAME, vectors=len(index),
                 seconds=round(self._clock.monotonic() - started, 1))
        return index

    async def pending_embeddings(self) -> int:
        """How many chunks of live memories still wait for a vector (0 without an embedder)."""
        if self._embedder is None:
            return 0
        async with self._read() as conn:
            rows = await fetch_all(conn, f"SELECT COUNT(*) {_PENDING_FROM}",
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
            index = await self.load_index()
            now = self._clock.monotonic()
            after, full = self._vectors.start(now)
            async with self._read() as conn:
                # The newest seq first: a chunk added after it is read has a higher one.
                newest = (await fetch_all(
                    conn, "SELECT COALESCE(MAX(seq), 0) FROM memory_chunks"))[0][0]
                rows = await fetch_all(
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

    async def close(self) -> None:
        """Stop an index still loading."""
        if self._index_loading is not None and not self._index_loading.done():
            self._index_loading.cancel()
            with suppress(asyncio.CancelledError, BackendError):
                await self._index_loading


def _add_rows(index: VectorIndex, rows: Sequence[sqlite3.Row], dimensions: int) -> None:
    import numpy as np

    vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
    index.add([r[0] for r in rows], [r[1] for r in rows], vectors.reshape(len(rows), dimensions))
