"""Forgetting in the embedded store: versions tombstoned or deleted with an audit row
each, the sessions and projects forgotten (what they bring later is never saved), and the
deletion records and forgotten scopes carried over from another store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import aiosqlite
import structlog

from memoryd.memory.backends.sqlite.rows import fetch_all
from memoryd.memory.export_format import from_utc_text, to_utc_text
from memoryd.memory.models import DeletionMode, DeletionRecord, ForgottenScope, Memory, MemoryType
from memoryd.memory.policy import began

log = structlog.get_logger("memoryd.memory.sqlite")

FORGOTTEN = (
    "SELECT 1 FROM forgotten_scopes WHERE (kind = 'session' AND value = :external)"
    " OR (kind = 'session_id' AND value = :session_id)"
    " OR (kind = 'project' AND value = :project AND forgotten_at >= :began) LIMIT 1")


def forgotten_params(memory: Memory) -> dict[str, Any]:
    prov = memory.provenance
    return {"external": prov.session_external_id,
            "session_id": None if prov.session_id is None else str(prov.session_id),
            "project": memory.project, "began": to_utc_text(began(memory))}


def log_not_saved(memory: Memory) -> None:
    log.info("memory_not_saved_forgotten", memory_id=memory.id,
             session_external_id=memory.provenance.session_external_id,
             project=memory.project)


def forget_filter(*, session_id: int | None, session_external_id: str | None,
                  project: str | None, memory_ids: Sequence[str] | None,
                  as_of: datetime | None) -> tuple[str, list[Any]]:
    """`forget_where`'s selection: the WHERE clause and its parameters."""
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
    return where, params


async def remember_forgotten(conn: aiosqlite.Connection, scopes: set[tuple[str, str]], *,
                             at: datetime) -> None:
    """Forgetting sticks (`policy`): what a session or project later brings (a later
    segment, a re-ingested transcript, a re-sync, an import) is never saved."""
    if scopes:
        await conn.executemany(
            "INSERT INTO forgotten_scopes (kind, value, forgotten_at) VALUES (?, ?, ?)"
            " ON CONFLICT (kind, value) DO UPDATE"
            " SET forgotten_at = MAX(forgotten_at, excluded.forgotten_at)",
            [(kind, value, to_utc_text(at)) for kind, value in scopes])


async def forgotten(conn: aiosqlite.Connection, memory: Memory) -> bool:
    """Whether `memory` (auto-saved or imported) belongs to a forgotten session, or to a
    conversation of a forgotten project that began before the project was forgotten."""
    rows = await fetch_all(conn, FORGOTTEN, forgotten_params(memory))
    if rows:
        log_not_saved(memory)
    return bool(rows)


async def delete_versions(conn: aiosqlite.Connection, rows: Sequence[sqlite3.Row], *,
                          hard: bool, now: datetime) -> int:
    """Tombstone (soft) or delete (hard) these versions with an audit row each."""
    targets = list(rows) if hard else [r for r in rows if r["deleted_at"] is None]
    if not targets:
        return 0
    at = to_utc_text(now)
    mode = DeletionMode.HARD if hard else DeletionMode.SOFT
    await conn.executemany(
        "INSERT INTO memory_deletions (memory_id, mode, type, project, session_id,"
        " session_external_id, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(r["id"], mode.value, r["type"], r["project"], r["session_id"],
          r["session_external_id"], at) for r in targets],
    )
    sql = ("DELETE FROM memories WHERE id = ?" if hard
           else "UPDATE memories SET deleted_at = ?, updated_at = ? WHERE id = ?")
    await conn.executemany(sql, [(r["id"],) if hard else (at, at, r["id"])
                                 for r in targets])
    return len(targets)


async def deletion_records(conn: aiosqlite.Connection,
                           memory_id: str | None) -> list[DeletionRecord]:
    sql = "SELECT * FROM memory_deletions"
    params: tuple[Any, ...] = ()
    if memory_id is not None:
        sql += " WHERE memory_id = ?"
        params = (memory_id,)
    rows = await fetch_all(conn, sql + " ORDER BY seq", params)
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


async def import_deletions(conn: aiosqlite.Connection,
                           records: Iterable[DeletionRecord]) -> int:
    """Copy deletion records from another store (`memoryd memory copy`); a hard one also
    keeps its id from ever being stored here. Returns how many were new."""
    added = 0
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


async def forgotten_scopes(conn: aiosqlite.Connection) -> list[ForgottenScope]:
    """The sessions and projects forgotten here (`memoryd memory copy` carries them)."""
    rows = await fetch_all(conn, "SELECT * FROM forgotten_scopes ORDER BY kind, value", ())
    return [ForgottenScope(r["kind"], r["value"], from_utc_text(r["forgotten_at"]))
            for r in rows]


async def import_forgotten_scopes(conn: aiosqlite.Connection,
                                  scopes: Iterable[ForgottenScope]) -> int:
    """Keep scopes forgotten in another store forgotten here too; how many were new."""
    added = 0
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


async def scrub(conn: aiosqlite.Connection) -> None:
    """Leave no trace of hard-deleted content in the FTS index or the WAL."""
    await conn.execute("INSERT INTO memory_chunks_fts (memory_chunks_fts) VALUES ('optimize')")
    # Its result row read: a statement left open would make the next
    # COMMIT on this connection fail ("SQL statements in progress").
    async with conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cursor:
        await cursor.fetchall()
