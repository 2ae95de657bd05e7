"""Session lifecycle and recovery bookkeeping: status changes and `memory_sync_index`.

Times are compared as ISO-8601 UTC text (`YYYY-MM-DDTHH:MM:SS.mmmZ`), which sorts
like the instants it names, so no comparison depends on the machine's time zone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import aiosqlite

from memoryd.clock import utc_text
from memoryd.sqlite import call_on_connection, immediate_transaction
from memoryd.store import audit
from memoryd.store.audit import AuditEvent
from memoryd.store.connection import run_on_connection, transaction
from memoryd.store.copies import Copies, mark_copies
from memoryd.store.distill_queue import Queued, enqueue
from memoryd.store.forgotten import MESSAGE_FORGOTTEN, VISIBLE


def parse_utc(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class SessionSyncState:
    id: int
    source: str
    external_id: str | None
    project: str | None
    status: str
    message_count: int
    memory_sync_index: int
    last_message_at: datetime | None
    last_ingested_at: datetime | None
    #: The working tree the agent ran in (a linked worktree, or the project itself).
    worktree: str | None = None

    @property
    def last_activity(self) -> datetime | None:
        """When memoryd last stored something for this session (its own clock)."""
        return self.last_ingested_at or self.last_message_at


# Not frozen: a backfill makes a million of these, and a frozen dataclass's __init__
# (object.__setattr__ a field) costs three times a plain one. Treated as immutable all
# the same; hashed by value as a frozen one is.
#: For a message row `m`: 1 when a rewind of its session discarded it (`offsets`: from the
#: rewind's first message on, written before the rewind's line).
MESSAGE_REWOUND = (
    "EXISTS (SELECT 1 FROM session_rewinds r WHERE r.session_id = m.session_id"
    " AND m.message_index >= r.first_index AND m.byte_offset < r.byte_offset)"
)


@dataclass(slots=True, unsafe_hash=True)
class StoredMessage:
    index: int
    role: str
    kind: str
    content: str
    tool_name: str | None
    uuid: str | None
    timestamp: datetime | None
    #: Claude Code: written inside a subagent's conversation (the model prompting it).
    is_sidechain: bool = False
    #: Its content was forgotten (a copy of a forgotten transcript), or a rewind of its
    #: session discarded it: never saved to memory.
    forgotten: bool = False
    #: A tool call's input (JSON text) and the transcript line itself, read only where
    #: a session's digest needs them (`digest_messages`): calls' ids, exit statuses.
    tool_input: str | None = None
    raw: bytes = b""
    #: The same message as an earlier one of its session, written again (`Copies`).
    is_copy: bool = False

    @property
    def passed_over(self) -> bool:
        """Whether memory leaves it out (forgotten, or a copy), while a segment's index
        range still covers it."""
        return self.forgotten or self.is_copy


@dataclass(frozen=True, slots=True)
class StoredSummary:
    id: int
    session_id: int
    kind: str
    content: str
    #: The span of the conversation it summarises: the session's messages up to the
    #: summary's line (all of them when none came before it, as with Claude's
    #: `summary` lines at the top of a resumed file).
    started_at: datetime | None = None
    ended_at: datetime | None = None


# A session of a renamed folder's old path saves under the new one (`project_links`).
_SYNC_COLUMNS = ("id, source, external_id, COALESCE((SELECT new_path FROM project_links"
                 " WHERE old_path = sessions.project), project), status, message_count,"
                 " memory_sync_index, last_message_at, last_ingested_at, worktree")


def _sync_state(row: aiosqlite.Row) -> SessionSyncState:
    return SessionSyncState(
        id=row[0], source=row[1], external_id=row[2], project=row[3], status=row[4],
        message_count=row[5], memory_sync_index=row[6], last_message_at=parse_utc(row[7]),
        last_ingested_at=parse_utc(row[8]), worktree=row[9],
    )


#: When a session last showed life, what staleness is measured from: its last message's
#: own time, else its start's (a backfilled session of last year is not active for having
#: been read now), else when memoryd last read it.
LAST_ACTIVITY = "COALESCE(last_message_at, started_at, last_ingested_at, created_at)"
#: A session's status as the lifecycle check (`pause_stale`) would leave it at a cutoff
#: (the `?`): what is shown without a daemon that ran the check.
SHOWN_STATUS = (f"CASE WHEN status = 'active' AND {LAST_ACTIVITY} <= ? THEN 'paused'"
                " ELSE status END")


async def pause_stale(conn: aiosqlite.Connection, cutoff: datetime) -> list[int]:
    """Mark `paused` every active session with no new message since `cutoff`; their ids."""
    cutoff_text = utc_text(cutoff)
    async with transaction(conn), conn.execute(
        "UPDATE sessions SET status = 'paused' WHERE status = 'active'"
        f" AND {LAST_ACTIVITY} <= ? RETURNING id",
        (cutoff_text,),
    ) as cursor:
        return sorted(int(row[0]) for row in await cursor.fetchall())


async def mark_ended(conn: aiosqlite.Connection, session_id: int) -> bool:
    """The agent said this session ended; new lines will reopen it."""
    async with transaction(conn):
        cursor = await conn.execute(
            "UPDATE sessions SET status = 'ended' WHERE id = ? AND status != 'ended'",
            (session_id,),
        )
        return cursor.rowcount > 0


async def sessions_to_sync(
    conn: aiosqlite.Connection, session_id: int | None = None, *, after: int = 0,
    limit: int = -1,
) -> list[SessionSyncState]:
    """Sessions with messages not yet saved to memory (or the one asked for), oldest
    first, from the first above `after`, at most `limit`."""
    if session_id is not None:
        sql = f"SELECT {_SYNC_COLUMNS} FROM sessions WHERE id = ?"
        params: tuple[object, ...] = (session_id,)
    else:
        sql = (f"SELECT {_SYNC_COLUMNS} FROM sessions WHERE message_count > memory_sync_index"
               " AND id > ? ORDER BY id LIMIT ?")
        params = (after, limit)
    async with conn.execute(sql, params) as cursor:
        return [_sync_state(row) for row in await cursor.fetchall()]


async def sessions_active_since(conn: aiosqlite.Connection,
                                since: datetime) -> list[SessionSyncState]:
    """Sessions with a message at or after `since`, oldest first."""
    async with conn.execute(
        f"SELECT {_SYNC_COLUMNS} FROM sessions WHERE julianday(last_message_at) >="
        " julianday(?) ORDER BY id", (utc_text(since),)) as cursor:
        return [_sync_state(row) for row in await cursor.fetchall()]


async def get_sync_state(conn: aiosqlite.Connection, session_id: int) -> SessionSyncState | None:
    found = await sessions_to_sync(conn, session_id)
    return found[0] if found else None


#: The transcript line of the rows a digest reads it from (`digest_messages`).
_DIGEST_RAW = "CASE WHEN kind IN ('tool_call', 'tool_result') OR message_index < 8 THEN raw END"


async def messages_from(
    conn: aiosqlite.Connection, session_id: int, start: int, limit: int, *,
    raw: bool = False, copies: Copies | None = None,
) -> list[StoredMessage]:
    """Up to `limit` messages of a session from `message_index` `start` on, in order;
    with `raw`, each with the line a digest reads (as `digest_messages` gives it); with
    `copies` (the state of the pages read before, or a new one), copies are marked."""
    return await call_on_connection(
        conn, _read_messages,
        "SELECT message_index, role, kind, content, tool_name, uuid, timestamp, is_sidechain,"
        f" {MESSAGE_FORGOTTEN} OR {MESSAGE_REWOUND}, tool_input,"
        f" {_DIGEST_RAW if raw else 'NULL'}, dedupe_key"
        " FROM session_messages m WHERE session_id = ?"
        " AND message_index >= ? ORDER BY message_index LIMIT ?",
        (session_id, start, limit), None if copies is None else (session_id, start, copies))


def _read_messages(conn: sqlite3.Connection, sql: str, params: tuple[object, ...],
                   copies: tuple[int, int, Copies] | None = None) -> list[StoredMessage]:
    """`sql`'s rows (index, role, kind, content, tool name, uuid, timestamp, sidechain,
    forgotten, tool input, line) as messages, on the store's thread: one hop through the
    event loop, where a cursor's execute, fetch and close are three, each waiting for the
    loop's thread to let go of Python's lock. With `copies` (the session's id, the first
    index read, the state), copies are marked (`Copies`)."""
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: a Row a column costs more than the tuple
    try:
        rows = cursor.execute(sql, params).fetchall()
    finally:
        cursor.close()
    messages = [
        StoredMessage(r[0], r[1], r[2], r[3], r[4], r[5], parse_utc(r[6]), bool(r[7]),
                      bool(r[8]), r[9], b"" if r[10] is None else _raw_bytes(r[10]))
        for r in rows
    ]
    if copies is not None and rows:
        mark_copies(conn, *copies[:2], rows, messages, copies[2])
    return messages


async def visible_messages(conn: aiosqlite.Connection, session_id: int, first: int,
                           last: int, *, copies: Copies | None = None) -> list[StoredMessage]:
    """Messages `first`..`last` of a session that an agent or a model may be shown: none
    of a forgotten session or project, nor any whose content was forgotten or a rewind
    discarded; with `copies`
    (a new state), none that repeats an earlier message (`Copies`: a resumed or forked
    conversation written again)."""
    messages = await call_on_connection(
        conn, _read_messages,
        "SELECT m.message_index, m.role, m.kind, m.content, m.tool_name, m.uuid, m.timestamp,"
        " m.is_sidechain, 0, m.tool_input, NULL, m.dedupe_key FROM session_messages m"
        " JOIN sessions s ON s.id = m.session_id"
        f" WHERE m.session_id = ? AND m.message_index BETWEEN ? AND ? AND {VISIBLE}"
        f" AND NOT {MESSAGE_REWOUND}"
        " ORDER BY m.message_index", (session_id, first, last),
        None if copies is None else (session_id, first, copies))
    return [m for m in messages if not m.is_copy]


@dataclass(frozen=True, slots=True)
class DigestDue:
    """A session whose digest is behind what was saved to memory (`memory_sync_index`)."""

    state: SessionSyncState
    digest_index: int
    git_branch: str | None
    #: The agent's own title of the session (Claude's and Gemini's summary line), if any.
    title: str | None = None
    #: A subagent's session: the session that started it (its id, when that one is
    #: stored, and the id its agent gave it).
    parent_id: int | None = None
    parent_external_id: str | None = None


async def digests_due(conn: aiosqlite.Connection, session_ids: Sequence[int] | None = None,
                      *, after: int = 0, limit: int = -1) -> list[DigestDue]:
    """Sessions with messages saved to memory since their digest was last built (of
    `session_ids`, or any), by id, from the first above `after`, at most `limit`."""
    sql = (f"SELECT {_SYNC_COLUMNS}, digest_index, git_branch,"
           " (SELECT content FROM session_summaries t WHERE t.session_id = sessions.id"
           "  AND t.kind = 'summary' ORDER BY t.id DESC LIMIT 1),"
           " parent_session_id, parent_external_id"
           " FROM sessions WHERE memory_sync_index > digest_index AND id > ?")
    params: list[object] = [after]
    if session_ids is not None:
        sql += f" AND id IN ({', '.join('?' * len(session_ids))})"
        params.extend(session_ids)
    async with conn.execute(sql + " ORDER BY id LIMIT ?", (*params, limit)) as cursor:
        return [DigestDue(_sync_state(row), row[10], row[11], row[12], row[13], row[14])
                for row in await cursor.fetchall()]


async def subagent_states(conn: aiosqlite.Connection,
                          session_id: int) -> list[SessionSyncState]:
    """The sessions of the subagents a session started, and of theirs, oldest first."""
    async with conn.execute(
            "WITH RECURSIVE tree (id) AS (SELECT ? UNION"
            " SELECT s.id FROM sessions s JOIN tree ON s.parent_session_id = tree.id)"
            f" SELECT {_SYNC_COLUMNS} FROM sessions WHERE id IN (SELECT id FROM tree)"
            " AND id != ? ORDER BY COALESCE(started_at, created_at), id",
            (session_id, session_id)) as cursor:
        return [_sync_state(row) for row in await cursor.fetchall()]


async def digest_again(conn: aiosqlite.Connection, session_id: int) -> None:
    """The session's digest is due again (a subagent it started did more)."""
    async with transaction(conn):
        await conn.execute("UPDATE sessions SET digest_index = 0 WHERE id = ?", (session_id,))


