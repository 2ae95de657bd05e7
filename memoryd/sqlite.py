"""SQLite plumbing shared by the daemon's store and the embedded memory backend.

One place for what both databases do alike: opening a file (created 0600, its
`-wal`/`-shm` side files 0600 too), applying pragmas, closing the connection when
anything after the open fails, telling what an SQLite error means (`Kind`), one
migration runner (trigger bodies kept whole, each migration and its bookkeeping
row in one transaction), and synchronous work run on a connection's own thread.
Each caller translates errors into its own branch of the error tree (`StoreError`,
`BackendError`) through the `translate` it passes in.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from enum import Enum
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import aiosqlite
import structlog

from memoryd.errors import MemorydError, is_damage
from memoryd.files import make_dirs

log = structlog.get_logger("memoryd.sqlite")

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Errors that pass: another writer holds the lock, the disk is full or failing.
_TRANSIENT_MARKERS = ("database is locked", "database or disk is full", "disk i/o error",
                      "database table is locked", "unable to open database")

Translate = Callable[[sqlite3.Error], MemorydError]
#: (version, description, script) of one schema migration.
Migration = tuple[int, str, str]


class Kind(Enum):
    """What an SQLite error says of its database."""

    DAMAGED = "damaged"  # not a database, or malformed: never write to it again
    TRANSIENT = "transient"  # locked, full: may succeed later
    OTHER = "other"


def kind_of(exc: sqlite3.Error) -> Kind:
    text = str(exc).lower()
    if is_damage(text):
        return Kind.DAMAGED
    if isinstance(exc, sqlite3.OperationalError) and any(m in text for m in _TRANSIENT_MARKERS):
        return Kind.TRANSIENT
    return Kind.OTHER


def side_files(path: Path) -> tuple[Path, Path, Path]:
    """The database file and its write-ahead log and shared-memory files."""
    return path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def make_private(path: Path) -> None:
    """Mode 0600 on the database and its side files, where they exist."""
    for candidate in side_files(path):
        if candidate.exists() and stat.S_IMODE(candidate.stat().st_mode) != 0o600:
            candidate.chmod(0o600)


def create_private(path: Path) -> None:
    """The database file created 0600 before SQLite opens it (SQLite would follow the
    umask); an existing one made 0600."""
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    make_private(path)


async def connect(path: Path, *, translate: Translate, pragmas: Sequence[str],
                  readonly: bool = False, immutable: bool = False,
                  then: Callable[[aiosqlite.Connection], Awaitable[None]] | None = None,
                  ) -> aiosqlite.Connection:
    """An autocommit connection to `path` with `pragmas` applied, rows as `aiosqlite.Row`;
    `then` (migrations, functions) runs on it before it is handed over. Whatever fails
    after the open closes the connection; SQLite's errors become `translate`'s.
    A writable database's file must exist already (`create_private`). `immutable`: read
    as a file no one writes (no lock, no `-shm` to create: a full disk), for a reader
    where no daemon runs."""
    try:
        if readonly:
            flags = "mode=ro&immutable=1" if immutable else "mode=ro"
            conn = await aiosqlite.connect(f"file:{path}?{flags}", uri=True,
                                           isolation_level=None)
        else:
            conn = await aiosqlite.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise translate(exc) from exc
    try:
        for pragma in pragmas:
            await conn.execute(f"PRAGMA {pragma}")
        conn.row_factory = aiosqlite.Row
        if then is not None:
            await then(conn)
    except sqlite3.Error as exc:
        await conn.close()
        raise translate(exc) from exc
    except BaseException:
        await conn.close()
        raise
    if not readonly:
        make_private(path)
    return conn


@contextmanager
def opened(path: Path, *, readonly: bool = False,
           timeout: float = 5.0) -> Iterator[sqlite3.Connection]:
    """A plain, blocking connection for one short job on a worker thread (an integrity
    check, a checkpoint), closed when it ends; autocommit. `readonly`: the file as it
    is, never created."""
    conn = (sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout,
                            isolation_level=None) if readonly
            else sqlite3.connect(path, timeout=timeout, isolation_level=None))
    try:
        yield conn
    finally:
        conn.close()


def translating(what: str, *, transient: Callable[[str], MemorydError],
                other: Callable[[str], MemorydError]) -> Translate:
    """A `translate` for a database of one purpose: an error that may pass (locked, full)
    as `transient`, any other as `other`, each message led by `what`."""
    def translate(exc: sqlite3.Error) -> MemorydError:
        make = transient if kind_of(exc) is Kind.TRANSIENT else other
        return make(f"{what}: {exc}")

    return translate


#: A small database of its own that must not lose a commit (the chain's outbox, the
#: gateway's ledger): every commit on disk before it returns.
DURABLE = ("journal_mode = WAL", "synchronous = FULL", "busy_timeout = 5000")


async def open_durable(path: Path, *, what: str, schema: Sequence[str],
                       transient: Callable[[str], MemorydError],
                       other: Callable[[str], MemorydError]) -> aiosqlite.Connection:
    """`path` opened as a DURABLE database (its directory and the file created 0600 first),
    `schema`'s statements run on it. Errors are `translating(what, ...)`'s; a directory
    or file that cannot be made is `transient`."""
    try:
        await asyncio.to_thread(_made_private, path)
    except OSError as exc:
        raise transient(f"{what}: {exc}") from exc

    async def create(conn: aiosqlite.Connection) -> None:
        for statement in schema:
            await conn.execute(statement)

    return await connect(path, translate=translating(what, transient=transient, other=other),
                         pragmas=DURABLE, then=create)


def _made_private(path: Path) -> None:
    make_dirs(path.parent)
    create_private(path)


async def shrink_memory(conn: aiosqlite.Connection) -> None:
    """Hand back the connection's page cache (`PRAGMA shrink_memory`): up to 2 MB each,
    filled by a backfill and otherwise kept for the connection's life. Pages are read
    again on demand, from the system's file cache. A closed connection has none."""
    with suppress(sqlite3.Error, ValueError):
        await conn.execute("PRAGMA shrink_memory")


