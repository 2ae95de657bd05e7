"""The chain with real processes: PostgreSQL stopped in the middle of a sync and started again,
memoryd SIGKILLed while its outbox drains. Afterwards every message of every session is in
exactly one live segment in PostgreSQL, and recall through the chain finds them."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    daemon_env,
    lay_out_fixtures,
    memoryd_command,
    unsynced_messages,
    wait_for,
    wait_ready,
    write_config,
)

from tests.pg import database_on, own_server, start, stop

pytestmark = pytest.mark.slow




def _outbox_waiting(state: Path) -> int:
    path = state / "outbox.db"
    if not path.exists():
        return 0
    conn = sqlite3.connect(path, timeout=30)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM outbox WHERE parked = 0").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def _pg_segments(dsn: str) -> list[tuple[int, int, int]]:
    """(session, first, last) of every live conversation memory in PostgreSQL."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            return [tuple(r) for r in conn.execute(  # type: ignore[misc]
                "SELECT session_id, first_index, last_index FROM memories"
                " WHERE type = 'conversation' AND superseded_by IS NULL"
                " AND deleted_at IS NULL")]
    except psycopg.Error:
        return []


def _assert_each_message_once(state: Path, dsn: str) -> None:
    conn = sqlite3.connect(state / "memoryd.db")
    sessions = dict(conn.execute("SELECT id, message_count FROM sessions"))
    conn.close()
    ranges: dict[int, list[int]] = {}
    for session, first, last in _pg_segments(dsn):
        ranges.setdefault(session, []).extend(range(first, last + 1))
    for session, count in sessions.items():
        assert sorted(ranges.get(session, [])) == list(range(count)), f"session {session}"


def _setup(tmp_path: Path, pg: Any) -> tuple[Path, Path, dict[str, str], str]:
    roots = lay_out_fixtures(tmp_path / "agents")
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.2s",
                          sync_delay=0, sync_check_interval="0.1s", segment_max_chars=500,
                          memory={"backends": ["postgres", "sqlite"],
                                  "postgres": {"connect_timeout": 1}})
    dsn = database_on(pg)
    env = daemon_env(tmp_path)
    env["MEMORYD_POSTGRES_DSN"] = dsn
    return state, config, env, dsn


def _run(config: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=out)




def test_postgres_stopped_mid_sync_loses_and_doubles_nothing(tmp_path: Path) -> None:
    pg = own_server()
    state, config, env, dsn = _setup(tmp_path, pg)
    log = tmp_path / "run.log"
    proc = _run(config, env, log)
    try:
        wait_ready(state, proc.pid)
        wait_for(lambda: len(_pg_segments(dsn)) > 5, 60, "nothing reached postgres")
        stop(pg)
        try:
            # Saves go on into SQLite and the outbox while the server is away.
            wait_for(lambda: _outbox_waiting(state) > 0, 60, "nothing waited in the outbox")
            time.sleep(1.0)
        finally:
            start(pg)
        wait_for(lambda: (unsynced_messages(state / "memoryd.db") == 0
                          and _outbox_waiting(state) == 0), 120, "the outbox did not drain")
        recalled = subprocess.run(
            memoryd_command("--config", str(config), "recall", "--json", "--all-projects",
                            "file"), env=env, capture_output=True, text=True, timeout=60)
        assert recalled.returncode == 0, recalled.stderr
        results = json.loads(recalled.stdout)
        assert results and {r["layer"] for r in results} == {"postgres"}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    _assert_each_message_once(state, dsn)
    status = subprocess.run(memoryd_command("--config", str(config), "status", "--json"),
                            env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert dsn not in status.stdout
    memory = json.loads(status.stdout)["memory"]
    assert [layer["available"] for layer in memory["layers"]] == [True, True]
    assert memory["outbox"] == []


def test_sigkill_while_the_outbox_drains_lands_each_segment_once(tmp_path: Path) -> None:
    pg = own_server()
    state, config, env, dsn = _setup(tmp_path, pg)
    log = tmp_path / "run.log"
    stop(pg)
    try:
        # The whole history is saved while PostgreSQL is away: all of it waits in the outbox.
        proc = _run(config, env, log)
        wait_ready(state, proc.pid)
        wait_for(lambda: (unsynced_messages(state / "memoryd.db") == 0
                          and _outbox_waiting(state) > 0), 180,
                 "the history did not reach the fallback")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        start(pg)
    waiting = _outbox_waiting(state)
    assert waiting > 50
    rng = random.Random(5)
    progress = []
    for _ in range(8):
        if _outbox_waiting(state) == 0:
            break
        before = _outbox_waiting(state)
        proc = _run(config, env, log)
        wait_for(lambda before=before, proc=proc: (  # type: ignore[misc]
            _outbox_waiting(state) < before or proc.poll() is not None), 60,
            "the outbox did not start draining")
        time.sleep(rng.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        progress.append(_outbox_waiting(state))
    assert any(0 < left < waiting for left in progress), progress
    proc = _run(config, env, log)
    try:
        wait_ready(state, proc.pid)
        wait_for(lambda: _outbox_waiting(state) == 0, 120, "the outbox did not drain")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    _assert_each_message_once(state, dsn)
