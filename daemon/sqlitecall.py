"""One call of synchronous SQLite work on an aiosqlite connection's own thread.

Shared by the daemon's store and the embedded memory backend, each of which
translates errors its own way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Concatenate, ParamSpec, TypeVar

import aiosqlite

_P = ParamSpec("_P")
_T = TypeVar("_T")


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
