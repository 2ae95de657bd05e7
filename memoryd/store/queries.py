"""Read-only queries behind `status`, `sessions` and `show`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.forgotten import VISIBLE
from memoryd.store.sessions import SHOWN_STATUS

SESSION_COLUMNS = (
    "id, source, external_id, parent_session_id, project, transcript_path, status, started_at,"
    " last_message_at, memory_sync_index, message_count, summary_markdown"
)


def _shown(stale_before: datetime | None) -> tuple[str, list[Any]]:
    """The status column to show and its parameters: as stored, or as the lifecycle check
    would leave it at `stale_before` (so no daemon is needed for a true status)."""
    if stale_before is None:
        return "status", []
    return SHOWN_STATUS, [utc_text(stale_before)]


def _session_dict(row: aiosqlite.Row) -> dict[str, Any]:
    data = dict(row)
    data["status"] = data.pop("shown_status", data.get("status"))
    data["unsynced_messages"] = max(0, data["message_count"] - data["memory_sync_index"])
    return data


async def list_sessions(
    conn: aiosqlite.Connection, *, status: str | None = None, source: str | None = None,
    stale_before: datetime | None = None,
) -> list[dict[str, Any]]:
    """Every session, newest first; `stale_before`: statuses as the lifecycle check would
    leave them then (see `_shown`)."""
    shown, shown_params = _shown(stale_before)
    where: list[str] = []
    params: list[Any] = list(shown_params)
    if status:
        where.append(f"{shown} = ?")
        params += [*shown_params, status]
    if source:
        where.append("source = ?")
        params.append(source)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    async with conn.execute(
        # Newest conversation first; a session with no message yet (a file of headers
        # only) after them all, not first for having been found a moment ago.
        f"SELECT {SESSION_COLUMNS}, {shown} AS shown_status FROM sessions{clause}"
        " ORDER BY message_count = 0, COALESCE(last_message_at, created_at) DESC, id DESC",
        params,
    ) as cursor:
        return [_session_dict(row) for row in await cursor.fetchall()]


#: No agent's session id is longer; a longer reference matches nothing (and a LIKE
#: pattern of 100 KB is more than SQLite accepts).
MAX_SESSION_REF = 512
MAX_ROWID = 2**63 - 1


def nest_subagents(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sessions as people think of them: a subagent's session is not a row of its own but
    counted on its parent's (`subagents`); one whose parent is not among `rows` stays."""
    present = {row["id"] for row in rows}
    counts: dict[int, int] = {}
    for row in rows:
        parent = row.get("parent_session_id")
        if parent is not None and parent in present:
            counts[parent] = counts.get(parent, 0) + 1
    nested = [row for row in rows if row.get("parent_session_id") not in present]
    for row in nested:
        row["subagents"] = counts.get(row["id"], 0)
    return nested


async def subagent_sessions(conn: aiosqlite.Connection, session_id: int,
                            stale_before: datetime | None = None) -> list[dict[str, Any]]:
    """The sessions of a session's subagents, oldest first."""
    shown, shown_params = _shown(stale_before)
    async with conn.execute(
        f"SELECT {SESSION_COLUMNS}, {shown} AS shown_status FROM sessions"
        " WHERE parent_session_id = ? ORDER BY COALESCE(started_at, created_at), id",
        (*shown_params, session_id),
    ) as cursor:
        return [_session_dict(row) for row in await cursor.fetchall()]


async def find_session(conn: aiosqlite.Connection, ref: str,
                       stale_before: datetime | None = None) -> dict[str, Any] | None:
    """A session by its numeric id, its external id, or a unique prefix of the external id
    (`stale_before`: its status as `list_sessions` shows it)."""
    shown, shown_params = _shown(stale_before)
    if not ref or len(ref) > MAX_SESSION_REF:
        return None
    queries: list[tuple[str, tuple[Any, ...]]] = []
    if ref.isascii() and ref.isdigit() and int(ref) <= MAX_ROWID:
        queries.append(("id = ?", (int(ref),)))
    queries.append(("external_id = ?", (ref,)))
    queries.append(("external_id LIKE ? ESCAPE '\\'", (_like_prefix(ref),)))
    for clause, params in queries:
        async with conn.execute(
            f"SELECT {SESSION_COLUMNS}, {shown} AS shown_status FROM sessions WHERE {clause}"
            " ORDER BY id LIMIT 2", (*shown_params, *params)
        ) as cursor:
            rows = list(await cursor.fetchall())
        if len(rows) == 1:
            return _session_dict(rows[0])
    return None


