"""Committing what the tailer read: messages, summaries, rejected lines and the file's new
offset, all in one transaction, so a crash at any instant neither loses nor duplicates."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import Iterable, Sequence
from contextlib import suppress
from datetime import datetime

import aiosqlite
import structlog

from memoryd.clock import utc_text
from memoryd.store.batches import Batch, CommitResult, FileState, MessageRow, NewSession
from memoryd.store.connection import run_on_connection, transaction
from memoryd.store.forgotten import content_key

log = structlog.get_logger("memoryd.store")

_IN_CHUNK = 500


def _raw_value(raw: bytes) -> str | bytes:
    # Valid UTF-8 is stored as TEXT (readable with the sqlite3 shell); anything else as BLOB.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _create_session(conn: sqlite3.Connection, new: NewSession, now: str) -> int:
    cursor = conn.execute(
        "INSERT INTO sessions (source, external_id, parent_external_id, project,"
        " transcript_path, status, created_at, last_ingested_at)"
        " VALUES (?, ?, ?, ?, ?, 'active', ?, ?)",
        (new.source, new.external_id, new.parent_external_id, new.project,
         new.transcript_path, now, now),
    )
    session_id = cursor.lastrowid
    assert session_id is not None
    if new.parent_external_id:
        conn.execute(
            "UPDATE sessions SET parent_session_id = (SELECT id FROM sessions p"
            " WHERE p.source = ? AND p.external_id = ? AND p.id != ? ORDER BY p.id LIMIT 1)"
            " WHERE id = ?",
            (new.source, new.parent_external_id, session_id, session_id),
        )
    if new.external_id:
        conn.execute(
            "UPDATE sessions SET parent_session_id = ? WHERE parent_session_id IS NULL"
            " AND parent_external_id = ? AND source = ? AND id != ?",
            (session_id, new.external_id, new.source, session_id),
        )
    return session_id


def _existing_keys(
    conn: sqlite3.Connection, session_id: int, keys: Sequence[str]
) -> dict[str, tuple[int, bytes | str]]:
    found: dict[str, tuple[int, bytes | str]] = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), _IN_CHUNK):
        chunk = unique[start : start + _IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        for key, index, raw in conn.execute(
            f"SELECT dedupe_key, message_index, raw FROM session_messages"
            f" WHERE session_id = ? AND dedupe_key IN ({marks}) ORDER BY message_index",
            (session_id, *chunk),
        ):
            found.setdefault(key, (index, raw))
    return found


def _row(session_id: int, index: int, row: MessageRow) -> tuple[object, ...]:
    m = row.message
    return (session_id, index, m.role, m.kind, m.content, m.tool_name, m.tool_input, m.uuid,
            m.timestamp, int(m.is_sidechain), _raw_value(row.raw), row.byte_offset,
            row.dedupe_key, content_key(m.role, m.kind, m.content, m.tool_name, m.tool_input))


def _last_copies(rows: Iterable[MessageRow]) -> list[MessageRow]:
    """Rows with a repeated key collapse to the last copy, at the first copy's place."""
    order: dict[str, MessageRow] = {}
    for row in rows:
        order[row.dedupe_key] = row
    return list(order.values())


async def commit_batch(conn: aiosqlite.Connection, batch: Batch, now: datetime) -> CommitResult:
    """Store `batch` and the file's new offset in one transaction."""
    return await (await submit_batch(conn, batch, now))


async def submit_batch(
    conn: aiosqlite.Connection, batch: Batch, now: datetime
) -> asyncio.Task[CommitResult]:
    """Write `batch` in a transaction, then start its COMMIT; the returned task ends when
    it is durable. Meanwhile the caller may parse the next batch: SQLite writes the pages
    (and any checkpoint) inside COMMIT without Python's lock. The rows themselves are
    inserted while the caller waits here, since binding them needs that lock (two
    threads taking turns at it row by row cost more than the overlap gains).

    Both steps are queued on the connection's thread at once, so nothing can come
    between them; the caller must not touch the batch or its state until the task ends.
    """
    written: list[CommitResult] = []
    write = asyncio.ensure_future(run_on_connection(conn, _write, batch, utc_text(now), written))
    commit = asyncio.ensure_future(run_on_connection(conn, _commit_written, written))
    await asyncio.sleep(0)  # both reach the connection's queue, in this order
    try:
        await asyncio.shield(write)
    except BaseException:
        commit.add_done_callback(discard_outcome)
        raise
    return commit


def discard_outcome(task: asyncio.Task[CommitResult]) -> None:
    """A done-callback for a commit whose outcome nobody will wait for."""
    if not task.cancelled():
        task.exception()


class _NotWritten(sqlite3.Error):
    """The write before this COMMIT failed (and rolled back): nothing to commit."""


def _commit_written(conn: sqlite3.Connection, written: list[CommitResult]) -> CommitResult:
    if not written or not conn.in_transaction:
        raise _NotWritten("the batch was not written")
    try:
        conn.execute("COMMIT")
    except BaseException:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    return written[0]


