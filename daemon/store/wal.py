"""Copying the write-ahead log into the database off the writer's path.

SQLite checkpoints inside the COMMIT that crosses `wal_autocheckpoint` pages: the
writer then copies (and syncs) the log before it can go on. A backfill writes
hundreds of megabytes, so the ingester turns that off on its own connection and
has this run PASSIVE checkpoints on a thread of their own, on a connection of their
own, as the log grows: they overlap with reading and parsing the next files, and a
checkpoint never blocks a writer or a reader.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import structlog

log = structlog.get_logger("memoryd.store")

#: Bytes committed between two checkpoints (SQLite's own default is ~4 MB of pages).
CHECKPOINT_BYTES = 16 << 20


class Checkpointer:
    def __init__(self, path: Path, every_bytes: int = CHECKPOINT_BYTES) -> None:
        self._path = path
        self._every = every_bytes
        self._since = 0
        self._running: asyncio.Task[None] | None = None

    def committed(self, n_bytes: int) -> None:
        """`n_bytes` more were committed; start a checkpoint when enough were and none
        is under way."""
        self._since += n_bytes
        if self._since < self._every or (self._running and not self._running.done()):
            return
        self._since = 0
        self._running = asyncio.ensure_future(asyncio.to_thread(self._checkpoint))

    async def wait(self) -> None:
        """Until the checkpoint under way (if any) has ended."""
        if self._running is not None:
            await self._running

    def _checkpoint(self) -> None:
        try:
            conn = sqlite3.connect(self._path, timeout=5.0, isolation_level=None)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                conn.close()
        except sqlite3.Error as exc:
            # Not fatal: SQLite's own checkpoints (other connections, the last close)
            # copy the log later; only the log's size grows meanwhile.
            log.warning("checkpoint_failed", error=str(exc))
