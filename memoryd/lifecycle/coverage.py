"""Whether the embedded memory still holds what the daemon's archive says it saved.

`sessions.memory_sync_index` says how far each session was saved to memory. A memory.db
moved aside, deleted, emptied or made anew holds none of it, and a plain sync would save
nothing (every index already at its end) while memory opened anew, silently. Every path
that saves to the embedded memory asks `check_memory` first; `memoryd rebuild-memory`
(`lifecycle.rebuild`) is the way back.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiosqlite

from memoryd import sqlite
from memoryd.config import Settings
from memoryd.errors import MemoryLost
from memoryd.store.sessions import sessions_saved


def _holds_nothing(path: Path) -> bool:
    """Whether `path` is missing, empty, or an embedded store without a memory or a
    record of one deleted."""
    if not path.exists() or path.stat().st_size == 0:
        return True
    try:
        with sqlite.opened(path, readonly=True) as conn:
            for table in ("memories", "memory_deletions"):
                if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                    return False
    except sqlite3.DatabaseError:
        return False  # damaged, not lost: its integrity check says so
    return True


async def memory_lost(conn: aiosqlite.Connection, settings: Settings) -> int:
    """How many sessions the archive says were saved to the embedded memory when that
    memory holds nothing (missing, empty, or made anew): 0 when nothing was lost."""
    if settings.memory.backends != ["sqlite"] or not _holds_nothing(settings.memory_path):
        return 0
    return await sessions_saved(conn, settings.is_own)


async def check_memory(conn: aiosqlite.Connection, settings: Settings) -> None:
    """Raise MemoryLost rather than save into a memory that lost what it held."""
    lost = await memory_lost(conn, settings)
    if lost:
        raise MemoryLost(
            f"{settings.memory_path} holds nothing, yet {lost} sessions were saved to it"
            " (moved, deleted or made anew?): run `memoryd rebuild-memory` to save every"
            " message memoryd holds into it again", backend="sqlite")
