"""Real crashes during recovery: every message ends up in exactly one saved segment.

`MEMORYD_CRASH_ROUNDS=300 python -m pytest tests/crash/test_sigkill_recovery.py -k grows -s`
runs the growing-session loop for hundreds of kills (CI runs 25) and prints how many
landed between a segment's commit and the sync index's move.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from helpers import (
    daemon_env,
    lay_out_fixtures,
    memoryd_command,
    unsynced_messages,
    wait_ready,
    write_config,
)

pytestmark = pytest.mark.slow




def test_sigkill_during_sync_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """SIGKILL while segments are saved; at the end each message is in exactly one segment."""
    roots = lay_out_fixtures(tmp_path / "agents")
    state = tmp_path / "state"
    # Small segments and no delay: many saves, so the kills land in the middle of them.
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.2s",
                          sync_delay=0, sync_check_interval="0.1s", segment_max_chars=500)
    env = daemon_env(tmp_path)
    subprocess.run(memoryd_command("--config", str(config), "ingest", "--once"), env=env,
                   check=True, capture_output=True)
    db = state / "memoryd.db"
    total = unsynced_messages(db)
    assert total > 1000

    rng = random.Random(3)
    kills = 0
    progress = []
    while kills < 12 and unsynced_messages(db) > 0:
        before = unsynced_messages(db)
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Kill once saving is under way (start-up time varies with the machine's load),
        # a random moment later, so the kill lands inside a save, not before the first.
        deadline = time.monotonic() + 60
        while unsynced_messages(db) == before and proc.poll() is None:
            assert time.monotonic() < deadline, "the daemon never started saving"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        progress.append(unsynced_messages(db))
    assert any(0 < left < total for left in progress), f"no kill mid-sync: {progress}"

    with (tmp_path / "final.log").open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    wait_ready(state, proc.pid)
    deadline = time.monotonic() + 120
    while unsynced_messages(db) > 0:
        assert time.monotonic() < deadline, "recovery did not finish"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0

    conn = sqlite3.connect(db)
    sessions = {sid: (count, index) for sid, count, index in conn.execute(
        "SELECT id, message_count, memory_sync_index FROM sessions")}
    conn.close()
    assert all(count == index for count, index in sessions.values())

    ranges: dict[int, list[tuple[int, int]]] = {}
    records = _conversation_provenance(state / "memory.db")
    for session_id, first, last in records:
        ranges.setdefault(session_id, []).append((first, last))
    for session_id, (count, _index) in sessions.items():
        covered = sorted(i for first, last in ranges.get(session_id, [])
                         for i in range(first, last + 1))
        assert covered == list(range(count)), f"session {session_id}"


def _conversation_provenance(memory_db: Path) -> list[tuple[int, int, int]]:
    """(session, first index, last index) of every conversation memory, read by the backend."""
    import asyncio

    from memoryd.clock import SystemClock
    from memoryd.memory import SQLiteMemoryBackend

    async def read() -> list[tuple[int, int, int]]:
        backend = await SQLiteMemoryBackend.open(memory_db, clock=SystemClock())
        try:
            found = []
            async for record in backend.export():
                if record["type"] == "conversation":
                    p = record["provenance"]
                    found.append((p["session_id"], p["first_index"], p["last_index"]))
            return found
        finally:
            await backend.close()

    return asyncio.run(read())


def _segment_count(memory_db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{memory_db}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0
    try:
        return int(conn.execute("SELECT COUNT(*) FROM memories WHERE type = 'conversation'"
                                ).fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def _live_ranges(memory_db: Path) -> list[tuple[int, int, int]]:
    """(session, first, last) of every live conversation memory."""
    conn = sqlite3.connect(memory_db)
    try:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            "SELECT session_id, first_index, last_index FROM memories WHERE type ="
            " 'conversation' AND superseded_by IS NULL AND deleted_at IS NULL")]
    finally:
        conn.close()


def _saved_past_the_index(state: Path) -> bool:
    """Whether a live segment reaches past its session's sync index: a kill in the gap."""
    conn = sqlite3.connect(state / "memoryd.db", timeout=30)
    try:
        index = conn.execute("SELECT memory_sync_index FROM sessions").fetchone()
    finally:
        conn.close()
    if index is None or not (state / "memory.db").exists():
        return False
    return any(last >= index[0] for _s, _f, last in _live_ranges(state / "memory.db"))


def test_sigkill_while_a_session_grows_leaves_each_message_in_one_live_segment(
        tmp_path: Path) -> None:
    """Kills land while tails are saved and the session keeps growing between them: at the
    end every message index is in exactly one live segment (a tail saved before a crash is
    superseded by its longer save, never recalled beside it)."""
    import json

    root = tmp_path / "claude"
    project = root / "-p"
    project.mkdir(parents=True)
    transcript = project / "grow.jsonl"
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, {"claude": root},
                          poll_interval="0.1s", sync_delay=0, sync_max_lag=0,
                          sync_check_interval="0.05s", segment_max_chars=100_000)
    env = daemon_env(tmp_path)
    rng = random.Random(11)
    written = kills_in_the_gap = 0
    rounds = int(os.environ.get("MEMORYD_CRASH_ROUNDS", "25"))
    for _round in range(rounds):
        with transcript.open("a") as out:
            for _ in range(rng.randint(1, 4)):
                out.write(json.dumps({
                    "type": "user", "uuid": f"g{written}", "sessionId": "grow", "cwd": "/p",
                    "timestamp": f"2026-01-01T00:{written // 60 % 60:02d}:{written % 60:02d}Z",
                    "message": {"role": "user", "content": f"message number {written}"}}) + "\n")
                written += 1
        saved = _segment_count(state / "memory.db")
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Aim at the gap between a segment's commit in memory.db and the sync index's
        # move in memoryd.db: kill the moment a new segment shows (or at a random time).
        deadline = time.monotonic() + rng.uniform(0.5, 3.0)
        while time.monotonic() < deadline and _segment_count(state / "memory.db") == saved:
            time.sleep(0.0005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills_in_the_gap += _saved_past_the_index(state)
    print(f"{rounds} kills, {kills_in_the_gap} between a segment's commit and the index move")
    assert kills_in_the_gap > 0, "no kill landed in the gap: the loop tests nothing"
    with (tmp_path / "final.log").open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    wait_ready(state, proc.pid)
    deadline = time.monotonic() + 60
    while unsynced_messages(state / "memoryd.db") > 0 or not (state / "memory.db").exists():
        assert time.monotonic() < deadline, "recovery did not finish"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    covered = sorted(i for _s, first, last in _live_ranges(state / "memory.db")
                     for i in range(first, last + 1))
    assert covered == list(range(written))
