"""memoryd under trouble, as a real process: a locked database, a full disk."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import daemon_env, memoryd_command, wait_for, wait_ready, write_config


def _line(text: str) -> tuple[str, str]:
    key = uuid.uuid4().hex
    record = {"type": "user", "uuid": key, "timestamp": "2026-05-01T10:00:00Z",
              "message": {"role": "user", "content": text}}
    return key, json.dumps(record) + "\n"


def _stored_uuids(db: Path) -> list[str]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return [row[0] for row in conn.execute(
            "SELECT uuid FROM session_messages ORDER BY session_id, message_index")]
    finally:
        conn.close()




@contextlib.contextmanager
def running_daemon(tmp_path: Path, config: Path, state: Path) -> Iterator[subprocess.Popen[bytes]]:
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(state, proc.pid)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        assert code == 0, log_path.read_text()


def test_locked_database_backs_off_and_loses_nothing(tmp_path: Path) -> None:
    """While another process holds the write lock, lines wait; afterwards each is stored once."""
    project = tmp_path / "claude" / "-p"
    project.mkdir(parents=True)
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {"claude": tmp_path / "claude"},
                          poll_interval="0.2s")
    transcript = project / "s.jsonl"
    written: list[str] = []
    with running_daemon(tmp_path, config, state):
        key, line = _line("before the lock")
        transcript.write_text(line)
        written.append(key)
        wait_for(lambda: _stored_uuids(state / "memoryd.db") == written, 15, "first line")

        blocker = sqlite3.connect(state / "memoryd.db", isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            for i in range(5):
                key, line = _line(f"during the lock {i}")
                with transcript.open("a") as handle:
                    handle.write(line)
                written.append(key)
                time.sleep(0.2)
            # Longer than the daemon's busy timeout (5 s): it must give up and back off.
            time.sleep(6.5)
            wait_for(lambda: "locked" in (json.loads(
                (state / "status.json").read_text())["last_error"] or ""), 15, "the error shown")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        wait_for(lambda: _stored_uuids(state / "memoryd.db") == written, 60, "all lines")
        # The condition has passed: `status` no longer shows the error.
        wait_for(lambda: json.loads((state / "status.json").read_text())["last_error"] is None,
                 20, "the error cleared from status")
    log = (tmp_path / "run.log").read_text()
    assert "store_busy_backing_off" in log and "database is locked" in log


def _mount_tmpfs(target: Path, size: str) -> bool:
    target.mkdir(parents=True)
    if os.geteuid() != 0:
        return False
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
                            capture_output=True)
    return result.returncode == 0


def test_full_disk_backs_off_and_resumes(tmp_path: Path) -> None:
    """On a full disk memoryd logs, backs off and retries; once space returns all is stored."""
    mount = tmp_path / "small-disk"
    if not _mount_tmpfs(mount, "4m"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        project = tmp_path / "claude" / "-p"
        project.mkdir(parents=True)
        state = mount / "state"
        config = write_config(tmp_path / "c.yaml", state, {"claude": tmp_path / "claude"},
                              poll_interval="0.2s")
        transcript = project / "s.jsonl"
        written: list[str] = []
        with running_daemon(tmp_path, config, state):
            key, line = _line("small")
            transcript.write_text(line)
            written.append(key)
            wait_for(lambda: _stored_uuids(state / "memoryd.db") == written, 15, "first line")
            filler = mount / "filler"
            # Unbuffered: the write that meets the full disk raises inside `suppress`, and
            # closing the file has nothing left to flush (a buffered close raised ENOSPC).
            with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
                while True:
                    handle.write(b"\0" * 65536)
            for i in range(3):
                key, line = _line(f"big {i} " + "x" * 300_000)
                with transcript.open("a") as handle:
                    handle.write(line)
                written.append(key)
            wait_for(lambda: "store_busy_backing_off" in (tmp_path / "run.log").read_text(),
                      30, "the daemon to notice the full disk")
            assert _stored_uuids(state / "memoryd.db") == written[:1]
            filler.unlink()
            wait_for(lambda: _stored_uuids(state / "memoryd.db") == written, 60, "all lines")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_unopenable_memory_backend_does_not_stop_ingestion(tmp_path: Path) -> None:
    """With the memory store unusable, messages are still stored; once it is fixed they sync."""
    project = tmp_path / "claude" / "-p"
    project.mkdir(parents=True)
    state = tmp_path / "state"
    broken = tmp_path / "memory.db"
    broken.mkdir()  # a directory where the memory database should be: it cannot be opened
    config = write_config(tmp_path / "c.yaml", state, {"claude": tmp_path / "claude"},
                          poll_interval="0.2s", sync_delay=0, sync_check_interval="0.3s",
                          memory={"backend": "sqlite", "path": str(broken)})
    with running_daemon(tmp_path, config, state):
        key, line = _line("kept while memory is down")
        (project / "s.jsonl").write_text(line)
        wait_for(lambda: _stored_uuids(state / "memoryd.db") == [key], 15, "the line")
        wait_for(lambda: "memory_backend_unavailable" in (tmp_path / "run.log").read_text(),
                 15, "the backend failure to be logged")
        conn = sqlite3.connect(state / "memoryd.db")
        assert conn.execute("SELECT memory_sync_index FROM sessions").fetchone()[0] == 0
        conn.close()
        broken.rmdir()

        def synced() -> bool:
            db = sqlite3.connect(state / "memoryd.db")
            try:
                return bool(db.execute("SELECT memory_sync_index FROM sessions").fetchone()[0])
            finally:
                db.close()

        wait_for(synced, 30, "the message to reach memory once the store works")


async def test_the_start_block_is_given_when_saving_before_it_fails(tmp_path: Path) -> None:
    """A full disk (or a locked store) where the start hook saves first (following the
    agent's transcript, saving quiet sessions): reading still works, so the agent still
    gets its block; the failure is one warning (issue 61.14; the fault is injected)."""
    from structlog.testing import capture_logs

    from memoryd.client import direct_ops
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.errors import StoreBusy

    root = tmp_path / "claude"
    root.mkdir()
    settings = load_settings(None, state_dir=str(tmp_path / "state"),
                             sources=[{"kind": "claude", "root": str(root)}],
                             memory={"embeddings": {"provider": "none"}})
    project = str(tmp_path / "shop")
    transcript = root / "-shop" / "s1.jsonl"
    transcript.parent.mkdir()
    transcript.write_text("")

    async def full(*_args: object, **_kwargs: object) -> None:
        raise StoreBusy("database or disk is full")

    async with direct_ops(settings, SystemClock(), vectors=False) as ops:
        await ops.run("remember", {"content": "invoices are numbered by the ledger",
                                   "project": project})
        ops.domain.core.runtime.follow = full  # type: ignore[method-assign]
        ops.domain.core.runtime.sync = full  # type: ignore[method-assign]
        with capture_logs() as logs:
            answer = await ops.run("session_event", {
                "agent": "claude", "event": "start", "session_id": "s1", "cwd": project,
                "transcript_path": str(transcript)})
    assert answer["context"] is not None and "ledger" in answer["context"]
    assert any(e["event"] == "hook_save_skipped" for e in logs), logs
