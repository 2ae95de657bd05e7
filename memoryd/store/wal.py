"""Copying the write-ahead log into the database off the writer's path, and bounding it.

SQLite checkpoints inside the COMMIT that crosses `wal_autocheckpoint` pages: the
writer then copies (and syncs) the log before it can go on. A backfill writes
hundreds of megabytes, so the ingester turns that off on its own connection and
has this run PASSIVE checkpoints on a thread of their own, on a connection of their
own, as the log grows: they overlap with reading and parsing the next files, and a
checkpoint never blocks a writer or a reader.

A PASSIVE checkpoint never finishes while the writer keeps committing, and SQLite
starts the log over only after one has: a 2 GB transcript left an 8.4 GB log beside
a 4.1 GB database. So once the log passes `WAL_BOUND_BYTES`, the writer itself runs
a TRUNCATE checkpoint between two of its commits (`keep_bounded`). On another thread
it would lose the write lock to the writer's next commit, every time; on the writer's
connection it competes only with readers, whose snapshots are short. Most of the log
is already copied by then, so the writer pauses only for the rest.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import aiosqlite
import structlog

from memoryd import sqlite
from memoryd.clock import Clock

log = structlog.get_logger("memoryd.store")

#: Bytes committed between two checkpoints (SQLite's own default is ~4 MB of pages).
CHECKPOINT_BYTES = 16 << 20
#: The log's size past which the writer stops to empty it. Copying what the passive
#: checkpoints left of this much takes a fraction of a second.
WAL_BOUND_BYTES = 64 << 20
#: A busy answer that took this long waited for a reader (the busy handler ran); a
#: quicker one met another connection's checkpoint, which SQLite does not wait for.
_WAITED = 0.5


def log_size(database: Path) -> int:
    """Bytes in `database`'s write-ahead log (0 when there is none)."""
    try:
        return os.stat(f"{database}-wal").st_size
    except OSError:
        return 0


class Checkpointer:
    def __init__(self, path: Path, clock: Clock, every_bytes: int | None = None,
                 bound_bytes: int | None = None) -> None:
        self._path = path
        self._clock = clock
        self._every = CHECKPOINT_BYTES if every_bytes is None else every_bytes
        self._bound = WAL_BOUND_BYTES if bound_bytes is None else bound_bytes
        self._since = 0
        self._running: asyncio.Task[None] | None = None
        # After a try a reader held up through the busy timeout, the next waits for the
        # log to grow by another bound: a long reader (an export, a backup) costs the
        # writer one busy timeout per bound, not one per commit.
        self._next_try = self._bound

    def committed(self, n_bytes: int) -> None:
        """`n_bytes` more were committed; start a checkpoint when enough were and none
        is under way."""
        self._since += n_bytes
        if self._since < self._every or (self._running and not self._running.done()):
            return
        self._since = 0
        self._running = asyncio.ensure_future(asyncio.to_thread(self._checkpoint))

    async def keep_bounded(self, writer: aiosqlite.Connection) -> None:
        """Empty the log on the writer's own connection, between two of its commits, when
        it has grown past the bound."""
        size = log_size(self._path)
        if size <= self._next_try:
            return
        # A checkpoint under way would make this one return busy at once (SQLite does
        # not wait for another checkpoint); it copies what this one would have to.
        await self.wait()
        began = self._clock.monotonic()
        async with writer.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cursor:
            row = await cursor.fetchone()
        busy = bool(row and row[0])
        waited = busy and self._clock.monotonic() - began >= _WAITED
        self._next_try = size + self._bound if waited else self._bound
        log.debug("log_truncated", bytes_before=size, busy=busy, waited=waited)

    async def wait(self) -> None:
        """Until the checkpoint under way (if any) has ended."""
        if self._running is not None:
            await self._running

    def _checkpoint(self) -> None:
        try:
            with sqlite.opened(self._path) as conn:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            # Not fatal: SQLite's own checkpoints (other connections, the last close)
            # copy the log later; only the log's size grows meanwhile.
            log.warning("checkpoint_failed", error=str(exc))
