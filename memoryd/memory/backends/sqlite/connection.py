"""The embedded store's one connection: an asyncio lock serializes everything done on it,
writes run in `BEGIN IMMEDIATE` transactions (other processes on the same file see whole
changes only), and sqlite3 errors become BackendError / BackendUnavailable. And the
store's owner, claimed by the first user to open it and checked at every open."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path

import aiosqlite

from memoryd.errors import BackendError, StoreOwnedElsewhere
from memoryd.memory.backends.sqlite.schema import BACKEND_NAME, translate


class LockedConnection:
    """`read()` and `write()` hold the lock; `write()` is one transaction."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn: aiosqlite.Connection | None = conn
        self.lock = asyncio.Lock()

    def connection(self) -> aiosqlite.Connection:
        if self.conn is None:
            raise BackendError("the memory backend is closed", backend=BACKEND_NAME)
        return self.conn

    @contextmanager
    def translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise translate(exc) from exc

    @asynccontextmanager
    async def read(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self.lock:
            conn = self.connection()
            with self.translated():
                yield conn

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """The lock and one BEGIN IMMEDIATE transaction, rolled back on any error."""
        async with self.lock:
            conn = self.connection()
            with self.translated():
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    with suppress(sqlite3.Error):
                        await conn.execute("ROLLBACK")
                    raise
                try:
                    await conn.execute("COMMIT")
                except sqlite3.Error:
                    with suppress(sqlite3.Error):
                        await conn.execute("ROLLBACK")
                    raise

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with self.translated():
                await conn.close()


async def claim_owner(conn: aiosqlite.Connection, owner: str, now: str, path: Path) -> None:
    await conn.execute("INSERT OR IGNORE INTO store_owner (id, user, claimed_at)"
                       " VALUES (1, ?, ?)", (owner, now))
    await conn.commit()
    await check_owner(conn, owner, path)


async def check_owner(conn: aiosqlite.Connection, owner: str, path: Path) -> None:
    async with conn.execute("SELECT user FROM store_owner WHERE id = 1") as cursor:
        row = await cursor.fetchone()
    if row is not None and row[0] != owner:
        raise StoreOwnedElsewhere(
            f"the memory store {path} belongs to user {row[0]!r}, not {owner!r}: set"
            f" memory.user to {row[0]!r}, or give {owner!r} a state_dir of their own",
            backend=BACKEND_NAME)
