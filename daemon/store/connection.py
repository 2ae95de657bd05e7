"""Opening the daemon's SQLite database: WAL, private file modes, errors translated."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import aiosqlite

from daemon.errors import (
    StateDirError,
    StoreBusy,
    StoreDamaged,
    StoreError,
    is_damage,
)
from daemon.files import ensure_private_dir
from daemon.sqlitecall import call_on_connection

_TRANSIENT_MARKERS = ("database is locked", "database or disk is full", "disk i/o error",
                      "database table is locked", "unable to open database")


def translate(exc: sqlite3.Error) -> StoreError:
    text = str(exc).lower()
    if is_damage(text):
        return StoreDamaged(f"{exc} (see `memoryd doctor` and the README's Recovery)")
    if isinstance(exc, sqlite3.OperationalError) and any(m in text for m in _TRANSIENT_MARKERS):
        return StoreBusy(str(exc))
    return StoreError(str(exc))


def _ensure_private_file(path: Path) -> None:
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    elif stat.S_IMODE(path.stat().st_mode) != 0o600:
        path.chmod(0o600)


#: Pages of the state database. Messages average about 4 KB with their raw line, and
#: a backfill writes hundreds of megabytes: with 8 KB pages most rows fit one page, and
#: the log and its checkpoints take half the system calls of SQLite's 4 KB default
#: (benchmarks.backfill: about 7 % less CPU).
PAGE_SIZE = 8192


async def connect(path: Path, *, readonly: bool = False) -> aiosqlite.Connection:
    """A connection in WAL mode with foreign keys on; the file is created 0600.

    On any failure the connection is closed before the error leaves: an open
    aiosqlite connection's thread would keep the process from exiting.
    """
    try:
        if readonly:
            conn = await aiosqlite.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        else:
            ensure_private_dir(path.parent)
            try:
                _ensure_private_file(path)
            except OSError as exc:
                raise StateDirError(str(path.parent), exc.strerror or str(exc)) from None
            conn = await aiosqlite.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise translate(exc) from exc
    try:
        await conn.execute("PRAGMA busy_timeout = 5000")
        if not readonly:
            # Takes effect only when the file is new (before WAL mode is set); an older
            # database keeps the page size it was made with.
            await conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            await conn.execute("PRAGMA journal_mode = WAL")
            # WAL with synchronous=NORMAL is durable against process crashes,
            # which is what the exactly-once guarantee is about.
            await conn.execute("PRAGMA synchronous = NORMAL")
        await conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        await conn.close()
        raise translate(exc) from exc
    except BaseException:
        await conn.close()
        raise
    conn.row_factory = aiosqlite.Row
    if not readonly:
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists() and stat.S_IMODE(side.stat().st_mode) != 0o600:
                side.chmod(0o600)
    return conn


def integrity_problems(path: Path, *, full: bool = False, limit: int = 20) -> list[str]:
    """SQLite's own check of the database at `path`, read-only: [] when it is sound.

    `quick_check` (the default) verifies every page and record but not that the
    indexes match their tables; `integrity_check` (`full`) also does. Blocking:
    call it on a worker thread. A locked database raises StoreBusy.
    """
    pragma = "integrity_check" if full else "quick_check"
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}({int(limit)})")]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        error = translate(exc)
        if error.transient:
            raise error from None
        return [str(exc)]
    return [] if rows == ["ok"] else rows


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


async def database_file(conn: aiosqlite.Connection) -> Path | None:
    """The file behind `conn`'s main database; None for an in-memory one."""
    async with conn.execute("PRAGMA database_list") as cursor:
        async for row in cursor:
            if row[1] == "main":
                return Path(row[2]) if row[2] else None
    return None


async def disable_autocheckpoint(conn: aiosqlite.Connection) -> None:
    """Commits on `conn` no longer copy the log into the database (a Checkpointer does)."""
    await conn.execute("PRAGMA wal_autocheckpoint = 0")


_P = ParamSpec("_P")
_T = TypeVar("_T")


async def run_on_connection(
    conn: aiosqlite.Connection,
    fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """`fn(sqlite3_connection, *args)` run on the connection's own thread, in one hop;
    sqlite errors become StoreErrors (`daemon.sqlitecall` leaves them as they are).

    Work of many statements (a batch commit) then costs one round trip through the
    event loop instead of one per statement, and holds the loop's thread only to
    hand it over.
    """
    try:
        return await call_on_connection(conn, fn, *args, **kwargs)
    except sqlite3.Error as exc:
        raise translate(exc) from exc


def iso_utc(moment: datetime) -> str:
    """A timezone-aware time as fixed-width ISO-8601 UTC with milliseconds and `Z`."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: pass a timezone-aware time")
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
