"""memoryd.files: one way to replace a file, and private directories."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from memoryd.files import atomic_write, atomic_writer


def test_a_replaced_file_has_its_mode_whatever_the_umask(tmp_path: Path) -> None:
    """The new file is exactly the mode asked for, under umask 000 as under 077."""
    target = tmp_path / "f.json"
    for umask in (0o000, 0o077):
        old = os.umask(umask)
        try:
            atomic_write(target, "one")
            assert stat.S_IMODE(target.stat().st_mode) == 0o600
            atomic_write(target, b"two", mode=0o644)
            assert stat.S_IMODE(target.stat().st_mode) == 0o644
        finally:
            os.umask(old)
    assert target.read_bytes() == b"two"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """An error inside the block keeps the target as it was and removes the temporary."""
    target = tmp_path / "keep.txt"
    target.write_text("original")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write("half")
        raise RuntimeError("stop")
    assert target.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_a_planted_symlink_at_a_predictable_name_is_not_followed(tmp_path: Path) -> None:
    """The temporary name is unpredictable and created exclusively: a symlink an attacker
    placed at `<name>.tmp` is neither written through nor removed."""
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / "out.json.tmp").symlink_to(victim)
    atomic_write(tmp_path / "out.json", "data")
    assert victim.read_text() == "untouched"
    assert (tmp_path / "out.json").read_text() == "data"


async def test_a_state_database_newer_than_this_memoryd_is_refused(tmp_path: Path) -> None:
    """One migration runner for both databases: the state database, like the memory one,
    refuses to be written by a memoryd older than its schema."""
    import sqlite3

    from memoryd.errors import StoreError
    from memoryd.store.connection import connect
    from memoryd.store.migrations import MIGRATIONS, migrate

    path = tmp_path / "memoryd.db"
    conn = await connect(path)
    try:
        assert await migrate(conn) == MIGRATIONS[-1][0]
    finally:
        await conn.close()
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO schema_migrations VALUES (999, 'from the future', 'later')")
    conn = await connect(path)
    try:
        with pytest.raises(StoreError, match="newer than this memoryd"):
            await migrate(conn)
    finally:
        await conn.close()
