"""Work done once over what is already stored, a step at a time (`upgrades` table).

A step is small, so the daemon's jobs never wait long behind it; its position is saved
after each step, so a kill only repeats the step it interrupted (each step must be
idempotent), and a finished upgrade is never run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.connection import transaction


@dataclass(frozen=True, slots=True)
class Progress:
    position: int
    changed: int
    started: bool
    done: bool


async def progress(conn: aiosqlite.Connection, name: str) -> Progress:
    async with conn.execute(
            "SELECT position, changed, started_at, done_at FROM upgrades WHERE name = ?",
            (name,)) as cur:
        row = await cur.fetchone()
    if row is None:
        return Progress(0, 0, started=False, done=False)
    return Progress(int(row[0]), int(row[1]), started=row[2] is not None,
                    done=row[3] is not None)


async def advance(conn: aiosqlite.Connection, name: str, position: int, changed: int,
                  now: datetime, *, done: bool = False) -> None:
    """Record that every item up to `position` is done (`changed` more of them changed)."""
    at = utc_text(now)
    async with transaction(conn):
        await conn.execute(
            "INSERT INTO upgrades (name, position, changed, started_at, done_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
            " position = MAX(position, excluded.position),"
            " changed = changed + excluded.changed,"
            " done_at = COALESCE(done_at, excluded.done_at)",
            (name, position, changed, at, at if done else None))


async def sessions_after(conn: aiosqlite.Connection, position: int,
                         limit: int) -> list[tuple[int, str | None, str | None]]:
    """(id, project, worktree) of the next `limit` sessions after id `position`."""
    async with conn.execute(
            "SELECT id, project, worktree FROM sessions WHERE id > ? ORDER BY id LIMIT ?",
            (position, limit)) as cur:
        return [(int(r[0]), r[1], r[2]) for r in await cur.fetchall()]


async def restart(conn: aiosqlite.Connection, name: str, now: datetime) -> None:
    """Begin `name` again from nothing (a work that may be done more than once)."""
    async with transaction(conn):
        await conn.execute("DELETE FROM upgrades WHERE name = ?", (name,))
    await advance(conn, name, 0, 0, now)
