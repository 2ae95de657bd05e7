"""SQLite is opened one way (`memoryd/sqlite.py`): the small durable databases (the chain's
outbox, the gateway's ledger) are created private, and their errors are translated by
whether they may pass."""

from __future__ import annotations

import sqlite3
import stat
from functools import partial
from pathlib import Path

import pytest

from memoryd import sqlite
from memoryd.errors import BackendError, BackendUnavailable
from memoryd.memory.outbox import Outbox


async def test_a_durable_database_is_private_and_durable(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "side.db"
    conn = await sqlite.open_durable(
        path, what="side", schema=["CREATE TABLE t (x)"],
        transient=partial(BackendUnavailable, backend="t"),
        other=partial(BackendError, backend="t"))
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [tuple(r) for r in await conn.execute_fetchall("PRAGMA journal_mode")] == [("wal",)]
        assert [tuple(r) for r in await conn.execute_fetchall("PRAGMA synchronous")] == [(2,)]
    finally:
        await conn.close()


def test_errors_that_may_pass_are_transient() -> None:
    translate = sqlite.translating("outbox x", transient=partial(BackendUnavailable, backend="o"),
                                   other=partial(BackendError, backend="o"))
    locked = translate(sqlite3.OperationalError("database is locked"))
    assert isinstance(locked, BackendUnavailable) and "outbox x: database is locked" in str(locked)
    other = translate(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert type(other) is BackendError


async def test_an_outbox_where_no_file_can_be_made_is_unavailable(tmp_path: Path) -> None:
    from memoryd.clock import FakeClock

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(BackendUnavailable):
        await Outbox.open(blocker / "outbox.db", clock=FakeClock())
    box = await Outbox.open(tmp_path / "state" / "outbox.db", clock=FakeClock())
    try:
        assert stat.S_IMODE((tmp_path / "state" / "outbox.db").stat().st_mode) == 0o600
    finally:
        await box.close()
