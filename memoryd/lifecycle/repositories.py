"""Sessions and memories stored before projects were named by their repository, moved
to it (issue 31.4): a session started in a sub-directory or another git worktree of a
repository belongs to the repository's project.

Once, over the distinct projects the store has seen (a handful): each that lies inside a
repository on this disk (`repository.project_root`) has its memories relabelled in every
layer that can (`ProjectRelabel`), then its sessions. A kill in between repeats it,
which moves nothing twice. Paths no longer on disk keep their name.
"""

from __future__ import annotations

import aiosqlite
import structlog

from memoryd.clock import Clock
from memoryd.memory import MemoryBackend
from memoryd.memory.protocol import ProjectRelabel
from memoryd.repository import project_root, working_tree
from memoryd.store import upgrades
from memoryd.store.connection import transaction

log = structlog.get_logger("memoryd.repositories")

NAME = "projects_by_repository"


async def relabel_by_repository(conn: aiosqlite.Connection, backend: MemoryBackend,
                                clock: Clock) -> int:
    """Move every stored project that is a sub-directory or worktree of a repository to
    the repository's project; how many projects moved (0 once done before)."""
    if (await upgrades.progress(conn, NAME)).done:
        return 0
    async with conn.execute("SELECT DISTINCT project FROM sessions"
                            " WHERE project IS NOT NULL ORDER BY project") as cur:
        projects = [str(r[0]) for r in await cur.fetchall()]
    moved = 0
    for old in projects:
        new = project_root(old)
        if new == old:
            continue
        memories = (await backend.relabel_project(old, new)).moved if isinstance(
            backend, ProjectRelabel) else 0
        async with transaction(conn):
            await conn.execute(
                "UPDATE sessions SET worktree = COALESCE(worktree, ?) WHERE project = ?",
                (working_tree(old), old))
            await conn.execute("UPDATE sessions SET project = ? WHERE project = ?",
                               (new, old))
        log.info("project_moved_to_repository", old=old, new=new, memories=memories)
        moved += 1
    await upgrades.advance(conn, NAME, len(projects), moved, clock.now(), done=True)
    return moved
