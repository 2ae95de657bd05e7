"""Rows written in one step on the store's thread: chunk rows and conversation-segment
batches, in statements sized to SQLite's variable limit, and chunks for memories without."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from typing import Any

import aiosqlite
import orjson

from memoryd.errors import BackendError
from memoryd.memory import writes
from memoryd.memory.backends.sqlite.forgetting import FORGOTTEN, forgotten, forgotten_params
from memoryd.memory.backends.sqlite.rows import (
    COLUMNS,
    INSERT_ONCE,
    insert_many,
    json_list,
    row_memory,
    row_params,
    values,
)
from memoryd.memory.backends.sqlite.schema import BACKEND_NAME
from memoryd.memory.export_format import record_to_memory
from memoryd.memory.models import ConversationSegment, Memory
from memoryd.memory.recall.chunks import chunk_memory
from memoryd.sqlite import call_on_connection, immediate_transaction

IMPORT_BATCH_SIZE = 500

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


def chunk_spans(memory: Memory) -> list[ChunkSpan]:
    return [(c.ordinal, c.start, c.end, c.text, c.first_index, c.last_index,
             json_list(c.message_uuids))
            for c in chunk_memory(memory.content, memory.type, memory.provenance)]


class PreparedSegments(tuple[ConversationSegment, ...]):
    """Segments with the rows that save them (`prepare_conversation_segments`), made by
    one backend at one moment."""

    owner: object
    now: datetime
    rows: list[tuple[ConversationSegment, Memory, list[ChunkSpan]]]

    def __new__(cls, segments: Sequence[ConversationSegment], *, owner: object,
                now: datetime, rows: list[tuple[ConversationSegment, Memory, list[ChunkSpan]]]
                ) -> PreparedSegments:
        prepared = super().__new__(cls, segments)
        prepared.owner, prepared.now, prepared.rows = owner, now, rows
        return prepared


def _insert_chunks_of(conn: sqlite3.Connection, seq: int, memory: Memory) -> None:
    _insert_chunk_rows(conn, [(seq, memory.project, span) for span in chunk_spans(memory)])


async def insert_chunks(conn: aiosqlite.Connection, seq: int, memory: Memory) -> None:
    await call_on_connection(conn, _insert_chunks_of, seq, memory)


async def insert_once(conn: aiosqlite.Connection, memory: Memory) -> bool:
    """Store `memory` with its chunks unless its id is stored or hard-forgotten."""
    cur = await conn.execute(INSERT_ONCE, (*row_params(memory), memory.id))
    created = cur.rowcount == 1
    seq = cur.lastrowid
    await cur.close()
    if created and seq is not None:
        await insert_chunks(conn, seq, memory)
    return created


async def _insert_rows(conn: aiosqlite.Connection, rows: list[tuple[Any, ...]]) -> int:
    """INSERT_ONCE for many (`row_params` and the id each), without chunks: how many new."""
    if not rows:
        return 0
    cur = await conn.executemany(INSERT_ONCE, rows)
    count = max(cur.rowcount, 0)
    await cur.close()
    return count


def _tail_key(segment: ConversationSegment) -> list[Any]:
    return [segment.id, segment.session_id, segment.session_external_id, segment.source,
            segment.first_index, segment.last_index]


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


def save_segments(conn: sqlite3.Connection,
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
                FORGOTTEN, forgotten_params(memory)).fetchall())
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


async def chunk_missing(conn: aiosqlite.Connection) -> int:
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
            await insert_chunks(conn, row["seq"], row_memory(row))
    except BaseException:
        if own:
            with suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
        raise
    if own:
        await conn.execute("COMMIT")
    return len(rows)


async def import_records(conn: aiosqlite.Connection,
                         records: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """Export records stored (masked again, forgotten scopes kept out), in batches, then
    chunked: how many records were read, and how many memories were new."""
    created = 0
    number = 0
    batch: list[tuple[Any, ...]] = []
    for number, record in enumerate(records, 1):
        try:
            memory = record_to_memory(record)
        except ValueError as exc:
            raise BackendError(f"import record {number}: {exc}",
                               backend=BACKEND_NAME) from exc
        # An export from elsewhere (or an older memoryd) may hold what masks now catch.
        memory = writes.imported(memory)
        if await forgotten(conn, memory):
            continue  # an old export must not bring a forgotten session back
        batch.append((*row_params(memory), memory.id))
        if len(batch) >= IMPORT_BATCH_SIZE:
            created += await _insert_rows(conn, batch)
            batch = []
    created += await _insert_rows(conn, batch)
    await chunk_missing(conn)
    return number, created