def _raw_bytes(value: bytes | str | None) -> bytes:
    # Tests and old versions wrote some lines as text into the BLOB column.
    if value is None:
        return b""
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)


async def digest_messages(conn: aiosqlite.Connection, session_id: int, end: int, *,
                          copies: Copies | None = None) -> list[StoredMessage]:
    """A session's messages before `end`, in order, with what a digest reads: a tool
    row's input and line, and the first lines' (where an agent writes the branch). Its
    forgotten messages, and those a rewind discarded, are left out; with `copies` (a new
    one), its copies are marked."""
    return await call_on_connection(
        conn, _read_messages,
        "SELECT message_index, role, kind, content, tool_name, uuid, timestamp, is_sidechain,"
        f" 0, tool_input, {_DIGEST_RAW}, dedupe_key"
        f" FROM session_messages m WHERE session_id = ? AND message_index < ?"
        f" AND NOT {MESSAGE_FORGOTTEN} AND NOT {MESSAGE_REWOUND} ORDER BY message_index",
        (session_id, end), None if copies is None else (session_id, 0, copies))


async def digest_reach(conn: aiosqlite.Connection,
                       session_ids: Sequence[int]) -> dict[int, tuple[str, str | None, int]]:
    """Of `session_ids`, each session's source, external id and `digest_index` (how far
    its digest was built, whether or not it said anything)."""
    if not session_ids:
        return {}
    ids = sorted(set(session_ids))
    async with conn.execute(
            "SELECT id, source, external_id, digest_index FROM sessions"
            f" WHERE id IN ({', '.join('?' * len(ids))})", ids) as cursor:
        return {row[0]: (row[1], row[2], row[3]) for row in await cursor.fetchall()}


