"""The raw archive's lifecycle: which sessions, and what is done to their stored messages.

memoryd keeps the transcripts' messages past the agents' own clean-up (Claude Code
deletes transcripts after 30 days), so it owns their lifecycle:

- `archive` copies a session's raw lines, as read, to a gzip file of its own
  (`<state_dir>/archive/<source>/<session>.jsonl.gz`, 0600), written atomically;
  the messages stay in the store.
- `mask` masks secrets, personal data and the configured extra patterns in the
  stored text and raw lines (which stay valid JSON).
- `clear` removes the text and raw line of messages that memory already holds
  (the row stays, so a re-read transcript stores nothing again).

The masking function is given by the caller: the store does not know the rules.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from memoryd.clock import utc_text
from memoryd.files import atomic_writer, make_dirs
from memoryd.store.connection import transaction
from memoryd.store.raw import EXPIRED_KIND

Mask = Callable[[str], str]
CLEARED_TEXT = "[removed: raw content deleted]"


async def select_sessions(conn: aiosqlite.Connection, *, session_id: int | None = None,
                          project: str | None = None,
                          before: datetime | None = None) -> list[dict[str, Any]]:
    """Sessions by id, by project, or whose last message is older than `before`
    (the filters given are AND-ed)."""
    where: list[str] = ["1"]
    params: list[object] = []
    if session_id is not None:
        where.append("id = ?")
        params.append(session_id)
    if project is not None:
        where.append("project = ?")
        params.append(project)
    if before is not None:
        where.append("julianday(COALESCE(last_message_at, last_ingested_at, created_at))"
                     " < julianday(?)")
        params.append(utc_text(before))
    async with conn.execute(
            "SELECT id, source, external_id, project, message_count, memory_sync_index"
            f" FROM sessions WHERE {' AND '.join(where)} ORDER BY id", params) as cur:
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


def _mask_json(value: Any, mask: Mask) -> Any:
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, list):
        return [_mask_json(v, mask) for v in value]
    if isinstance(value, dict):
        return {k: _mask_json(v, mask) for k, v in value.items()}
    return value


def mask_raw(raw: bytes, mask: Mask) -> bytes:
    """A raw transcript line with every string in it masked (still valid JSON)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return mask(raw.decode("utf-8", "replace")).encode()
    return json.dumps(_mask_json(record, mask), ensure_ascii=False,
                      separators=(",", ":")).encode()


async def mask_messages(conn: aiosqlite.Connection, session_ids: list[int], mask: Mask) -> int:
    """Mask the stored text of these sessions' messages; how many messages changed."""
    changed = 0
    for session_id in session_ids:
        async with conn.execute(
                "SELECT id, content, tool_input, raw FROM session_messages"
                " WHERE session_id = ? AND kind != ?", (session_id, EXPIRED_KIND)) as cur:
            rows = list(await cur.fetchall())
        updates = []
        for row_id, content, tool_input, raw in rows:
            raw_bytes = raw if isinstance(raw, bytes) else str(raw).encode()
            new = (mask(content), None if tool_input is None else mask(tool_input),
                   mask_raw(raw_bytes, mask) if raw_bytes else raw_bytes)
            if new != (content, tool_input, raw_bytes):
                updates.append((*new, row_id))
        if updates:
            async with transaction(conn):
                await conn.executemany(
                    "UPDATE session_messages SET content = ?, tool_input = ?, raw = ?"
                    " WHERE id = ?", updates)
            changed += len(updates)
    return changed


async def clear_messages(conn: aiosqlite.Connection, session_ids: list[int]) -> tuple[int, int]:
    """Remove the text of these sessions' messages that memory holds: (cleared, kept
    because they have not reached memory yet)."""
    cleared = kept = 0
    for session_id in session_ids:
        async with transaction(conn):
            cur = await conn.execute(
                "UPDATE session_messages SET content = ?, raw = x'', tool_input = NULL,"
                " kind = ? WHERE session_id = ? AND kind != ? AND message_index <"
                " (SELECT memory_sync_index FROM sessions WHERE id = ?)",
                (CLEARED_TEXT, EXPIRED_KIND, session_id, EXPIRED_KIND, session_id))
            cleared += max(cur.rowcount, 0)
            async with conn.execute(
                    "SELECT COUNT(*) FROM session_messages WHERE session_id = ? AND kind != ?",
                    (session_id, EXPIRED_KIND)) as found:
                row = await found.fetchone()
            kept += int(row[0]) if row else 0
    return cleared, kept


async def archive_session(conn: aiosqlite.Connection, session: dict[str, Any],
                          directory: Path) -> tuple[Path, int]:
    """Write the session's raw lines to its gzip file (replacing an older copy): the path
    and how many lines. Lines whose text was already removed are left out."""
    async with conn.execute(
            "SELECT raw FROM session_messages WHERE session_id = ? AND kind != ?"
            " ORDER BY message_index", (session["id"], EXPIRED_KIND)) as cur:
        lines = [r[0] if isinstance(r[0], bytes) else str(r[0]).encode()
                 for r in await cur.fetchall()]
    name = "".join(c if c.isalnum() or c in "-_." else "_"
                   for c in str(session["external_id"] or f"session-{session['id']}"))
    target = await asyncio.to_thread(_write_gzip, directory / session["source"],
                                     f"{name}.jsonl.gz", lines)
    return target, len(lines)


def _write_gzip(target_dir: Path, name: str, lines: list[bytes]) -> Path:
    """`lines` as a gzip file, 0600, through a temporary name fsynced then renamed."""
    make_dirs(target_dir)
    target = target_dir / name
    with atomic_writer(target, text=False) as raw_file, \
            gzip.GzipFile(fileobj=raw_file, mode="wb") as out:
        for line in lines:
            out.write(line.rstrip(b"\n") + b"\n")
    return target
