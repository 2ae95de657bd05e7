"""Signals to a real `memoryd run`: SIGINT/SIGTERM stop it cleanly, SIGHUP reloads settings."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from helpers import daemon_env, memoryd_command, wait_for, wait_ready, write_config


def _count(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM session_messages").fetchone()[0])
    finally:
        conn.close()




def _write_message(project: Path, name: str, key: str) -> None:
    project.mkdir(parents=True, exist_ok=True)
    record = {"type": "user", "uuid": key, "message": {"role": "user", "content": key}}
    with (project / name).open("a") as handle:
        handle.write(json.dumps(record) + "\n")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stop_signals_exit_zero_within_grace(tmp_path: Path, signum: signal.Signals) -> None:
    """SIGINT and SIGTERM stop the daemon with status 0 within the shutdown grace."""
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {"claude": tmp_path / "claude"},
                          shutdown_grace="3s")
    with (tmp_path / "run.log").open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    wait_ready(state, proc.pid)
    started = time.monotonic()
    proc.send_signal(signum)
    assert proc.wait(timeout=15) == 0, (tmp_path / "run.log").read_text()
    assert time.monotonic() - started < 3 + 2


def test_sighup_reloads_sources_and_keeps_running_on_bad_config(tmp_path: Path) -> None:
    """SIGHUP adds a new source without a restart; a broken file is refused and logged."""
    state = tmp_path / "state"
    first, second = tmp_path / "claude-a", tmp_path / "claude-b"
    config_path = tmp_path / "c.yaml"
    write_config(config_path, state, {"claude": first}, poll_interval="0.2s")
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config_path), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(state, proc.pid)
        db = state / "memoryd.db"
        _write_message(first / "-p", "a.jsonl", "in-a")
        wait_for(lambda: _count(db) == 1)
        _write_message(second / "-q", "b.jsonl", "in-b")
        time.sleep(1.0)
        assert _count(db) == 1  # the second root is not a source yet

        config_path.write_text(
            f"state_dir: {state}\npoll_interval: 0.2s\nsources:\n"
            f"  - {{kind: claude, root: {first}}}\n  - {{kind: claude, root: {second}}}\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: _count(db) == 2)

        config_path.write_text("poll_interval: never\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload_rejected" in log_path.read_text())
        assert proc.poll() is None
        _write_message(second / "-q", "b.jsonl", "still-following")
        wait_for(lambda: _count(db) == 3)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, log_path.read_text()


def test_sigterm_during_a_long_sync_stops_within_grace_and_loses_nothing(
        tmp_path: Path) -> None:
    """Issue 29.9: SIGTERM took 65 s while one long session was saved, and every stop
    logged CancelledError tracebacks. The save stops at its next safe point within the
    grace (not when the grace runs out: it is long here), the stop logs no error, and the
    next run saves the rest: every message in exactly one live segment."""
    state = tmp_path / "state"
    project = tmp_path / "claude" / "-p"
    project.mkdir(parents=True)
    filler = "the quick brown fox jumps over the lazy dog " * 24
    with (project / "long.jsonl").open("w") as handle:
        for i in range(40_000):
            role = "user" if i % 2 == 0 else "assistant"
            content = (f"{i} {filler}" if role == "user"
                       else [{"type": "text", "text": f"{i} {filler}"}])
            handle.write(json.dumps({
                "type": role, "uuid": f"m{i}", "sessionId": "long",
                "timestamp": f"2026-05-01T{10 + i // 3600 % 10:02d}:{i // 60 % 60:02d}:"
                             f"{i % 60:02d}Z",
                "message": {"role": role, "content": content}}) + "\n")
    config = write_config(tmp_path / "c.yaml", state, {"claude": tmp_path / "claude"},
                          shutdown_grace="30s", sync_check_interval="0.5s")
    db = state / "memoryd.db"

    def sync_index() -> int:
        if not db.exists():
            return 0
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT memory_sync_index, message_count FROM sessions"
                               ).fetchone()
        return int(row[0]) if row else 0

    def run(log_name: str) -> subprocess.Popen[bytes]:
        with (tmp_path / log_name).open("wb") as log:
            proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                    env=daemon_env(tmp_path), stdout=subprocess.DEVNULL,
                                    stderr=log)
        wait_ready(state, proc.pid)
        return proc

    # Read first: the daemon's first pass then has the whole session to save at once.
    read = subprocess.run(memoryd_command("--config", str(config), "ingest", "--once"),
                          env=daemon_env(tmp_path), capture_output=True, timeout=300)
    assert read.returncode == 0, read.stderr[-2000:]
    proc = run("first.log")
    try:
        wait_for(lambda: sync_index() > 0, timeout=120, what="the long session's save began")
    finally:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    took = time.monotonic() - started
    text = (tmp_path / "first.log").read_text()
    assert code == 0, text[-3000:]
    assert took < 5, took
    assert "Traceback" not in text and '"level": "error"' not in text, text[-3000:]
    assert sync_index() < 40_000, "the save ended before the stop: nothing was tested"

    proc = run("second.log")
    try:
        wait_for(lambda: sync_index() == 40_000, timeout=300, what="the rest saved")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    with sqlite3.connect(state / "memory.db") as conn:
        ranges = sorted(conn.execute(
            "SELECT first_index, last_index FROM memories WHERE type = 'conversation'"
            " AND superseded_by IS NULL AND deleted_at IS NULL"))
    covered = [i for first, last in ranges for i in range(first, last + 1)]
    assert covered == list(range(40_000))