async def mark_digested(conn: aiosqlite.Connection, session_id: int, index: int) -> None:
    """The session's digest now covers its messages before `index` (never moved back)."""
    async with transaction(conn):
        await conn.execute(
            "UPDATE sessions SET digest_index = ? WHERE id = ? AND digest_index < ?",
            (index, session_id, index))


async def advance_sync_index(
    conn: aiosqlite.Connection, session_id: int, expected: int, new_index: int, *,
    audit_events: Sequence[AuditEvent] = (), now: datetime | None = None,
    distill: Sequence[Queued] = (),
) -> bool:
    """Move `memory_sync_index` from `expected` to `new_index`; False if someone else moved it.

    The compare-and-set keeps two syncs (the daemon's and `memoryd sync`) from
    ever moving the index backwards. `audit_events` (the saves that let it move) are
    recorded in the same transaction, and so are the saved segments queued for a
    model (`distill`, see `distill_queue`).
    """
    return await run_on_connection(conn, _advance, session_id, expected, new_index,
                                   audit_events, now, distill)


def _advance(conn: sqlite3.Connection, session_id: int, expected: int, new_index: int,
             audit_events: Sequence[AuditEvent], now: datetime | None,
             distill: Sequence[Queued] = ()) -> bool:
    # One call on the store's thread: a batch's audit rows are dozens of statements.
    with immediate_transaction(conn):
        cursor = conn.execute(
            "UPDATE sessions SET memory_sync_index = ? WHERE id = ? AND memory_sync_index = ?",
            (new_index, session_id, expected))
        moved = cursor.rowcount > 0
        if moved and now is not None:
            audit.insert_events(conn, audit_events, now)
            if distill:
                enqueue(conn, session_id, distill, now)
    return moved


