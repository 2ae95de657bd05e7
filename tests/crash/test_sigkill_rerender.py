"""Real crashes while old segments are rendered again (issue 31.2): every memory is
either its old text or its new text, never half of each and never lost, and the upgrade
finishes after restarts."""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from helpers import daemon_env, lay_out_fixtures, memoryd_command, wait_ready, write_config

from memoryd.clock import SystemClock
from memoryd.memory import SQLiteMemoryBackend
from memoryd.store.sessions import messages_from

pytestmark = pytest.mark.slow


async def _make_old(state: Path) -> dict[str, tuple[str, str]]:
    """Every live segment's text put back as an older version wrote it (each message's
    raw text); memory id -> (old text, text as rendered now)."""
    import aiosqlite

    backend = await SQLiteMemoryBackend.open(state / "memory.db", clock=SystemClock())
    texts: dict[str, tuple[str, str]] = {}
    try:
        async with aiosqlite.connect(state / "memoryd.db") as conn:
            async for record in backend.export():
                if record["type"] != "conversation" or record["superseded_by"] is not None:
                    continue
                p = record["provenance"]
                messages = await messages_from(conn, p["session_id"], p["first_index"],
                                               p["last_index"] - p["first_index"] + 1)
                old = "\n".join(f"{m.role}: {m.content}" for m in messages)
                if old != record["content"] and await backend.rewrite_content(
                        record["id"], old):
                    texts[record["id"]] = (old, record["content"])
    finally:
        await backend.close()
    return texts


def _contents(state: Path) -> dict[str, str]:
    with sqlite3.connect(state / "memory.db") as db:
        return dict(db.execute("SELECT id, content FROM memories WHERE type = 'conversation'"))


def _done(state: Path) -> bool:
    try:
        with sqlite3.connect(state / "memoryd.db") as db:
            row = db.execute("SELECT done_at FROM upgrades WHERE name = 'memory_text_2'"
                             ).fetchone()
    except sqlite3.Error:
        return False
    return row is not None and row[0] is not None


def test_sigkill_while_segments_are_rendered_again(tmp_path: Path) -> None:
    roots = lay_out_fixtures(tmp_path / "agents")
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.2s",
                          sync_delay=0, sync_check_interval="0.1s", segment_max_chars=500)
    env = daemon_env(tmp_path)
    for args in (("ingest", "--once"), ("sync",)):
        subprocess.run(memoryd_command("--config", str(config), *args), env=env, check=True,
                       capture_output=True)
    texts = asyncio.run(_make_old(state))
    assert len(texts) > 50

    rng = random.Random(7)
    kills = 0
    while not _done(state) and kills < 8:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(state, proc.pid)
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        now = _contents(state)
        for memory_id, (old, new) in texts.items():
            assert now[memory_id] in (old, new), memory_id
    assert kills > 0

    proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Stopped once it runs (the upgrade may be done already: a SIGTERM before the
        # interpreter has set its handler ends it as the signal's default does).
        wait_ready(state, proc.pid)
        deadline = time.monotonic() + 120
        while not _done(state):
            assert time.monotonic() < deadline, "the upgrade did not finish"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    now = _contents(state)
    assert {i: now[i] for i in texts} == {i: new for i, (_old, new) in texts.items()}
