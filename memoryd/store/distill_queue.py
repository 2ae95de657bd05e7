"""The distillation queue: saved segments waiting for a model, in the state database.

A segment is queued in the transaction that moves its session's `memory_sync_index`
past it (`sessions.advance_sync_index`), so it is queued exactly when it is saved,
once, whatever crashes. A job then moves `pending` -> `answered` (the model's checked
answer is committed before any item is stored: a kill after the model answered never
asks it again) -> `done`, or `skipped` (nothing to send, a session forgotten meanwhile,
an answer that failed its checks twice). Items are stored under deterministic ids, so
a kill between storing them and `done` stores nothing twice.

Every write here is one call on the connection's own thread (`run_on_connection`):
cancelled or not, a transaction is either whole or absent. A call's audit record is
written in the transaction that records its outcome.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import aiosqlite

from memoryd.clock import utc_text
from memoryd.sqlite import immediate_transaction
from memoryd.store.audit import AuditEvent, insert_events
from memoryd.store.connection import run_on_connection

#: Attempts at a job whose answer failed its checks (or whose call failed for a reason
#: that is not transient) in one round; after a round it waits, RETRY_AFTER doubled each
#: round (a provider answering prose for an hour must not cost every segment for good),
#: and after MAX_ROUNDS it is skipped (`memoryd distill --since` queues it again).
MAX_ATTEMPTS = 2
MAX_ROUNDS = 5
RETRY_AFTER = timedelta(minutes=30)


@dataclass(frozen=True, slots=True)
class Queued:
    """A saved segment to distill: its id and its session's message range."""

    segment_id: str
    first_index: int
    last_index: int


@dataclass(frozen=True, slots=True)
class Job:
    segment_id: str
    session_id: int
    first_index: int
    last_index: int
    state: str
    attempts: int
    answer: str | None


@dataclass(frozen=True, slots=True)
class QueueCounts:
    waiting: int
    done: int
    skipped: int
    stored: int
    duplicates: int
    tokens_today: int
    calls_today: int
    last_error: str | None
    last_error_at: datetime | None


def enqueue(conn: sqlite3.Connection, session_id: int, entries: Sequence[Queued],
            now: datetime) -> None:
    """Queue `entries` (inside the caller's transaction); a segment queued before stays
    as it is."""
    conn.executemany(
        "INSERT OR IGNORE INTO distill_queue (segment_id, session_id, first_index, last_index,"
        " queued_at) VALUES (?, ?, ?, ?, ?)",
        [(e.segment_id, session_id, e.first_index, e.last_index, utc_text(now))
         for e in entries])


async def drop_forgotten(conn: aiosqlite.Connection, session_ids: Sequence[int], *,
                         agent_session: str | None = None, everything: bool = False,
                         at: str) -> None:
    """Inside the caller's transaction (a forget): the unfinished jobs of these sessions
    (or all) are skipped, and the answers they held (the items' text) dropped."""
    skip = ("UPDATE distill_queue SET state = 'skipped', answer = NULL, error = 'forgotten',"
            " done_at = ? WHERE state IN ('pending', 'answered')")
    if everything:
        await conn.execute(skip, (at,))
        return
    chosen = list(session_ids)
    if agent_session is not None:
        async with conn.execute("SELECT id FROM sessions WHERE external_id = ?",
                                (agent_session,)) as cursor:
            chosen += [int(row[0]) for row in await cursor.fetchall()]
    if chosen:
        marks = ",".join("?" for _ in chosen)
        await conn.execute(f"{skip} AND session_id IN ({marks})", (at, *chosen))


async def queued_ranges(conn: aiosqlite.Connection) -> dict[int, list[tuple[int, int]]]:
    """The message ranges ever queued (waiting, done or skipped), by session."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    async with conn.execute(
            "SELECT session_id, first_index, last_index FROM distill_queue") as cursor:
        for session_id, first, last in await cursor.fetchall():
            ranges.setdefault(session_id, []).append((first, last))
    return ranges


def _enqueue_all(conn: sqlite3.Connection, entries: dict[int, list[Queued]],
                 now: datetime) -> None:
    with immediate_transaction(conn):
        for session_id, queued in entries.items():
            enqueue(conn, session_id, queued, now)


async def enqueue_backlog(conn: aiosqlite.Connection, entries: dict[int, list[Queued]],
                          now: datetime) -> None:
    """Queue older sessions' segments (`distill.backlog`), in one transaction."""
    await run_on_connection(conn, _enqueue_all, entries, now)


