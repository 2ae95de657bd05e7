"""The write-ahead log stays bounded while a writer keeps committing (a backfill)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from memoryd.clock import FakeClock, SystemClock
from memoryd.config import load_settings
from memoryd.ingest.ingester import Ingester
from memoryd.store import connect, migrate, wal
from memoryd.store.connection import disable_autocheckpoint
from memoryd.store.wal import WAL_BOUND_BYTES, Checkpointer, log_size

pytestmark = pytest.mark.usefixtures("clean_environment")

COMMIT = 128 << 10
BOUND = 2 << 20


async def test_the_writer_keeps_the_log_bounded_though_it_never_pauses(
        tmp_path: Path) -> None:
    # 200 commits of 128 KB (25 MB), back to back as the ingester makes them: passive
    # checkpoints alone never finish, and the log would hold all of it.
    path = tmp_path / "state.db"
    checkpointer = Checkpointer(path, SystemClock(), every_bytes=256 << 10, bound_bytes=BOUND)
    conn = await connect(path)
    try:
        await disable_autocheckpoint(conn)
        await conn.execute("CREATE TABLE t (b BLOB)")
        peak = 0
        for _ in range(200):
            await checkpointer.keep_bounded(conn)
            await conn.execute("INSERT INTO t VALUES (randomblob(?))", (COMMIT,))
            checkpointer.committed(COMMIT)
            peak = max(peak, log_size(path))
        await checkpointer.wait()
    finally:
        await conn.close()
    assert peak <= BOUND + COMMIT + (64 << 10), f"the log reached {peak / (1 << 20):.1f} MB"


async def test_a_reader_holding_its_snapshot_costs_the_writer_one_wait(
        tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    checkpointer = Checkpointer(path, SystemClock(), every_bytes=1 << 40, bound_bytes=BOUND)
    conn = await connect(path)
    await conn.execute("PRAGMA busy_timeout = 600")  # past _WAITED: a wait for the reader
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        await disable_autocheckpoint(conn)
        await conn.execute("CREATE TABLE t (b BLOB)")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM t").fetchone()  # holds its snapshot
        tries = 0
        for _ in range(40):
            before = checkpointer._next_try
            await checkpointer.keep_bounded(conn)
            tries += checkpointer._next_try != before
            await conn.execute("INSERT INTO t VALUES (randomblob(?))", (COMMIT,))
        # 5 MB written past a 2 MB bound with the reader in the way: one try each time
        # the log grew by another bound, not one per commit.
        assert 1 <= tries <= 2
        reader.execute("COMMIT")
        for _ in range(20):  # the reader gone, the next try past the new mark empties it
            await checkpointer.keep_bounded(conn)
            await conn.execute("INSERT INTO t VALUES (randomblob(?))", (COMMIT,))
        assert log_size(path) <= BOUND
    finally:
        reader.close()
        await conn.close()


async def test_a_backfill_keeps_the_log_within_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wal, "WAL_BOUND_BYTES", BOUND)
    monkeypatch.setattr(wal, "CHECKPOINT_BYTES", 256 << 10)
    root = tmp_path / "claude"
    project = root / "-home-user-project"
    project.mkdir(parents=True)
    text = "word " * 800
    lines = [orjson.dumps({"type": "user", "uuid": f"u-{i}", "timestamp":
                           "2025-09-03T00:47:19.293Z", "message": {"role": "user",
                                                                   "content": f"{i} {text}"}})
             for i in range(3000)]
    (project / "long.jsonl").write_bytes(b"\n".join(lines) + b"\n")  # 12 MB
    settings = load_settings(None, state_dir=str(tmp_path / "state"),
                             sources=[{"kind": "claude", "root": str(root)}],
                             read_chunk_bytes=256 << 10)
    conn = await connect(settings.database_path)
    try:
        await migrate(conn)
        ingester = Ingester(conn, settings, FakeClock())
        await ingester.load()
        await ingester.run_once()
        await ingester.settle()
        async with conn.execute("SELECT count(*) FROM session_messages") as cursor:
            row = await cursor.fetchone()
        # Before closing: the last connection's close empties the log anyway.
        left = log_size(settings.database_path)
    finally:
        await conn.close()
    assert row is not None and tuple(row) == (3000,)
    # Without the bound the log ends at about twice the transcript (messages and raw).
    assert left <= BOUND + (2 << 20), f"the log holds {left / (1 << 20):.1f} MB"


async def test_a_log_that_starts_over_is_cut_back_to_the_bound(tmp_path: Path) -> None:
    conn = await connect(tmp_path / "state.db")
    try:
        async with conn.execute("PRAGMA journal_size_limit") as cursor:
            row = await cursor.fetchone()
    finally:
        await conn.close()
    assert row is not None and row[0] == WAL_BOUND_BYTES