def statements(script: str) -> list[str]:
    """A script's statements, keeping trigger bodies (BEGIN ... END;) whole."""
    found: list[str] = []
    pending = ""
    for part in script.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                found.append(pending.strip())
            pending = ""
    return found


async def schema_version(conn: aiosqlite.Connection) -> int:
    """The newest migration applied (0 for a new database)."""
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    async with conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def migrate(conn: aiosqlite.Connection, migrations: Sequence[Migration], *,
                  applied_at: str, translate: Translate,
                  too_new: Callable[[int, int], MemorydError], event: str,
                  **fields: Any) -> int:
    """Apply every migration newer than the database, each with its bookkeeping row in one
    transaction; the version reached. A database newer than the newest migration here
    raises `too_new(its version, ours)`: an older memoryd must not write to it."""
    latest = migrations[-1][0] if migrations else 0
    try:
        version = await schema_version(conn)
        if version > latest:
            raise too_new(version, latest)
        for number, description, script in migrations:
            if number <= version:
                continue
            await conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in statements(script):
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, description, applied_at)"
                    " VALUES (?, ?, ?)", (number, description, applied_at))
            except BaseException:
                with suppress(sqlite3.Error):
                    await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")
            log.info(event, version=number, description=description, **fields)
            version = number
    except sqlite3.Error as exc:
        raise translate(exc) from exc
    return version


async def call_on_connection(
    conn: aiosqlite.Connection,
    fn: Callable[Concatenate[sqlite3.Connection, _P], _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """`fn(sqlite3_connection, *args)` on the connection's thread, in one hop through the
    event loop however many statements it runs; sqlite errors are raised as they are.
    aiosqlite has no public call for this: its `_execute` and `_conn` (both there since
    0.17) are used here and nowhere else."""
    raw: sqlite3.Connection = conn._conn

    def call() -> _T:
        return fn(raw, *args, **kwargs)

    result: Any = await conn._execute(call)  # type: ignore[no-untyped-call]
    return result  # type: ignore[no-any-return]


@contextmanager
def immediate_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT on a plain sqlite3 connection (inside a call above),
    rolled back on any error, which is raised as it is."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
