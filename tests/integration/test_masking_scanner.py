"""The daemon builds masking's scanner as it starts, off its event loop, and masks with it
what it saves."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from helpers import wait_for

from tests.integration.test_agents import Daemon, claude_line, daemon

__all__ = ["daemon"]  # the fixture, shared with test_agents

KEY = "AKIAQWERTYUIOPASDFGHJ"
CARD = "4111 1111 1111 1111"


def _log_events(path: Path) -> list[str]:
    found = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            found.append(json.loads(line).get("event", ""))
        except json.JSONDecodeError:
            continue
    return found


def test_the_daemon_builds_the_scanner_and_masks_what_it_saves(daemon: Daemon) -> None:
    d = daemon
    assert d.cli("remember", f"the deploy key {KEY} and the card {CARD}").returncode == 0
    d.start()
    try:
        log = d.tmp / "daemon.log"
        wait_for(lambda: "masking_scanner_built" in _log_events(log),
                 what="the scanner built in the daemon")
        events = _log_events(log)
        assert events.index("masking_scanner_building") < events.index("masking_scanner_built")
        transcript = d.claude_root / "-p" / "s1.jsonl"
        transcript.parent.mkdir(parents=True, exist_ok=True)
        when = datetime(2026, 1, 2, 10, 0, tzinfo=UTC)
        # Enough text that any process would build the scanner for it.
        filler = " ".join(f"step {n} took {n * 37} ms" for n in range(20_000))
        transcript.write_text(
            claude_line("s1", "u1", "user", f"use {KEY} to deploy; pay with {CARD}", when)
            + claude_line("s1", "u2", "assistant", filler, when))

        def stored() -> bool:
            with sqlite3.connect(d.state / "memoryd.db") as db:
                return db.execute("SELECT count(*) FROM session_messages").fetchone()[0] == 2

        wait_for(stored, what="the transcript read")
        assert d.cli("sync").returncode == 0
        exported = d.cli("export")
        assert exported.returncode == 0, exported.stderr
        assert KEY not in exported.stdout and CARD not in exported.stdout
        assert "[REDACTED:aws_access_key]" in exported.stdout
        assert "[REDACTED:card]" in exported.stdout
    finally:
        d.stop()