async def unsynced_summaries(
    conn: aiosqlite.Connection, session_id: int | None = None
) -> list[StoredSummary]:
    before = ("FROM session_messages m WHERE m.session_id = s.session_id"
              " AND m.byte_offset <= COALESCE(s.byte_offset, -1)")
    whole = "FROM session_messages m WHERE m.session_id = s.session_id"
    sql = ("SELECT s.id, s.session_id, s.kind, s.content,"
           f" COALESCE((SELECT MIN(m.timestamp) {before}), (SELECT MIN(m.timestamp) {whole})),"
           f" COALESCE((SELECT MAX(m.timestamp) {before}), (SELECT MAX(m.timestamp) {whole}))"
           " FROM session_summaries s WHERE s.memory_synced_at IS NULL")
    params: tuple[object, ...] = ()
    if session_id is not None:
        sql += " AND s.session_id = ?"
        params = (session_id,)
    async with conn.execute(sql + " ORDER BY s.id", params) as cursor:
        return [StoredSummary(row[0], row[1], row[2], row[3], parse_utc(row[4]), parse_utc(row[5]))
                for row in await cursor.fetchall()]


async def mark_summary_synced(conn: aiosqlite.Connection, summary_id: int, now: datetime) -> None:
    async with transaction(conn):
        await conn.execute(
            "UPDATE session_summaries SET memory_synced_at = ? WHERE id = ?",
            (utc_text(now), summary_id),
        )


async def sessions_saved(conn: aiosqlite.Connection,
                         is_own: Callable[[str | None], bool]) -> int:
    """How many sessions (memoryd's own passed over) have messages saved to memory."""
    async with conn.execute(
            "SELECT project, worktree FROM sessions WHERE memory_sync_index > 0") as cursor:
        rows = await cursor.fetchall()
    return sum(not (is_own(r[0]) or is_own(r[1])) for r in rows)


async def reset_memory_progress(conn: aiosqlite.Connection) -> None:
    """Every session's memory progress back to its start, for a memory made anew: its
    messages, digest and summaries are saved again (`lifecycle.rebuild`)."""
    async with transaction(conn):
        await conn.execute("UPDATE sessions SET memory_sync_index = 0, digest_index = 0")
        await conn.execute("UPDATE session_summaries SET memory_synced_at = NULL")
