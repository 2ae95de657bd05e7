"""Retention of the raw archive: the text of old messages that memory already holds.

A message's text and raw line are cleared, never its row: the row's index and
dedupe key stay, so re-reading the transcript (a replaced or moved file) finds
the message stored and does not store it again, and the session's counts and
sync index stay true. Only messages of sessions whose every message reached
memory are cleared (nothing is lost), and none of a session under a legal hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.connection import transaction
from memoryd.store.holds import Holds

EXPIRED_KIND = "expired"
EXPIRED_TEXT = "[removed by retention]"
FORGOTTEN_TEXT = "[removed: forgotten at a person's request]"
REMOVED_SUMMARY = "[removed] "


def _eligible(before: datetime, holds: Holds) -> tuple[str, list[object]]:
    where = ["s.memory_sync_index >= s.message_count", "m.message_index < s.memory_sync_index",
             "m.kind != ?", "julianday(COALESCE(m.timestamp, s.last_ingested_at)) < julianday(?)"]
    params: list[object] = [EXPIRED_KIND, utc_text(before)]
    for column, values in (("s.project", holds.projects), ("s.external_id", holds.sessions),
                           ("s.id", holds.session_ids)):
        if values:
            where.append(f"({column} IS NULL OR {column} NOT IN"
                         f" ({','.join('?' for _ in values)}))")
            params.extend(sorted(values, key=str))
    return " AND ".join(where), params


async def expire_raw(conn: aiosqlite.Connection, before: datetime, holds: Holds, *,
                     dry_run: bool) -> tuple[int, int]:
    """Clear the messages written before `before`: (messages, sessions) cleared, or that
    would be with `dry_run`."""
    where, params = _eligible(before, holds)
    async with conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT m.session_id) FROM session_messages m"
            f" JOIN sessions s ON s.id = m.session_id WHERE {where}", params) as cur:
        row = await cur.fetchone()
    messages, sessions = (int(row[0]), int(row[1])) if row else (0, 0)
    if dry_run or not messages:
        return messages, sessions
    async with transaction(conn):
        await conn.execute(
            "UPDATE session_messages SET content = ?, raw = x'', tool_input = NULL, kind = ?"
            " WHERE id IN (SELECT m.id FROM session_messages m JOIN sessions s"
            f" ON s.id = m.session_id WHERE {where})",
            [EXPIRED_TEXT, EXPIRED_KIND, *params])
    return messages, sessions


async def clear_text(conn: aiosqlite.Connection, session_ids: Sequence[int] | None,
                     now: datetime) -> tuple[int, int, int]:
    """Inside the caller's transaction: the text of these sessions' (None: every)
    archived messages, summaries and rejected lines cleared, the rows kept. How many of
    each."""
    scope, params = ("", []) if session_ids is None else (
        f" AND session_id IN ({', '.join('?' for _ in session_ids)})", list(session_ids))
    cur = await conn.execute(
        "UPDATE session_messages SET content = ?, raw = x'', tool_input = NULL, kind = ?"
        f" WHERE (kind != ? OR content != ?){scope}",
        (FORGOTTEN_TEXT, EXPIRED_KIND, EXPIRED_KIND, FORGOTTEN_TEXT, *params))
    messages = max(cur.rowcount, 0)
    cur = await conn.execute(
        "UPDATE session_summaries SET content = ? || id,"
        " memory_synced_at = COALESCE(memory_synced_at, ?)"
        f" WHERE content NOT LIKE ? || '%'{scope}",
        (REMOVED_SUMMARY, utc_text(now), REMOVED_SUMMARY, *params))
    summaries = max(cur.rowcount, 0)
    where = "" if session_ids is None else f" WHERE id IN ({', '.join('?' for _ in params)})"
    await conn.execute(f"UPDATE sessions SET summary_markdown = NULL{where}", params)
    cur = await conn.execute(f"DELETE FROM rejected_lines WHERE 1{scope}", params)
    return messages, summaries, max(cur.rowcount, 0)


async def clear_everything(conn: aiosqlite.Connection, now: datetime) -> dict[str, int]:
    """Clear the text of every archived message, summary and rejected line (a person's
    right to be forgotten): rows that hold no text are kept, so nothing comes back when a
    transcript is read again. How many of each were cleared."""
    async with transaction(conn):
        messages, summaries, rejected = await clear_text(conn, None, now)
        async with conn.execute("SELECT COUNT(*) FROM sessions") as found:
            row = await found.fetchone()
    return {"messages": messages, "summaries": summaries, "rejected_lines": rejected,
            "sessions": int(row[0]) if row else 0}