async def unfinished_among(conn: aiosqlite.Connection, segment_ids: list[str]) -> list[str]:
    """Those of `segment_ids` not finished yet."""
    left: list[str] = []
    for start in range(0, len(segment_ids), 500):
        part = segment_ids[start:start + 500]
        marks = ", ".join("?" for _ in part)
        async with conn.execute(
            f"SELECT segment_id FROM distill_queue WHERE segment_id IN ({marks})"
            " AND state IN ('pending', 'answered')", part) as cursor:
            left += [row[0] for row in await cursor.fetchall()]
    return left


async def waiting(conn: aiosqlite.Connection, limit: int, now: datetime) -> list[Job]:
    """The oldest jobs not finished and due by `now` (one that failed a round waits),
    answered ones first (their tokens are spent)."""
    async with conn.execute(
        "SELECT segment_id, session_id, first_index, last_index, state, attempts, answer"
        " FROM distill_queue WHERE state IN ('pending', 'answered') AND queued_at <= ?"
        " ORDER BY state = 'pending', queued_at, segment_id LIMIT ?", (utc_text(now), limit),
    ) as cursor:
        return [Job(*row) for row in await cursor.fetchall()]


def _requeue(conn: sqlite3.Connection, since: datetime, now: datetime) -> int:
    with immediate_transaction(conn):
        return conn.execute(
            "UPDATE distill_queue SET state = 'pending', attempts = 0, error = NULL,"
            " done_at = NULL, queued_at = ? WHERE state = 'skipped' AND attempts >= ?"
            " AND COALESCE(error, '') != 'forgotten' AND session_id IN (SELECT id FROM"
            " sessions WHERE julianday(last_message_at) >= julianday(?))",
            (utc_text(now), MAX_ATTEMPTS, utc_text(since))).rowcount


async def requeue_failed(conn: aiosqlite.Connection, since: datetime, now: datetime) -> int:
    """The jobs of sessions active since `since` that were skipped after failing (never
    forgotten ones) queued again from the start; how many."""
    return await run_on_connection(conn, _requeue, since, now)


def _day(now: datetime) -> str:
    return now.date().isoformat()


async def tokens_on(conn: aiosqlite.Connection, now: datetime) -> int:
    """Tokens spent on the (UTC) day of `now`."""
    async with conn.execute("SELECT tokens FROM distill_usage WHERE day = ?",
                            (_day(now),)) as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


def _spend(conn: sqlite3.Connection, now: datetime, tokens: int,
           error: str | None = None) -> None:
    conn.execute(
        "INSERT INTO distill_usage (day, calls, tokens) VALUES (?, 1, ?)"
        " ON CONFLICT (day) DO UPDATE SET calls = calls + 1, tokens = tokens + excluded.tokens",
        (_day(now), tokens))
    if error is not None:
        conn.execute("UPDATE distill_usage SET last_error = ?, last_error_at = ? WHERE day = ?",
                     (error, utc_text(now), _day(now)))


def _answered(conn: sqlite3.Connection, segment_id: str, answer: str, tokens_in: int,
              tokens_out: int, now: datetime, event: AuditEvent | None) -> bool:
    with immediate_transaction(conn):
        taken = conn.execute(
            "UPDATE distill_queue SET state = 'answered', answer = ?, tokens_in = tokens_in + ?,"
            " tokens_out = tokens_out + ?, attempts = attempts + 1, error = NULL"
            " WHERE segment_id = ? AND state = 'pending'",
            (answer, tokens_in, tokens_out, segment_id)).rowcount > 0
        _spend(conn, now, tokens_in + tokens_out)
        if event is not None:
            insert_events(conn, [event if taken else replace(
                event, outcome="answered elsewhere")], now)
    return taken


async def record_answer(conn: aiosqlite.Connection, segment_id: str, answer: str, *,
                        tokens_in: int, tokens_out: int, now: datetime,
                        audit: AuditEvent | None = None) -> bool:
    """The model's checked answer (JSON of its items), with the tokens it cost today.
    False when another drainer (`memoryd distill` beside a daemon just started) answered
    the job first: this answer is dropped, so its items are never stored beside those."""
    return await run_on_connection(conn, _answered, segment_id, answer, tokens_in,
                                   tokens_out, now, audit)


