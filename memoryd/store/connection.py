"""Opening the daemon's SQLite database: WAL, private file modes, errors translated."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import aiosqlite

from memoryd import sqlite
from memoryd.errors import (
    StateDirError,
    StoreBusy,
    StoreDamaged,
    StoreError,
)
from memoryd.files import ensure_private_dir
from memoryd.sqlite import call_on_connection
from memoryd.store.wal import WAL_BOUND_BYTES


def translate(exc: sqlite3.Error) -> StoreError:
    kind = sqlite.kind_of(exc)
    if kind is sqlite.Kind.DAMAGED:
        return StoreDamaged(f"{exc} (see `memoryd doctor` and docs/operations.md)")
    if kind is sqlite.Kind.TRANSIENT:
        return StoreBusy(str(exc))
    return StoreError(str(exc))


#: Pages of the state database. Messages average about 4 KB with their raw line, and
#: a backfill writes hundreds of megabytes: with 8 KB pages most rows fit one page, and
#: the log and its checkpoints take half the system calls of SQLite's 4 KB default
#: (benchmarks.backfill: about 7 % less CPU).
PAGE_SIZE = 8192


async def connect(path: Path, *, readonly: bool = False,
                  immutable: bool = False) -> aiosqlite.Connection:
    """A connection in WAL mode with foreign keys on; the file is created 0600.

    On any failure the connection is closed before the error leaves: an open
    aiosqlite connection's thread would keep the process from exiting.
    """
    pragmas = ["busy_timeout = 5000"]
    if not readonly:
        ensure_private_dir(path.parent)
        try:
            sqlite.create_private(path)
        except OSError as exc:
            raise StateDirError(str(path.parent), exc.strerror or str(exc)) from None
        # page_size takes effect only when the file is new (before WAL mode is set); an
        # older database keeps the page size it was made with. WAL with synchronous=NORMAL
        # is durable against process crashes, which is what exactly-once is about.
        # journal_size_limit: when the log starts over, a file a backfill grew is cut
        # back to the bound rather than kept at its peak for as long as the daemon runs.
        pragmas += [f"page_size = {PAGE_SIZE}", "journal_mode = WAL", "synchronous = NORMAL",
                    f"journal_size_limit = {WAL_BOUND_BYTES}"]
    return await sqlite.connect(path, translate=translate, readonly=readonly,
                                immutable=immutable, pragmas=[*pragmas, "foreign_keys = ON"])


def integrity_problems(path: Path, *, full: bool = False, limit: int = 20) -> list[str]:
    """SQLite's own check of the database at `path`, read-only: [] when it is sound.

    `quick_check` (the default) verifies every page and record but not that the
    indexes match their tables; `integrity_check` (`full`) also does. Blocking:
    call it on a worker thread. A locked database raises StoreBusy.
    """
    pragma = "integrity_check" if full else "quick_check"
    try:
        with sqlite.opened(path, readonly=True) as conn:
            rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}({int(limit)})")]
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
    sqlite errors become StoreErrors (`memoryd.sqlite` leaves them as they are).

    Work of many statements (a batch commit) then costs one round trip through the
    event loop instead of one per statement, and holds the loop's thread only to
    hand it over.
    """
    try:
        return await call_on_connection(conn, fn, *args, **kwargs)
    except sqlite3.Error as exc:
        raise translate(exc) from exc