def _like_prefix(text: str) -> str:
    return _escape_like(text) + "%"


async def session_messages(
    conn: aiosqlite.Connection, session_id: int, *, limit: int | None = None, offset: int = 0
) -> list[dict[str, Any]]:
    async with conn.execute(
        "SELECT message_index, role, kind, content, tool_name, tool_input, uuid, timestamp,"
        " is_sidechain, byte_offset FROM session_messages WHERE session_id = ?"
        " ORDER BY message_index LIMIT ? OFFSET ?",
        (session_id, -1 if limit is None else limit, offset),
    ) as cursor:
        rows = await cursor.fetchall()
    return [{**dict(r), "is_sidechain": bool(r["is_sidechain"])} for r in rows]


async def session_summaries(conn: aiosqlite.Connection, session_id: int) -> list[dict[str, Any]]:
    async with conn.execute(
        "SELECT kind, content, byte_offset FROM session_summaries WHERE session_id = ? ORDER BY id",
        (session_id,),
    ) as cursor:
        return [dict(r) for r in await cursor.fetchall()]


async def totals(conn: aiosqlite.Connection,
                 stale_before: datetime | None = None) -> dict[str, Any]:
    async def one(sql: str) -> Any:
        async with conn.execute(sql) as cursor:
            row = await cursor.fetchone()
        return row[0] if row else None

    by_source: dict[str, dict[str, int]] = {}
    async with conn.execute(
        "SELECT source, COUNT(*), COALESCE(SUM(message_count), 0),"
        " COALESCE(SUM(MAX(message_count - memory_sync_index, 0)), 0)"
        " FROM sessions GROUP BY source"
    ) as cursor:
        for source, sessions, messages, unsynced in await cursor.fetchall():
            by_source[source] = {"sessions": sessions, "messages": messages,
                                 "unsynced_messages": unsynced, "files": 0}
    async with conn.execute(
        "SELECT source, COUNT(*), SUM(missing) FROM session_message_state GROUP BY source"
    ) as cursor:
        for source, files, missing in await cursor.fetchall():
            entry = by_source.setdefault(source, {"sessions": 0, "messages": 0,
                                                  "unsynced_messages": 0, "files": 0})
            entry["files"] = files
            entry["missing_files"] = missing or 0
    statuses: dict[str, int] = {}
    shown, shown_params = _shown(stale_before)
    async with conn.execute(f"SELECT {shown}, COUNT(*) FROM sessions GROUP BY 1",
                            shown_params) as cursor:
        for status, count in await cursor.fetchall():
            statuses[status] = count
    return {
        "sessions": await one("SELECT COUNT(*) FROM sessions"),
        "messages": await one("SELECT COUNT(*) FROM session_messages"),
        "rejected_lines": await one("SELECT COUNT(*) FROM rejected_lines"),
        "skipped_lines": await one("SELECT COALESCE(SUM(lines_skipped), 0)"
                                   " FROM session_message_state"),
        "unsynced_messages": await one(
            "SELECT COALESCE(SUM(MAX(message_count - memory_sync_index, 0)), 0) FROM sessions"),
        "sessions_by_status": statuses,
        "sources": by_source,
    }


async def file_offsets(conn: aiosqlite.Connection) -> list[tuple[str, str, int, bool]]:
    async with conn.execute(
        "SELECT path, source, last_byte_offset, head_hash = 'document'"
        " FROM session_message_state WHERE missing = 0"
    ) as cursor:
        return [(r[0], r[1], r[2], bool(r[3])) for r in await cursor.fetchall()]


