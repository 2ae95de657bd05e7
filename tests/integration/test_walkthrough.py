"""A newcomer's first hour (issue 34.4): a fresh HOME holding the real fixture transcripts
where the agents write them, and the README's commands in the order a person types them,
the daemon running. Every command answers with exit 0, prints no log record on stderr,
fits a 100-column terminal, and the statuses it shows are what the timeout makes of them
(the fixtures are months old: none is active)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import lay_out_fixtures, memoryd_command, wait_for

WIDTH = 100
RECORD = re.compile(r'^\s*\{.*"event"|\[(debug|info|warning|error)\s*\]')


@pytest.fixture
def newcomer(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    # A HOME as short as a person's: the socket's path must fit AF_UNIX's 107 bytes.
    home = tmp_path.parents[1] / f"h{os.getpid()}"
    try:
        yield from _newcomer(tmp_path, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _newcomer(tmp_path: Path, home: Path) -> Iterator[tuple[dict[str, str], Path]]:
    roots = lay_out_fixtures(tmp_path / "fixtures")
    for kind, where in (("claude", ".claude/projects"), ("codex", ".codex/sessions"),
                        ("gemini", ".gemini/tmp")):
        (home / where).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(roots[kind]), home / where)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "COLUMNS": str(WIDTH),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
           "XDG_STATE_HOME": str(home / ".local/state"), "XDG_CACHE_HOME": str(home / ".cache"),
           "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    # The one setting the tests need: never fetch the local model's weights.
    config = home / ".config" / "memoryd" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("memory:\n  embeddings:\n    fetch_model: false\n")
    state = home / ".local" / "share" / "memoryd"
    with (tmp_path / "daemon.log").open("wb") as log:
        daemon = subprocess.Popen(memoryd_command("run"), env=env, stdout=subprocess.DEVNULL,
                                  stderr=log)
        try:
            wait_for(lambda: (state / "memoryd.sock").exists() or daemon.poll() is not None,
                     timeout=60, what="the socket")
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-2000:]
            yield env, tmp_path
        finally:
            daemon.terminate()
            daemon.wait(30)


def _run(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(memoryd_command(*args), env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (args, done.stderr)
    records = [line for line in done.stderr.splitlines() if RECORD.search(line)]
    assert records == [], (args, records[:3])
    # JSON holds whole values, as the README says; `context` prints the very block an
    # agent is given, which is not reflowed for a terminal.
    if "--json" not in args and args[0] != "context":
        # As wide as a person sees it: their HOME is short, this test's lies under the
        # tester's own (~/.cache/memoryd-tests/...), however long that is.
        wide = [line for line in done.stdout.splitlines()
                if len(line.replace(env["HOME"], "/home/user")) > WIDTH]
        assert wide == [], (args, wide[:3])
    return done.stdout


def test_the_readme_in_order_as_a_newcomer_types_it(
        newcomer: tuple[dict[str, str], Path]) -> None:
    env, cwd = newcomer

    def stored() -> int:
        report = json.loads(_run(env, cwd, "status", "--json"))
        held = sum(h["bytes"] for h in report["ingestion_held_back"])  # a fixture's partial line
        return int(report["sessions"]) if report["ingestion_lag_bytes"] == held else -1

    wait_for(lambda: stored() > 20, timeout=120, what="the fixtures stored")
    status = _run(env, cwd, "status")
    assert "daemon: running" in status
    listing = _run(env, cwd, "sessions")
    rows = json.loads(_run(env, cwd, "sessions", "--json"))
    dated = [row for row in rows if row["last_message_at"]]
    assert dated and {row["status"] for row in dated} <= {"paused", "ended"}, listing
    assert "session " in _run(env, cwd, "show", str(rows[0]["id"]))
    _run(env, cwd, "recall", "refactor")
    _run(env, cwd, "remember", "the staging database listens on 5433")
    assert "5433" in _run(env, cwd, "recall", "staging database port")
    assert "<memory_context>" in _run(env, cwd, "context", "--query", "staging database")
    assert "hooks installed" in _run(env, cwd, "hooks", "install", "--agent", "claude")
    done = subprocess.run(memoryd_command("ui", "--no-browser"), env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not any(RECORD.search(line)
                                            for line in done.stderr.splitlines())
    url = done.stdout.strip()
    base = url.split("/login")[0]
    with httpx.Client(follow_redirects=True, timeout=30) as browser:
        assert browser.get(url).status_code == 200
        for page in ("/", "/sessions", "/memories?q=staging", "/activity"):
            answer = browser.get(base + page)
            assert answer.status_code == 200, (page, answer.text[:300])
        assert "5433" in browser.get(base + "/memories?q=staging+database").text