def _failed(conn: sqlite3.Connection, segment_id: str, error: str, tokens: int,
            now: datetime, counted: bool, event: AuditEvent | None) -> bool:
    with immediate_transaction(conn):
        cursor = conn.execute(
            # Not the segment's fault (the provider down, slow, refusing): it goes to the
            # back of the queue, so one segment a model always chokes on holds up no other.
            "UPDATE distill_queue SET attempts = attempts + ?, error = ?,"
            " tokens_in = tokens_in + ?, queued_at = CASE WHEN ? THEN queued_at ELSE ? END"
            " WHERE segment_id = ? AND state = 'pending' RETURNING attempts",
            (1 if counted else 0, error, tokens, counted, utc_text(now), segment_id))
        row = cursor.fetchone()
        attempts = row[0] if row is not None else 0
        skipped = counted and attempts >= MAX_ATTEMPTS * MAX_ROUNDS
        if skipped:
            conn.execute("UPDATE distill_queue SET state = 'skipped', done_at = ?"
                         " WHERE segment_id = ?", (utc_text(now), segment_id))
        elif counted and attempts and attempts % MAX_ATTEMPTS == 0:
            wait = RETRY_AFTER * 2 ** (attempts // MAX_ATTEMPTS - 1)
            conn.execute("UPDATE distill_queue SET queued_at = ? WHERE segment_id = ?",
                         (utc_text(now + wait), segment_id))
        _spend(conn, now, tokens, error)
        if event is not None:
            insert_events(conn, [event], now)
    return skipped


async def record_failure(conn: aiosqlite.Connection, segment_id: str, error: str, *,
                         now: datetime, tokens: int = 0, counted: bool = True,
                         audit: AuditEvent | None = None) -> bool:
    """A call that failed (`error`, never the segment's text); a failure `counted` against
    the job skips it after MAX_ATTEMPTS. True if it was skipped."""
    return await run_on_connection(conn, _failed, segment_id, error, tokens, now, counted,
                                   audit)


def _finished(conn: sqlite3.Connection, segment_id: str, state: str, stored: int,
              duplicates: int, error: str | None, now: datetime) -> None:
    with immediate_transaction(conn):
        conn.execute(
            "UPDATE distill_queue SET state = ?, stored = ?, duplicates = ?, error = ?,"
            " done_at = ?, answer = NULL WHERE segment_id = ?",
            (state, stored, duplicates, error, utc_text(now), segment_id))


async def finish(conn: aiosqlite.Connection, segment_id: str, *, now: datetime,
                 stored: int = 0, duplicates: int = 0, skipped: str | None = None) -> None:
    """The job is over: its items stored (`done`), or `skipped` for the reason given. The
    answer, which holds text, is not kept past it."""
    await run_on_connection(conn, _finished, segment_id, "skipped" if skipped else "done",
                            stored, duplicates, skipped, now)


async def has_queue(conn: aiosqlite.Connection) -> bool:
    """Whether the database has the queue yet (one opened read-only may predate it)."""
    async with conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                            " AND name = 'distill_queue'") as cursor:
        return await cursor.fetchone() is not None


async def distill_counts(conn: aiosqlite.Connection, now: datetime) -> dict[str, Any]:
    """`counts` as status.json and `memoryd status` carry them."""
    found = await counts(conn, now)
    out = asdict(found)
    out["last_error_at"] = utc_text(found.last_error_at) if found.last_error_at else None
    return out


async def counts(conn: aiosqlite.Connection, now: datetime) -> QueueCounts:
    """The queue's figures and today's spending, for `memoryd status`."""
    async with conn.execute(
        "SELECT COALESCE(SUM(state IN ('pending', 'answered')), 0),"
        " COALESCE(SUM(state = 'done'), 0), COALESCE(SUM(state = 'skipped'), 0),"
        " COALESCE(SUM(stored), 0), COALESCE(SUM(duplicates), 0) FROM distill_queue",
    ) as cursor:
        row = await cursor.fetchone()
    async with conn.execute(
        "SELECT calls, tokens FROM distill_usage WHERE day = ?", (_day(now),)) as cursor:
        today = await cursor.fetchone()
    async with conn.execute(
        "SELECT last_error, last_error_at FROM distill_usage WHERE last_error IS NOT NULL"
        " ORDER BY day DESC LIMIT 1") as cursor:
        error = await cursor.fetchone()
    assert row is not None
    return QueueCounts(waiting=row[0], done=row[1], skipped=row[2], stored=row[3],
                       duplicates=row[4], tokens_today=today[1] if today else 0,
                       calls_today=today[0] if today else 0,
                       last_error=error[0] if error else None,
                       last_error_at=datetime.fromisoformat(error[1]) if error else None)
