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
