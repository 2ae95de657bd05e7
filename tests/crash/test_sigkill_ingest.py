"""Real crashes: `memoryd run` is SIGKILLed again and again while transcripts grow."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    TRANSCRIPTS,
    daemon_env,
    memoryd_command,
    wait_ready,
    write_config,
)

pytestmark = pytest.mark.slow

CLAUDE_SOURCES = [
    "yoavf+ai-sessions__examples__claude-code-pomodoro-timer.jsonl",
    "moredip+session-share__session-viewer__test__INTEGRATION__fixtures__images-in-tool-results.jsonl",
    "moredip+session-share__samples__claude-code-projects__0ccf1a04-1b4c-43b6-8aa5-79e41db43a68.jsonl",
    "d-kimuson+claude-code-viewer__mock-global-claude-dir__projects__sample-project__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
]
CODEX_SOURCES = ["yoavf+ai-sessions__examples__codex-pomodor-timer.jsonl"]


def claude_messages(data: bytes) -> list[bytes]:
    """The raw lines of a Claude transcript that are messages, by the rules of the format."""
    found = []
    for line in data.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        kind = record.get("type")
        if kind in ("user", "assistant") or (
            kind == "system" and record.get("subtype") == "compact_boundary"
        ):
            found.append(line)
    return found


def _stored(db: Path) -> dict[str, list[tuple[bytes, str, str]]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT s.transcript_path, m.message_index, m.raw, m.role, m.content"
            " FROM session_messages m JOIN sessions s ON s.id = m.session_id"
            " ORDER BY s.transcript_path, m.message_index"
        ).fetchall()
    finally:
        conn.close()
    by_path: dict[str, list[tuple[bytes, str, str]]] = {}
    for path, index, raw, role, content in rows:
        entries = by_path.setdefault(Path(path).name, [])
        assert index == len(entries), f"message_index not dense in {path}"
        raw_bytes = raw if isinstance(raw, bytes) else raw.encode()
        entries.append((raw_bytes, role, content))
    return by_path


def _caught_up(db: Path, files: list[Path]) -> bool:
    if not db.exists():
        return False
    conn = sqlite3.connect(db)
    try:
        offsets = dict(conn.execute("SELECT path, last_byte_offset FROM session_message_state"))
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return all(offsets.get(str(f)) == f.stat().st_size for f in files)


class ChunkWriter(threading.Thread):
    """Appends the sources' bytes to their targets in random-sized chunks, interleaved."""

    def __init__(self, pairs: list[tuple[bytes, Path]], seed: int) -> None:
        super().__init__(daemon=True)
        self.pairs = pairs
        self.rng = random.Random(seed)

    def run(self) -> None:
        positions = [0] * len(self.pairs)
        while any(pos < len(data) for pos, (data, _) in zip(positions, self.pairs, strict=True)):
            i = self.rng.randrange(len(self.pairs))
            data, target = self.pairs[i]
            if positions[i] >= len(data):
                continue
            size = self.rng.choice([1, 7, 100, 1000, 4096, 16_384, 65_536])
            chunk = data[positions[i] : positions[i] + size]
            with target.open("ab") as handle:
                handle.write(chunk)
            positions[i] += len(chunk)
            time.sleep(self.rng.uniform(0.005, 0.04))


def test_sigkill_loop_stores_every_message_exactly_once(tmp_path: Path) -> None:
    """SIGKILLing the daemon repeatedly mid-write loses and duplicates nothing."""
    project = tmp_path / "agents" / "claude" / "-home-user-project"
    codex_day = tmp_path / "agents" / "codex" / "2025" / "10" / "20"
    project.mkdir(parents=True)
    codex_day.mkdir(parents=True)
    pairs: list[tuple[bytes, Path]] = []
    for i, name in enumerate(CLAUDE_SOURCES):
        pairs.append(((TRANSCRIPTS / "claude" / name).read_bytes(), project / f"session-{i}.jsonl"))
    for i, name in enumerate(CODEX_SOURCES):
        pairs.append(((TRANSCRIPTS / "codex" / name).read_bytes(),
                      codex_day / f"rollout-2025-10-20T10-00-0{i}-crash.jsonl"))
    roots = {"claude": tmp_path / "agents" / "claude", "codex": tmp_path / "agents" / "codex",
             "gemini": tmp_path / "agents" / "gemini"}
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.2s")
    env = daemon_env(tmp_path)

    writer = ChunkWriter(pairs, seed=int(os.environ.get("CRASH_SEED", "7")))
    writer.start()
    rng = random.Random(11)
    kills = kills_while_writing = 0
    while writer.is_alive() or kills < 8:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 0.9))
        kills_while_writing += writer.is_alive()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        assert kills < 200, "the writer never finished"
    writer.join()

    # A final clean run catches up, then stops on SIGTERM with status 0.
    log_path = tmp_path / "final-run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    wait_ready(state, proc.pid)
    targets = [target for _, target in pairs]
    deadline = time.monotonic() + 60
    while not _caught_up(state / "memoryd.db", targets):
        assert time.monotonic() < deadline, "the daemon did not catch up"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, log_path.read_text()

    stored = _stored(state / "memoryd.db")
    # Oracle 1: by the format's own rules, every Claude message once, in order.
    for data, target in pairs[: len(CLAUDE_SOURCES)]:
        assert [raw for raw, _, _ in stored[target.name]] == claude_messages(data)
    # Oracle 2: the same files ingested whole, with no crash, give the same rows.
    reference_state = tmp_path / "reference-state"
    reference_config = write_config(tmp_path / "reference.yaml", reference_state, roots)
    subprocess.run(memoryd_command("--config", str(reference_config), "ingest", "--once"),
                   env=env, check=True, capture_output=True)
    assert stored == _stored(reference_state / "memoryd.db")
    assert kills >= 8
    assert kills_while_writing >= 4, "the crashes did not overlap the writes"
