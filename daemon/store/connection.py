"""Opening the daemon's SQLite database: WAL, private file modes, errors translated."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import aiosqlite

from daemon.errors import StoreBusy, StoreError

_TRANSIENT_MARKERS = ("database is locked", "database or disk is full", "disk i/o error",
                      "database table is locked", "unable to open database")


def translate(exc: sqlite3.Error) -> StoreError:
    text = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError) and any(m in text for m in _TRANSIENT_MARKERS):
        return StoreBusy(str(exc))
    return StoreError(str(exc))


def ensure_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)


def _ensure_private_file(path: Path) -> None:
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    elif stat.S_IMODE(path.stat().st_mode) != 0o600:
        path.chmod(0o600)


async def connect(path: Path, *, readonly: bool = False) -> aiosqlite.Connection:
    """A connection in WAL mode with foreign keys on; the file is created 0600."""
    try:
        if readonly:
            conn = await aiosqlite.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        else:
            ensure_private_dir(path.parent)
            _ensure_private_file(path)
            conn = await aiosqlite.connect(path, isolation_level=None)
        await conn.execute("PRAGMA busy_timeout = 5000")
        if not readonly:
            await conn.execute("PRAGMA journal_mode = WAL")
            # WAL with synchronous=NORMAL is durable against process crashes,
            # which is what the exactly-once guarantee is about.
            await conn.execute("PRAGMA synchronous = NORMAL")
        await conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        raise translate(exc) from exc
    conn.row_factory = aiosqlite.Row
    if not readonly:
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists() and stat.S_IMODE(side.stat().st_mode) != 0o600:
                side.chmod(0o600)
    return conn


@asynccontextmanager
async def transaction(conn: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error; sqlite errors become StoreErrors."""
    try:
        await conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise translate(exc) from exc
    try:
        yield conn
    except BaseException as exc:
        with suppress(sqlite3.Error):
            await conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise translate(exc) from exc
        raise
    else:
        try:
            await conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
            raise translate(exc) from exc
