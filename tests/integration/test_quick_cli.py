"""The quick path of status, sessions, recall, context and remember (`memoryd.cli.quick`).

With a daemon running, these commands ask it without loading the full command line;
they must print exactly what the full command line prints, and hand over to it for
anything they do not handle.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import daemon_env, memoryd_command, wait_for, write_config
from test_agents import PROJECT, Daemon, claude_line, quick_daemon

FULL = ("import sys; sys.argv = ['memoryd'] + sys.argv[1:];"
        " from memoryd.cli import main; main()")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Daemon]:
    project_dir = tmp_path / "claude" / "-home-user-payments-api"
    project_dir.mkdir(parents=True)
    start = datetime.now(UTC) - timedelta(hours=1)
    (project_dir / "s1.jsonl").write_text(
        claude_line("s1", "u1", "user", "the ledger rounds half to even", start)
        + claude_line("s1", "u2", "assistant", "Bankers rounding, noted.",
                      start + timedelta(seconds=3)))
    with quick_daemon(tmp_path) as daemon:
        daemon.start()
        yield daemon


def _both(daemon: Daemon, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                               subprocess.CompletedProcess[str]]:
    quick = subprocess.run(memoryd_command("--config", str(daemon.config), *args),
                           env=daemon.env, capture_output=True, text=True, timeout=60)
    full = subprocess.run([sys.executable, "-c", FULL, "--config", str(daemon.config), *args],
                          env=daemon.env, capture_output=True, text=True, timeout=60)
    return quick, full


VOLATILE = ("uptime_seconds", "daemon: running", "size_bytes", "store:", "last_pass_at")


def _steady(text: str) -> str:
    """Output without what moves between two runs (uptime, the database's size)."""
    return "\n".join(line for line in text.splitlines()
                     if not any(word in line for word in VOLATILE))


def test_the_quick_path_prints_what_the_full_command_line_prints(running: Daemon) -> None:
    made = running.cli("remember", "the staging database listens on port 5433",
                       "--project", PROJECT, "--json")
    assert made.returncode == 0, made.stderr
    wait_for(lambda: json.loads(running.cli("sessions", "--json").stdout)
             and json.loads(running.cli("sessions", "--json").stdout)[0][
                 "unsynced_messages"] == 0, what="the session synced")
    for args in (["status"], ["status", "--json"], ["sessions"], ["sessions", "--json"],
                 ["sessions", "--status", "ended"], ["sessions", "--source=claude"],
                 ["recall", "staging database"], ["recall", "ledger", "--json", "--limit", "2"],
                 ["recall", "ledger", "--project", PROJECT, "--all-projects"],
                 ["recall", "ledger", "--agent", "Claude", "--json"],
                 ["context", "--query", "staging"],
                 ["context", "--query", "ledger rounding", "--budget", "300", "--json"],
                 ["recall", "nothing-matches-this-word"]):
        quick, full = _both(running, *args)
        assert (quick.returncode, _steady(quick.stdout), quick.stderr) == (
            full.returncode, _steady(full.stdout), full.stderr), args
    # remember: one memory each, the same answer's shape.
    quick, full = _both(running, "remember", "refunds are batched hourly", "--tag", "billing",
                        "--tag", "ops", "--importance", "0.7", "--json")
    mine, theirs = json.loads(quick.stdout), json.loads(full.stdout)
    assert mine["id"] != theirs["id"]
    for record in (mine, theirs):
        record.pop("id")
        record.pop("created_at")
        record.pop("updated_at")
    assert mine == theirs and mine["tags"] == ["billing", "ops"]
    trail = json.loads(running.cli("audit", "--json").stdout)
    assert sum(e["action"] == "remember" and e["interface"] == "cli" for e in trail) == 3


def test_what_the_quick_path_does_not_handle_goes_to_the_full_command_line(
        running: Daemon, tmp_path: Path) -> None:
    """Bad options, --help and unknown values get click's own answers; without a daemon,
    the commands still work."""
    for args, code in ((["recall", "x", "--limit", "0"], 2), (["recall"], 2),
                       (["recall", "x", "--bogus"], 2), (["sessions", "--status", "odd"], 2),
                       (["context", "--budget", "5"], 2), (["remember", " "], 2),
                       (["remember", "x", "--private"], 2)):
        quick, full = _both(running, *args)
        assert quick.returncode == full.returncode == code, (args, quick.stderr)
        # (click names the program as it was started: `python -m memoryd` here.)
        assert quick.stderr.replace("python -m memoryd", "memoryd") == full.stderr, args
    helped = running.cli("recall", "--help")
    assert helped.returncode == 0 and "--all-projects" in helped.stdout
    dated = running.cli("recall", "ledger", "--since", "2 days ago", "--json")
    assert dated.returncode == 0 and json.loads(dated.stdout)
    running.stop()
    alone = running.cli("recall", "ledger", "--json")
    assert alone.returncode == 0 and json.loads(alone.stdout)
    assert running.cli("status").stdout.startswith("daemon: not running")


def test_another_users_quick_path_is_refused(running: Daemon, tmp_path: Path) -> None:
    bob = write_config(tmp_path / "bob.yaml", running.state, {"claude": running.claude_root},
                       memory={"user": "bob"})
    done = subprocess.run(memoryd_command("--config", str(bob), "recall", "ledger"),
                          env=running.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "'bob'" in done.stderr and "ledger" not in done.stdout


def test_the_quick_path_imports_neither_click_nor_pydantic(tmp_path: Path) -> None:
    probe = ("import sys, memoryd.entry, memoryd.cli.quick;"
             " print(sorted(m for m in ('click', 'pydantic', 'httpx', 'aiosqlite', 'numpy')"
             " if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, env=daemon_env(tmp_path))
    assert done.stdout.strip() == "[]", done.stderr
    from memoryd.cli.quick import MIN_BUDGET
    from memoryd.memory.recall.context import MIN_BUDGET as CONTEXT_MIN_BUDGET

    assert MIN_BUDGET == CONTEXT_MIN_BUDGET


@pytest.mark.parametrize("command", ["status", "sessions", "recall ledger", "remember walrus"])
def test_a_setting_misspelt_while_the_daemon_runs_exits_78_on_the_quick_path(
        running: Daemon, command: str) -> None:
    """Issue 36.3: the quick path answers only for the config file a full command found
    valid; one edited since is checked in full, so a typo exits 78 naming the key."""
    assert running.cli("status").returncode == 0
    good = running.config.read_text()
    running.config.write_text(good + "stale_session_timout: 30m\n")
    done = running.cli(*command.split())
    assert done.returncode == 78, done.stdout
    assert done.stderr.strip().splitlines() == [
        "memoryd: config: stale_session_timout: unknown setting"]
    running.config.write_text(good)
    assert running.cli(*command.split()).returncode == 0
