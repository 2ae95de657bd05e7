"""Rows of the shared tables <-> values: the columns (the owner's first) and the inserts
of memories and their chunks, the correction chain, and rows read back as Memory and
RecallResult values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memoryd.memory.backends.postgres.connection import fetch_all
from memoryd.memory.backends.postgres.owner import Owner, agent_of
from memoryd.memory.models import Memory, MemoryType, Provenance, RecallResult
from memoryd.memory.recall.chunks import chunk_memory

if TYPE_CHECKING:
    import psycopg

COLUMNS = (
    "owner_user", "owner_agent", "origin", "id", "type", "content", "importance", "project",
    "tags", "tags_text", "session_id", "session_external_id", "source", "source_project",
    "first_index", "last_index", "message_uuids", "started_at", "ended_at", "created_at",
    "updated_at", "supersedes", "superseded_by", "reason", "deleted_at", "access_count",
    "last_accessed_at", "private_to",
)
INSERT_ONCE = (
    f"INSERT INTO memories ({', '.join(COLUMNS)}) "
    f"SELECT {', '.join('%s' for _ in COLUMNS)} "
    "WHERE NOT EXISTS (SELECT 1 FROM memory_deletions WHERE owner_user = %s"
    " AND memory_id = %s AND mode = 'hard') "
    "ON CONFLICT (owner_user, id) DO NOTHING RETURNING seq"
)
INSERT_CHUNK = (
    "INSERT INTO memory_chunks (memory_seq, ordinal, start_char, end_char, content, first_index,"
    " last_index, message_uuids, owner_user, project)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
CHAIN = """
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
CHAIN_FOR_UPDATE = CHAIN + " FOR UPDATE"


def utc(value: datetime | None) -> datetime | None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValueError(f"naive datetime {value.isoformat()}: pass a timezone-aware one")
    return value


def row_params(owner: Owner, memory: Memory) -> tuple[Any, ...]:
    p = memory.provenance
    return (
        owner.user, agent_of(memory), owner.origin, memory.id,
        memory.type.value, memory.content, memory.importance, memory.project,
        list(memory.tags), " ".join(memory.tags), p.session_id, p.session_external_id,
        p.source, p.project, p.first_index, p.last_index, list(p.message_uuids),
        utc(p.started_at), utc(p.ended_at), utc(memory.created_at),
        utc(memory.updated_at), memory.supersedes, memory.superseded_by, memory.reason,
        utc(memory.deleted_at), memory.access_count, utc(memory.last_accessed_at),
        memory.private_to, owner.user, memory.id,
    )


async def insert_once(conn: psycopg.AsyncConnection[Any], owner: Owner, memory: Memory) -> bool:
    rows = await fetch_all(conn, INSERT_ONCE, row_params(owner, memory))
    if not rows:
        return False
    await insert_chunks(conn, owner, rows[0]["seq"], memory)
    return True


async def insert_chunks(conn: psycopg.AsyncConnection[Any], owner: Owner, seq: int,
                        memory: Memory) -> None:
    chunks = chunk_memory(memory.content, memory.type, memory.provenance)
    async with conn.cursor() as cur:
        await cur.executemany(INSERT_CHUNK, [
            (seq, c.ordinal, c.start, c.end, c.text, c.first_index, c.last_index,
             list(c.message_uuids), owner.user, memory.project) for c in chunks])


async def insert_many(conn: psycopg.AsyncConnection[Any], owner: Owner,
                      memories: Sequence[Memory]) -> int:
    """`insert_once` for many, in two round trips (rows, then their chunks)."""
    if not memories:
        return 0
    seqs: list[tuple[int, Memory]] = []
    async with conn.cursor() as cur:
        await cur.executemany(INSERT_ONCE, [row_params(owner, m) for m in memories],
                              returning=True)
        for memory in memories:
            row = await cur.fetchone()
            if row is not None:
                seqs.append((row["seq"], memory))
            if not cur.nextset():
                break
        await cur.executemany(INSERT_CHUNK, [
            (seq, c.ordinal, c.start, c.end, c.text, c.first_index, c.last_index,
             list(c.message_uuids), owner.user, m.project) for seq, m in seqs
            for c in chunk_memory(m.content, m.type, m.provenance)])
    return len(seqs)


def row_provenance(row: Mapping[str, Any]) -> Provenance:
    return Provenance(
        session_id=row["session_id"], session_external_id=row["session_external_id"],
        source=row["source"], project=row["source_project"],
        first_index=row["first_index"], last_index=row["last_index"],
        message_uuids=tuple(row["message_uuids"] or ()),
        started_at=row["started_at"], ended_at=row["ended_at"])


def row_memory(row: Mapping[str, Any]) -> Memory:
    return Memory(
        id=row["id"], content=row["content"], type=MemoryType(row["type"]),
        importance=float(row["importance"]), project=row["project"],
        tags=tuple(row["tags"] or ()), provenance=row_provenance(row),
        created_at=row["created_at"], updated_at=row["updated_at"],
        superseded_by=row["superseded_by"], supersedes=row["supersedes"],
        reason=row["reason"], deleted_at=row["deleted_at"],
        access_count=int(row["access_count"]), last_accessed_at=row["last_accessed_at"],
        private_to=row["private_to"])


def recall_result(row: Mapping[str, Any], score: float, *, relevance: float = 1.0,
                  chunks: Sequence[Mapping[str, Any]] = (),
                  similarity: float | None = None, session_matches: int = 1) -> RecallResult:
    provenance = row_provenance(row)
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
