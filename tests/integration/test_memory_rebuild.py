"""The README's recovery of a damaged, missing or empty `memory.db`, run as written
(issue 61.2): every message memoryd holds is back in memory, once."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from helpers import daemon_env, memoryd_command, write_config

SESSIONS = 24


def _line(session: int, index: int, minute: int, role: str = "user") -> str:
    return json.dumps({
        "type": role, "uuid": f"u{session}-{index}", "sessionId": f"sess{session}",
        "timestamp": f"2026-05-01T{10 + minute // 60:02d}:{minute % 60:02d}:00Z",
        "message": {"role": role, "content": f"session {session} message {index} about"
                                              f" topic{session} " + "words " * 40}}) + "\n"


def _memoryd(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args),
                          env=daemon_env(tmp_path), capture_output=True, text=True,
                          timeout=300)


def _write(root: Path, part: int) -> None:
    """Three messages in each session, then (`part` 2) two more in a third of them, after
    a pause: each session's tail saved by two syncs at two times."""
    for session in range(SESSIONS):
        with (root / "-p" / f"s{session}.jsonl").open("a") as handle:
            if part == 1:
                handle.write(_line(session, 0, 0) + _line(session, 1, 1, "assistant")
                             + _line(session, 2, 120))
            elif session % 3 == 0:
                handle.write(_line(session, 3, 121, "assistant") + _line(session, 4, 122))


def _coverage(state: Path) -> tuple[int, int, int, bool]:
    """(messages, in no live conversation memory, in two or more, every index at its end)."""
    archive = sqlite3.connect(state / "memoryd.db")
    memory = sqlite3.connect(state / "memory.db")
    try:
        sessions = archive.execute(
            "SELECT id, message_count, memory_sync_index FROM sessions").fetchall()
        segments = memory.execute(
            "SELECT session_id, first_index, last_index FROM memories WHERE type ="
            " 'conversation' AND deleted_at IS NULL AND superseded_by IS NULL").fetchall()
    finally:
        archive.close()
        memory.close()
    none = twice = 0
    for session, count, _index in sessions:
        for index in range(count):
            holding = sum(1 for s, first, last in segments
                          if s == session and first <= index <= last)
            none += holding == 0
            twice += holding > 1
    return (sum(s[1] for s in sessions), none, twice,
            all(index == count for _s, count, index in sessions))


def _damage(path: Path) -> None:
    """Garbage over one leaf page of the `memories` table (rows there are lost)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = [row[0] for row in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'memories' AND pagetype = 'leaf'")]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    assert len(pages) >= 2, pages
    with path.open("r+b") as handle:
        handle.seek(size * (pages[len(pages) // 2] - 1))
        handle.write(os.urandom(size))


@pytest.mark.parametrize("harm", ["damaged", "missing", "empty"])
def test_the_readme_recovery_brings_every_message_back_once(tmp_path: Path,
                                                             harm: str) -> None:
    """Sessions saved at two times and a fact remembered by hand; then `memory.db` is
    damaged, moved aside or emptied: `sync` and `doctor` say so and name the fix;
    `memoryd rebuild-memory` puts every message back in exactly one live conversation
    memory, every index at its end; the fact is back when its page still reads; a second
    rebuild changes nothing."""
    root = tmp_path / "claude"
    (root / "-p").mkdir(parents=True)
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {"claude": root})
    _write(root, 1)
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    assert _memoryd(tmp_path, config, "sync").returncode == 0
    _write(root, 2)
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    assert _memoryd(tmp_path, config, "sync").returncode == 0
    remembered = _memoryd(tmp_path, config, "remember", "the staging database is pg-staging-7")
    assert remembered.returncode == 0, remembered.stderr
    messages, none, twice, at_end = _coverage(state)
    assert (none, twice, at_end) == (0, 0, True) and messages == SESSIONS * 3 + 16

    path = state / "memory.db"
    if harm == "damaged":
        _damage(path)
    elif harm == "missing":
        path.rename(tmp_path / "memory.db.elsewhere")
    else:
        path.write_bytes(b"")
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    refused = _memoryd(tmp_path, config, "sync")
    assert refused.returncode == 74, (refused.returncode, refused.stderr)
    assert "rebuild-memory" in refused.stderr and "Traceback" not in refused.stderr
    doctor = _memoryd(tmp_path, config, "doctor")
    assert doctor.returncode != 0 and "rebuild-memory" in doctor.stdout, doctor.stdout
    if harm == "damaged":
        exported = _memoryd(tmp_path, config, "export", "--output", str(tmp_path / "e.jsonl"))
        assert exported.returncode == 0, exported.stderr
        assert len((tmp_path / "e.jsonl").read_text().splitlines()) > 0

    rebuilt = _memoryd(tmp_path, config, "rebuild-memory")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _coverage(state)[1:] == (0, 0, True)
    assert _memoryd(tmp_path, config, "sync").returncode == 0
    doctor = _memoryd(tmp_path, config, "doctor")
    assert "rebuild-memory" not in doctor.stdout, doctor.stdout
    if harm == "damaged":
        # The fact lay on the last page written: kept, unless that page was the one ruined.
        recalled = _memoryd(tmp_path, config, "recall", "staging database", "--json")
        salvage = next(state.glob("memory.db.damaged-*.jsonl")).read_text()
        assert ("pg-staging-7" in recalled.stdout) == ("pg-staging-7" in salvage)

    again = _memoryd(tmp_path, config, "rebuild-memory")
    assert again.returncode == 0, again.stderr
    assert _coverage(state)[1:] == (0, 0, True)
    memory = sqlite3.connect(state / "memory.db")
    try:
        facts = memory.execute("SELECT COUNT(*) FROM memories WHERE content LIKE"
                               " '%pg-staging-7%' AND deleted_at IS NULL").fetchone()[0]
    finally:
        memory.close()
    assert facts <= 1
