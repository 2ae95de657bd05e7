"""Mapping between `Memory` values and rows of the `memories` table, and the chain query."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import aiosqlite
import orjson

from memoryd.memory.export_format import from_utc_text, opt_from_utc_text, opt_utc_text, to_utc_text
from memoryd.memory.models import Memory, MemoryType, Provenance, chain_order

COLUMNS = (
    "id", "type", "content", "importance", "project", "tags", "tags_text",
    "session_id", "session_external_id", "source", "source_project", "first_index",
    "last_index", "message_uuids", "started_at", "ended_at", "created_at", "updated_at",
    "supersedes", "superseded_by", "reason", "deleted_at", "access_count", "last_accessed_at",
    "private_to",
)
INSERT_ONCE = (
    f"INSERT INTO memories ({', '.join(COLUMNS)}) "
    f"SELECT {', '.join('?' for _ in COLUMNS)} "
    "WHERE NOT EXISTS (SELECT 1 FROM memory_deletions WHERE memory_id = ? AND mode = 'hard') "
    "ON CONFLICT (id) DO NOTHING"
)


def values(width: int, rows: int) -> str:
    """A `VALUES` list of `rows` rows of `width` parameters each."""
    row = f"({', '.join('?' * width)})"
    return f"VALUES {', '.join([row] * rows)}"


@functools.lru_cache(maxsize=16)
def insert_many(rows: int) -> str:
    """INSERT_ONCE for `rows` rows in one statement, bound as values: each row its
    position, then its `row_params` (the rows' seq follow the positions). One step
    outside Python's lock, and no text parsed again: rows given as JSON cost a
    `json_extract` a column, each parsing the whole row, content and all."""
    return (f"INSERT INTO memories ({', '.join(COLUMNS)}) SELECT "
            + ", ".join(f"column{i + 2}" for i in range(len(COLUMNS)))
            + f" FROM ({values(len(COLUMNS) + 1, rows)}) WHERE NOT EXISTS (SELECT 1 FROM"
            " memory_deletions WHERE memory_id = column2 AND mode = 'hard')"
            " ORDER BY column1 ON CONFLICT (id) DO NOTHING")


__all__ = ["CHAIN", "COLUMNS", "INSERT_ONCE", "chain_order", "fetch_all", "insert_many",
           "row_memory", "row_params", "row_provenance", "values"]

# The versions of one correction chain, walked both ways from one id.
CHAIN = """
WITH RECURSIVE
  back(id, supersedes) AS (
    SELECT id, supersedes FROM memories WHERE id = :id
    UNION SELECT m.id, m.supersedes FROM memories m JOIN back b ON m.id = b.supersedes),
  fwd(id, superseded_by) AS (
    SELECT id, superseded_by FROM memories WHERE id = :id
    UNION SELECT m.id, m.superseded_by FROM memories m JOIN fwd f ON m.id = f.superseded_by)
SELECT * FROM memories WHERE id IN (SELECT id FROM back UNION SELECT id FROM fwd)
"""


def json_list(values: Sequence[str]) -> str:
    """Strings as a JSON array. orjson: a fifth of the time json.dumps takes on a
    backfill's batches; json.dumps for what orjson refuses (a lone surrogate in a
    transcript's uuid)."""
    try:
        return orjson.dumps(tuple(values)).decode()
    except orjson.JSONEncodeError:
        return json.dumps(list(values), separators=(",", ":"))


def row_params(memory: Memory) -> tuple[Any, ...]:
    p = memory.provenance
    return (
        memory.id, memory.type.value, memory.content, memory.importance, memory.project,
        json_list(memory.tags), " ".join(memory.tags),
        p.session_id, p.session_external_id, p.source, p.project, p.first_index,
        p.last_index, json_list(p.message_uuids), opt_utc_text(p.started_at),
        opt_utc_text(p.ended_at), to_utc_text(memory.created_at), to_utc_text(memory.updated_at),
        memory.supersedes, memory.superseded_by, memory.reason, opt_utc_text(memory.deleted_at),
        memory.access_count, opt_utc_text(memory.last_accessed_at), memory.private_to,
    )


def row_provenance(row: sqlite3.Row) -> Provenance:
    return Provenance(
        session_id=row["session_id"],
        session_external_id=row["session_external_id"],
        source=row["source"],
        project=row["source_project"],
        first_index=row["first_index"],
        last_index=row["last_index"],
        message_uuids=tuple(json.loads(row["message_uuids"])),
        started_at=opt_from_utc_text(row["started_at"]),
        ended_at=opt_from_utc_text(row["ended_at"]),
    )


def row_memory(row: sqlite3.Row) -> Memory:
    return Memory(
        id=row["id"],
        content=row["content"],
        type=MemoryType(row["type"]),
        importance=row["importance"],
        project=row["project"],
        tags=tuple(json.loads(row["tags"])),
        provenance=row_provenance(row),
        created_at=from_utc_text(row["created_at"]),
        updated_at=from_utc_text(row["updated_at"]),
        superseded_by=row["superseded_by"],
        supersedes=row["supersedes"],
        reason=row["reason"],
        deleted_at=opt_from_utc_text(row["deleted_at"]),
        access_count=row["access_count"],
        last_accessed_at=opt_from_utc_text(row["last_accessed_at"]),
        private_to=row["private_to"],
    )


async def fetch_all(conn: aiosqlite.Connection, sql: str,
                    params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
    """Every row of `sql` on `conn`, its cursor closed."""
    async with conn.execute(sql, params) as cur:
        return list(await cur.fetchall())