def _write(conn: sqlite3.Connection, batch: Batch, now_text: str,
           written: list[CommitResult]) -> None:
    """Everything of `batch` inside an open transaction (`_commit_written` ends it)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        written.append(_write_rows(conn, batch, now_text))
    except BaseException:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def _record_rewinds(conn: sqlite3.Connection, session_id: int,
                    rewinds: list[tuple[str, int]], now_text: str) -> None:
    """Each rewind as the first message it discards and the line it was read at: a message
    from there on whose stored line comes before the rewind's is discarded (one written
    again after it lives again, as the agent reads its own file). A rewind to a message
    never stored (one only a checkpoint named) discards nothing here. The session's digest
    is built again when it had read past the rewind's message."""
    for uuid, offset in rewinds:
        found = conn.execute(
            "SELECT MIN(message_index) FROM session_messages WHERE session_id = ?"
            " AND dedupe_key = ?", (session_id, uuid)).fetchone()
        if found is None or found[0] is None:
            log.info("rewind_target_unknown", session_id=session_id, byte_offset=offset)
            continue
        conn.execute(
            "INSERT OR IGNORE INTO session_rewinds (session_id, first_index, byte_offset,"
            " recorded_at) VALUES (?, ?, ?, ?)", (session_id, int(found[0]), offset, now_text))
        conn.execute("UPDATE sessions SET digest_index = 0 WHERE id = ? AND digest_index > ?",
                     (session_id, int(found[0])))


