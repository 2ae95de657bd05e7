"""Stored memories changed in place: one live digest a session and one live observation
replacing another (supersession), text rewritten with its chunks, evidence grown, and
projects relabelled with their chunks' scope."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import aiosqlite
import structlog

from memoryd.memory import writes
from memoryd.memory.backends.sqlite.bulk import insert_chunks
from memoryd.memory.backends.sqlite.rows import fetch_all, row_memory
from memoryd.memory.export_format import to_utc_text
from memoryd.memory.models import Memory

log = structlog.get_logger("memoryd.memory.sqlite")

#: A session's live digests other than `:id`, the one covering the most messages last.
LIVE_DIGESTS = """
    SELECT id, last_index FROM memories
    WHERE type = 'session_digest' AND id != :id AND superseded_by IS NULL
      AND deleted_at IS NULL AND session_id IS :session_id
      AND session_external_id IS :external AND source IS :source
    ORDER BY COALESCE(last_index, -1), seq
"""


async def supersede_observation(conn: aiosqlite.Connection, new: Memory,
                                now: datetime) -> None:
    """`new` replaces the observation it names, if that is still a live observation;
    otherwise it replaces nothing."""
    cursor = await conn.execute(
        "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?"
        " AND type = 'observation' AND superseded_by IS NULL AND deleted_at IS NULL",
        (new.id, to_utc_text(now), new.supersedes))
    if cursor.rowcount == 0:
        await conn.execute("UPDATE memories SET supersedes = NULL WHERE id = ?", (new.id,))


async def supersede_digests(conn: aiosqlite.Connection, new: Memory, now: datetime) -> None:
    """One live digest a session: `new` supersedes the session's digests that cover no
    more messages than it does; a later one (an older version replayed from the outbox
    after a newer one landed) supersedes `new` instead."""
    p = new.provenance
    at = to_utc_text(now)
    live = await fetch_all(conn, LIVE_DIGESTS, {
        "id": new.id, "session_id": p.session_id, "external": p.session_external_id,
        "source": p.source})
    newer = [r for r in live if (r["last_index"] or -1) > (p.last_index or -1)]
    if newer:
        await conn.execute(
            "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
            (newer[-1]["id"], at, new.id))
        return
    older = [r["id"] for r in live]
    if not older:
        return
    marks = ",".join("?" * len(older))
    await conn.execute(
        f"UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id IN ({marks})",
        (new.id, at, *older))
    await conn.execute("UPDATE memories SET supersedes = ? WHERE id = ?",
                       (older[-1], new.id))
    log.debug("memory_digest_superseded", memory_id=new.id, superseded=older)


async def rewrite_content(conn: aiosqlite.Connection, memory_id: str, content: str,
                          now: datetime) -> bool:
    rows = await fetch_all(
        conn, "SELECT * FROM memories WHERE id = ? AND deleted_at IS NULL"
        " AND superseded_by IS NULL", (memory_id,))
    if not rows or rows[0]["content"] == content:
        return False
    seq = rows[0]["seq"]
    memory = replace(row_memory(rows[0]), content=content)
    # Deleting the chunks takes their index entries and vectors with them (triggers).
    await conn.execute("DELETE FROM memory_chunks WHERE memory_seq = ?", (seq,))
    await conn.execute("UPDATE memories SET content = ?, updated_at = ? WHERE seq = ?",
                       (content, to_utc_text(now), seq))
    await insert_chunks(conn, seq, memory)
    return True


async def add_evidence(conn: aiosqlite.Connection, memory_id: str,
                       message_uuids: Sequence[str], now: datetime) -> bool:
    rows = await fetch_all(
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
        (json.dumps(grown), to_utc_text(now), memory_id))
    return True


async def relabel_project(conn: aiosqlite.Connection, old: str, new: str) -> int:
    """Move every memory of project `old` to `new`, its chunks re-indexed; how many moved."""
    cursor = await conn.execute(
        "UPDATE memories SET project = ? WHERE project = ?", (new, old))
    moved = cursor.rowcount
    await conn.execute("INSERT OR IGNORE INTO memory_projects (project) VALUES (?)",
                       (new,))
    ids = {row[0]: row[1] for row in await fetch_all(
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
    return moved
