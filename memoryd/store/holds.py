"""Legal holds: a project or a session that no deletion may touch while the hold stands.

Retention, `forget` and the transcript lifecycle ask `Holds.covers` before they
delete anything; a hold is placed and released by a person (`memoryd hold`), and
both are in the audit trail. A session hold names the agent's session id (what
its memories carry after a re-ingest too) and memoryd's own session number.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.connection import transaction


@dataclass(frozen=True, slots=True)
class Holds:
    """Every hold standing, for quick checks."""

    projects: frozenset[str] = frozenset()
    sessions: frozenset[str] = frozenset()  # agents' session ids
    session_ids: frozenset[int] = frozenset()  # memoryd's own session numbers

    def covers(self, *, project: str | None = None, session_id: int | None = None,
               session_external_id: str | None = None) -> bool:
        return ((project is not None and project in self.projects)
                or (session_id is not None and session_id in self.session_ids)
                or (session_external_id is not None and session_external_id in self.sessions))

    def __bool__(self) -> bool:
        return bool(self.projects or self.sessions or self.session_ids)


async def standing(conn: aiosqlite.Connection) -> Holds:
    async with conn.execute("SELECT kind, value, session_id FROM legal_holds") as cur:
        rows = list(await cur.fetchall())
    return Holds(
        projects=frozenset(r[1] for r in rows if r[0] == "project"),
        sessions=frozenset(r[1] for r in rows if r[0] == "session"),
        session_ids=frozenset(int(r[2]) for r in rows if r[0] == "session"
                              and r[2] is not None))


async def place(conn: aiosqlite.Connection, *, kind: str, value: str, session_id: int | None,
                reason: str | None, now: datetime) -> tuple[int, bool]:
    """Place a hold (or find the same one standing): (its id, whether it is new)."""
    async with transaction(conn):
        cur = await conn.execute(
            "INSERT INTO legal_holds (kind, value, session_id, reason, created_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (kind, value) DO NOTHING",
            (kind, value, session_id, reason, utc_text(now)))
        created = cur.rowcount > 0
        await cur.close()
        async with conn.execute("SELECT id FROM legal_holds WHERE kind = ? AND value = ?",
                                (kind, value)) as found:
            row = await found.fetchone()
    assert row is not None
    return int(row[0]), created


async def release(conn: aiosqlite.Connection, hold_id: int) -> dict[str, Any] | None:
    """Remove a hold; what it was, or None when there is no such hold."""
    async with transaction(conn):
        async with conn.execute("SELECT * FROM legal_holds WHERE id = ?", (hold_id,)) as cur:
            row = await cur.fetchone()
            names = [d[0] for d in cur.description]
        if row is None:
            return None
        await conn.execute("DELETE FROM legal_holds WHERE id = ?", (hold_id,))
    return dict(zip(names, row, strict=True))


async def listing(conn: aiosqlite.Connection) -> list[dict[str, Any]]:
    async with conn.execute(
            "SELECT id, kind, value, session_id, reason, created_at FROM legal_holds"
            " ORDER BY id") as cur:
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]