def _write_rows(conn: sqlite3.Connection, batch: Batch, now_text: str) -> CommitResult:
    state = batch.state
    if batch.new_session is not None:
        state.session_id = _create_session(conn, batch.new_session, now_text)
    session_id = state.session_id
    found = conn.execute(
        "SELECT message_count FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    next_index = int(found[0]) if found else 0

    rows = batch.messages
    updates: list[tuple[object, ...]] = []
    duplicates = 0
    if rows and (state.dedupe or batch.replaces_by_id):
        rows, updates, duplicates = _new_and_changed(conn, session_id, batch)
    inserts = [_row(session_id, next_index + i, row) for i, row in enumerate(rows)]
    if inserts:
        conn.executemany(
            "INSERT INTO session_messages (session_id, message_index, role, kind, content,"
            " tool_name, tool_input, uuid, timestamp, is_sidechain, raw, byte_offset,"
            " dedupe_key, content_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            inserts,
        )
    updated = len(updates)
    if updates:
        conn.executemany(
            "UPDATE session_messages SET role = ?, kind = ?, content = ?, tool_name = ?,"
            " tool_input = ?, uuid = ?, timestamp = ?, is_sidechain = ?, raw = ?,"
            " byte_offset = ?, dedupe_key = ?, content_key = ? WHERE session_id = ?"
            " AND message_index = ?",
            updates,
        )
    count = next_index + len(inserts)
    _update_session(conn, session_id, batch, rows, count=count, inserted=len(inserts),
                    updated=updated, now_text=now_text)
    _record_beside(conn, session_id, batch, now_text)
    state.last_message_index = count - 1
    _save_state(conn, state, now_text, batch)
    return CommitResult(session_id, len(inserts), updated, duplicates)


def _new_and_changed(conn: sqlite3.Connection, session_id: int, batch: Batch,
                     ) -> tuple[list[MessageRow], list[tuple[object, ...]], int]:
    """The batch's rows not stored yet; the updates of stored ones a rewritten file
    changed (`replaces_by_id`); and how many were stored already as they are."""
    rows = _last_copies(batch.messages) if batch.replaces_by_id else batch.messages
    existing = _existing_keys(conn, session_id, [r.dedupe_key for r in rows])
    fresh: list[MessageRow] = []
    updates: list[tuple[object, ...]] = []
    duplicates = 0
    for row in rows:
        if row.dedupe_key not in existing:
            fresh.append(row)
            continue
        index, stored_raw = existing[row.dedupe_key]
        if batch.replaces_by_id and _raw_value(row.raw) != stored_raw:
            updates.append((*_row(session_id, index, row)[2:], session_id, index))
        else:
            duplicates += 1
    return fresh, updates, duplicates


def _update_session(conn: sqlite3.Connection, session_id: int, batch: Batch,
                    rows: list[MessageRow], *, count: int, inserted: int, updated: int,
                    now_text: str) -> None:
    """The session's counts, times, status and what the batch's headers say of it."""
    timestamps = [r.message.timestamp for r in rows if r.message.timestamp]
    conn.execute(
        "UPDATE sessions SET message_count = ?,"
        " started_at = COALESCE(started_at, ?, CASE WHEN ? > 0 THEN ? END),"
        " last_message_at = CASE WHEN ? IS NULL THEN last_message_at"
        "   WHEN last_message_at IS NULL OR ? > last_message_at THEN ?"
        "   ELSE last_message_at END,"
        " last_ingested_at = ?,"
        " status = CASE WHEN ? > 0 THEN 'active' ELSE status END,"
        " project = COALESCE(project, ?),"
        " git_branch = COALESCE(git_branch, ?),"
        " worktree = COALESCE(worktree, ?),"
        # A header naming another session, in this read or (its own header read
        # before) as the first of this read: what follows copies that one's history.
        " copied_from = COALESCE(copied_from, ?, NULLIF(?, external_id))"
        " WHERE id = ?",
        (
            count,
            min(timestamps) if timestamps else None, inserted, now_text,
            max(timestamps) if timestamps else None,
            max(timestamps) if timestamps else None, max(timestamps) if timestamps else None,
            now_text,
            inserted + updated,
            batch.hints.get("project"),
            batch.hints.get("git_branch"),
            batch.hints.get("worktree"),
            batch.hints.get("copied_from"),
            batch.hints.get("external_id"),
            session_id,
        ),
    )


def _record_beside(conn: sqlite3.Connection, session_id: int, batch: Batch,
                   now_text: str) -> None:
    """What the batch read beside its messages: rewinds, summaries, rejected lines."""
    if batch.rewinds:
        _record_rewinds(conn, session_id, batch.rewinds, now_text)
    if batch.summaries:
        conn.executemany(
            "INSERT OR IGNORE INTO session_summaries (session_id, kind, content, byte_offset,"
            " recorded_at) VALUES (?, ?, ?, ?, ?)",
            [(session_id, kind, text, offset, now_text)
             for kind, text, offset in batch.summaries],
        )
        conn.execute(
            "UPDATE sessions SET summary_markdown = ? WHERE id = ?",
            (batch.summaries[-1][1], session_id),
        )
    if batch.rejected:
        conn.executemany(
            "INSERT OR IGNORE INTO rejected_lines (path, session_id, byte_offset, raw, reason,"
            " rejected_at) VALUES (?, ?, ?, ?, ?, ?)",
            [(batch.state.path, session_id, off, raw, why, now_text)
             for off, raw, why in batch.rejected],
        )


def _save_state(
    conn: sqlite3.Connection, state: FileState, now_text: str, batch: Batch | None = None
) -> None:
    read = batch.lines_read if batch else 0
    skipped = batch.lines_skipped if batch else 0
    rejected = len(batch.rejected) if batch else 0
    conn.execute(
        "INSERT INTO session_message_state (path, fingerprint, device, inode, head_hash,"
        " head_length, source, session_id, last_byte_offset, last_message_index,"
        " last_processed_at, marker_hash, dedupe, lines_read, lines_skipped, lines_rejected,"
        " rewrites, missing) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (path) DO UPDATE SET fingerprint = excluded.fingerprint,"
        " device = excluded.device, inode = excluded.inode, head_hash = excluded.head_hash,"
        " head_length = excluded.head_length, session_id = excluded.session_id,"
        " last_byte_offset = excluded.last_byte_offset,"
        " last_message_index = excluded.last_message_index,"
        " last_processed_at = excluded.last_processed_at, marker_hash = excluded.marker_hash,"
        " dedupe = excluded.dedupe, lines_read = lines_read + excluded.lines_read,"
        " lines_skipped = lines_skipped + excluded.lines_skipped,"
        " lines_rejected = lines_rejected + excluded.lines_rejected,"
        " rewrites = excluded.rewrites, missing = excluded.missing",
        (state.path, state.fingerprint, state.device, state.inode, state.head_hash,
         state.head_length, state.source, state.session_id, state.offset,
         state.last_message_index, now_text, state.marker_hash, int(state.dedupe), read, skipped,
         rejected, state.rewrites, int(state.missing)),
    )


async def load_states(conn: aiosqlite.Connection) -> list[FileState]:
    async with conn.execute(
        "SELECT path, source, device, inode, head_hash, head_length, session_id,"
        " last_byte_offset, last_message_index, marker_hash, dedupe, rewrites, missing"
        " FROM session_message_state"
    ) as cursor:
        rows = await cursor.fetchall()
    return [
        FileState(path=r[0], source=sys.intern(r[1]), device=r[2], inode=r[3], head_hash=r[4],
                  head_length=r[5], session_id=r[6], offset=r[7], last_message_index=r[8],
                  marker_hash=r[9], dedupe=bool(r[10]), rewrites=r[11], missing=bool(r[12]))
        for r in rows
    ]


async def move_state(
    conn: aiosqlite.Connection, old_path: str, new_path: str, session_id: int,
    identity: tuple[int, int], now: datetime,
) -> None:
    """A renamed or moved transcript keeps its session and its offset; `identity` is its
    (device, inode) at the new path (new when it moved by copy, across file systems)."""
    device, inode = identity
    async with transaction(conn):
        await conn.execute("DELETE FROM session_message_state WHERE path = ?", (new_path,))
        await conn.execute(
            "UPDATE session_message_state SET path = ?, missing = 0, last_processed_at = ?,"
            " device = ?, inode = ? WHERE path = ?",
            (new_path, utc_text(now), device, inode, old_path),
        )
        await conn.execute(
            "UPDATE sessions SET transcript_path = ? WHERE id = ?", (new_path, session_id)
        )


async def mark_missing(conn: aiosqlite.Connection, path: str, missing: bool) -> None:
    async with transaction(conn):
        await conn.execute(
            "UPDATE session_message_state SET missing = ? WHERE path = ?", (int(missing), path)
        )