async def search_messages(
    conn: aiosqlite.Connection,
    words: Sequence[str],
    *,
    project: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int = 20,
    offset: int = 0,
    hidden_sources: Sequence[str] = (),
    max_chars: int = 4000,
) -> list[dict[str, Any]]:
    """Stored messages holding every one of `words` (case-insensitive), newest first,
    leaving out sessions of the agents in `hidden_sources` and everything forgotten
    (`store.forgotten`). The text is as stored: the caller masks it.

    A scan, not an index: it reads the messages of the selected time span and
    project, which is what "what did I run last Tuesday in this repo?" asks for.
    """
    where = [VISIBLE]
    params: list[Any] = []
    for word in words:
        where.append("m.content LIKE ? ESCAPE '\\'")
        params.append("%" + _escape_like(word) + "%")
    if project is not None:
        where.append("s.project = ?")
        params.append(project)
    if since is not None:
        where.append("m.timestamp >= ?")
        params.append(since)
    if until is not None:
        where.append("m.timestamp < ?")
        params.append(until)
    if hidden_sources:
        where.append(f"s.source NOT IN ({', '.join('?' for _ in hidden_sources)})")
        params.extend(hidden_sources)
    async with conn.execute(
        "SELECT s.id AS session_id, s.external_id, s.source, s.project, m.message_index,"
        " m.role, m.kind, m.tool_name, m.timestamp, substr(m.content, 1, ?) AS content"
        " FROM session_messages m JOIN sessions s ON s.id = m.session_id"
        f" WHERE {' AND '.join(where)} ORDER BY m.timestamp DESC, m.session_id, m.message_index"
        " LIMIT ? OFFSET ?",
        (max_chars, *params, limit, offset),
    ) as cursor:
        return [dict(r) for r in await cursor.fetchall()]


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def session_by_transcript(conn: aiosqlite.Connection, path: str) -> dict[str, Any] | None:
    """The session whose transcript is at `path` (the newest, if a file was replaced)."""
    async with conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM sessions WHERE transcript_path = ? ORDER BY id DESC"
        " LIMIT 1", (path,),
    ) as cursor:
        row = await cursor.fetchone()
    return _session_dict(row) if row is not None else None


async def messages_per_day(conn: aiosqlite.Connection,
                           since: str) -> list[tuple[str, str | None, int]]:
    """(UTC day, project, messages) for the messages written on or after `since` (ISO)."""
    async with conn.execute(
        "SELECT substr(m.timestamp, 1, 10) AS day, s.project, COUNT(*)"
        " FROM sessions s JOIN session_messages m ON m.session_id = s.id"
        # Only sessions active since then are read (a message's session was active when
        # the message was written), not every message ever stored.
        " WHERE COALESCE(s.last_message_at, s.created_at) >= ? AND m.timestamp >= ?"
        " GROUP BY day, s.project ORDER BY day, s.project", (since, since),
    ) as cursor:
        return [(r[0], r[1], int(r[2])) for r in await cursor.fetchall()]


async def recent_sessions(conn: aiosqlite.Connection, limit: int,
                          stale_before: datetime | None = None) -> list[dict[str, Any]]:
    """The `limit` sessions most recently active, newest first."""
    shown, shown_params = _shown(stale_before)
    async with conn.execute(
        f"SELECT {SESSION_COLUMNS}, {shown} AS shown_status FROM sessions"
        " ORDER BY COALESCE(last_message_at, created_at) DESC, id DESC LIMIT ?",
        (*shown_params, limit),
    ) as cursor:
        return [_session_dict(row) for row in await cursor.fetchall()]


async def unsynced_sessions_of(conn: aiosqlite.Connection, project: str, *,
                               exclude: str | None, limit: int,
                               max_messages: int) -> list[int]:
    """Sessions of `project` (or linked to it) with at most `max_messages` messages not yet
    saved to memory, most recently active first; never the agent session `exclude`."""
    async with conn.execute(
            "SELECT id FROM sessions WHERE message_count > memory_sync_index"
            " AND message_count - memory_sync_index <= ?"
            " AND (project = ? OR project IN"
            "      (SELECT old_path FROM project_links WHERE new_path = ?))"
            " AND (? IS NULL OR external_id IS NOT ?)"
            " ORDER BY COALESCE(last_ingested_at, last_message_at) DESC LIMIT ?",
            (max_messages, project, project, exclude, exclude, limit)) as cur:
        return [int(r[0]) for r in await cur.fetchall()]
