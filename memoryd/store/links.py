"""Project links: a renamed (or moved) folder's old path, tied to its new path.

Projects are full paths, so renaming `~/src/api` to `~/src/api-v2` makes a new
project. `memoryd project link OLD NEW` records the link here; from then on a
session of OLD syncs its memories under NEW (`sessions.get_sync_state`), the
sessions listed under OLD are listed under NEW, and the memory layers move
OLD's memories to NEW (`ProjectRelabel`). Links chain: linking NEW onward later
re-points every older path too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import aiosqlite

from memoryd.clock import utc_text
from memoryd.store.connection import transaction


@dataclass(frozen=True, slots=True)
class ProjectLink:
    old_path: str
    new_path: str
    linked_at: str


async def link(conn: aiosqlite.Connection, old: str, new: str, now: datetime) -> int:
    """Link `old` to `new` and move the sessions recorded under `old`; how many moved.

    Raises ValueError for a link that would make a cycle (`new` is linked to `old`)."""
    if old == new:
        raise ValueError("a project cannot be linked to itself")
    async with transaction(conn):
        async with conn.execute("SELECT new_path FROM project_links WHERE old_path = ?",
                                (new,)) as cur:
            onward = await cur.fetchone()
        if onward is not None:
            raise ValueError(f"{new} is itself linked to {onward[0]}; link to that path")
        await conn.execute(
            "INSERT INTO project_links (old_path, new_path, linked_at) VALUES (?, ?, ?)"
            " ON CONFLICT (old_path) DO UPDATE SET new_path = excluded.new_path,"
            " linked_at = excluded.linked_at", (old, new, utc_text(now)))
        # Older links to `old` follow it to `new`: a folder renamed twice is one project.
        await conn.execute("UPDATE project_links SET new_path = ? WHERE new_path = ?",
                           (new, old))
        cur = await conn.execute("UPDATE sessions SET project = ? WHERE project = ?",
                                 (new, old))
        moved = cur.rowcount
        await cur.close()
    return moved


async def all_links(conn: aiosqlite.Connection) -> list[ProjectLink]:
    async with conn.execute("SELECT old_path, new_path, linked_at FROM project_links"
                            " ORDER BY new_path, old_path") as cur:
        return [ProjectLink(*row) for row in await cur.fetchall()]


async def unlink(conn: aiosqlite.Connection, old: str) -> bool:
    """Remove the link from `old` (what was moved stays moved); False if there was none."""
    async with transaction(conn):
        cur = await conn.execute("DELETE FROM project_links WHERE old_path = ?", (old,))
        removed = cur.rowcount > 0
        await cur.close()
    return removed


async def resolve(conn: aiosqlite.Connection, project: str | None) -> str | None:
    """The path `project` is now known by (itself when not linked)."""
    if project is None:
        return None
    async with conn.execute("SELECT new_path FROM project_links WHERE old_path = ?",
                            (project,)) as cur:
        row = await cur.fetchone()
    return str(row[0]) if row else project
