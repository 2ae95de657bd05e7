"""Retention and legal holds through the real CLI (issue 16.3): old conversation memories
expire, explicit facts never do, a hold keeps what it covers from every deletion, dry-run
deletes nothing, and what expired never comes back."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from helpers import daemon_env, memoryd_command, write_config

from memoryd.lifecycle.scheduling import LifecycleScheduler, PeriodicJob

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=200)
RECENT = NOW - timedelta(days=2)


def _line(session: str, key: str, text: str, when: datetime, cwd: str) -> str:
    return json.dumps({"type": "user", "uuid": key, "sessionId": session, "cwd": cwd,
                       "timestamp": when.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                       "message": {"role": "user", "content": text}}) + "\n"


def _cli(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          capture_output=True, text=True, timeout=120)


def _set_up(tmp_path: Path, **retention: object) -> tuple[Path, dict[str, str], Path]:
    root = tmp_path / "claude"
    for name, cwd, session, text, when in (
            ("-work-alpha", "/work/alpha", "old-alpha", "the alpha walrus deploy", OLD),
            ("-work-beta", "/work/beta", "old-beta", "the beta walrus audit", OLD),
            ("-work-alpha", "/work/alpha", "new-alpha", "the alpha walrus rollback", RECENT)):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / f"{session}.jsonl").write_text("".join(
            _line(session, f"{session}-{i}", f"{text} step {i}", when + timedelta(minutes=i),
                  cwd) for i in range(4)))
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {"claude": root},
                          retention=retention)
    env = daemon_env(tmp_path)
    for args in (("ingest", "--once"), ("sync",)):
        done = _cli(config, env, *args)
        assert done.returncode == 0, done.stderr
    return config, env, tmp_path / "state"


def _recalled(config: Path, env: dict[str, str], *, digests: bool = False) -> set[str]:
    """The sessions (or facts) recall finds conversation memories of; with `digests`,
    the sessions it finds a digest of."""
    done = _cli(config, env, "recall", "walrus", "--all-projects", "--limit", "50", "--json")
    assert done.returncode == 0, done.stderr
    return {r["provenance"]["session_external_id"] or r["content"][:20]
            for r in json.loads(done.stdout) if (r["type"] == "session_digest") == digests}


def test_a_default_install_deletes_nothing_it_backfilled(tmp_path: Path) -> None:
    """Months-old history under the default settings: the next run removes nothing, doctor
    says so, and a dry run is recorded as a dry run (counts, no ids) (issue 36.2)."""
    config, env, _state = _set_up(tmp_path)
    looked = _cli(config, env, "retention", "--dry-run", "--json")
    assert looked.returncode == 0, looked.stderr
    report = json.loads(looked.stdout)
    assert (report["expired"], report["memories"]) == (0, {})
    doctor = _cli(config, env, "doctor")
    line = next(x for x in doctor.stdout.splitlines() if "retention:" in x)
    assert line.startswith("ok") and "conversations" in line and "removes nothing" in line
    assert _cli(config, env, "retention").returncode == 0
    assert _recalled(config, env) >= {"old-alpha", "old-beta", "new-alpha"}
    trail = json.loads(_cli(config, env, "audit", "--json").stdout)
    dry = [e for e in trail if e["action"] == "retention_dry_run"]
    assert len(dry) == 1 and dry[0]["memory_ids"] == []

    # With a period set, doctor names what the next run would take.
    expiring = write_config(tmp_path / "c90.yaml", tmp_path / "state",
                            {"claude": tmp_path / "claude"}, retention={"conversations": "90d"})
    doctor = _cli(expiring, env, "doctor")
    line = next(x for x in doctor.stdout.splitlines() if "retention:" in x)
    assert line.startswith("warn") and "2 conversation memories past their age" in line


def test_old_conversations_expire_facts_stay_and_holds_keep_theirs(tmp_path: Path) -> None:
    config, env, _state = _set_up(tmp_path, conversations="90d")
    assert _cli(config, env, "remember", "the walrus fact from long ago").returncode == 0
    assert _recalled(config, env) >= {"old-alpha", "old-beta", "new-alpha"}

    placed = _cli(config, env, "hold", "add", "--project", "/work/beta", "--reason", "audit")
    assert placed.returncode == 0, placed.stderr
    assert "hold 1 on project /work/beta placed" in placed.stdout

    looked = _cli(config, env, "retention", "--dry-run", "--json")
    assert looked.returncode == 0, looked.stderr
    report = json.loads(looked.stdout)
    assert (report["dry_run"], report["memories"], report["held"]) == (
        True, {"conversation": 1}, 1)
    assert _recalled(config, env) >= {"old-alpha", "old-beta", "new-alpha"}  # nothing went

    done = _cli(config, env, "retention")
    assert done.returncode == 0, done.stderr
    assert "expired 1 conversation memories" in done.stdout
    assert "kept 1 past their age: a legal hold covers them" in done.stdout
    left = _recalled(config, env)
    assert "old-alpha" not in left and {"old-beta", "new-alpha"} <= left
    assert any("walrus fact" in item for item in left)  # explicit facts never expire
    # What the expired session did is still known: its digest is kept (issue 31).
    assert "old-alpha" in _recalled(config, env, digests=True)

    # Expired for good: a forced re-sync, or an import of an older export, never brings it
    # back.
    assert _cli(config, env, "sync").returncode == 0
    assert "old-alpha" not in _recalled(config, env)

    # The hold refuses every deletion it covers, until released.
    refused = _cli(config, env, "forget", "--project", "/work/beta")
    assert refused.returncode == 1 and "legal hold" in refused.stderr, refused.stderr
    refused = _cli(config, env, "forget", "--all", "--yes")
    assert refused.returncode == 1 and "legal holds stand" in refused.stderr
    listed = json.loads(_cli(config, env, "hold", "list", "--json").stdout)
    assert [(h["kind"], h["value"], h["reason"]) for h in listed] == [
        ("project", "/work/beta", "audit")]
    released = _cli(config, env, "hold", "release", "1")
    assert released.returncode == 0 and "released hold 1" in released.stdout
    assert _cli(config, env, "hold", "release", "1").returncode == 66
    again = json.loads(_cli(config, env, "retention", "--json").stdout)
    assert again["memories"] == {"conversation": 1} and again["held"] == 0
    assert "old-beta" not in _recalled(config, env)

    trail = json.loads(_cli(config, env, "audit", "--json").stdout)
    actions = [e["action"] for e in trail]
    assert actions.count("retention") == 2 and actions.count("retention_dry_run") == 1
    assert "hold" in actions and "release_hold" in actions
    assert "walrus" not in json.dumps(trail)


def test_raw_message_text_is_cleared_only_once_memory_holds_it(tmp_path: Path) -> None:
    config, env, state = _set_up(tmp_path, raw_messages="30d", conversations="never")
    # One more old session, stored but not yet in memory: its text must stay.
    late = tmp_path / "claude" / "-work-alpha" / "old-unsynced.jsonl"
    late.write_text("".join(_line("old-unsynced", f"u-{i}", f"unsynced walrus {i}",
                                  OLD + timedelta(minutes=i), "/work/alpha")
                            for i in range(3)))
    assert _cli(config, env, "ingest", "--once").returncode == 0
    db = sqlite3.connect(state / "memoryd.db")
    try:
        db.execute("UPDATE sessions SET memory_sync_index = 0 WHERE external_id ="
                   " 'old-unsynced'")
        db.commit()
    finally:
        db.close()
    # (The daemon would sync it at once; here `sync` is not run, so it waits.)
    done = _cli(config, env, "retention", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["raw_messages"], report["raw_sessions"], report["expired"]) == (8, 2, 0)
    shown = _cli(config, env, "show", "old-alpha")
    assert "alpha walrus deploy" not in shown.stdout and "removed by retention" in shown.stdout
    assert "alpha walrus rollback" in _cli(config, env, "show", "new-alpha").stdout
    assert "unsynced walrus" in _cli(config, env, "show", "old-unsynced").stdout
    # Memory keeps what the archive let go; re-reading the transcript stores nothing again.
    assert "old-alpha" in _recalled(config, env)
    (tmp_path / "claude" / "-work-alpha" / "old-alpha.jsonl").touch()
    assert _cli(config, env, "ingest", "--once").returncode == 0
    db = sqlite3.connect(state / "memoryd.db")
    try:
        count = db.execute("SELECT COUNT(*) FROM session_messages m JOIN sessions s ON"
                           " s.id = m.session_id WHERE s.external_id = 'old-alpha'").fetchone()
    finally:
        db.close()
    assert count == (4,)


def test_retention_settings_are_checked_at_load(tmp_path: Path) -> None:
    env = daemon_env(tmp_path)
    for retention in ({"schedule": "every day"}, {"conversations": "2h"},
                      {"raw_messages": "soon"}):
        config = write_config(tmp_path / "bad.yaml", tmp_path / "state", {},
                              retention=retention)
        done = _cli(config, env, "retention", "--dry-run")
        assert done.returncode == 78, done.stderr
        assert "retention." in done.stderr and "Traceback" not in done.stderr


def test_the_daily_job_is_a_cron_job_in_local_time() -> None:
    async def scheduled() -> datetime:
        async def nothing() -> None:
            return None

        scheduler = LifecycleScheduler(
            [PeriodicJob("retention", 86400, nothing, cron="17 3 * * *")],
            now=lambda: datetime.now(UTC))
        scheduler.start()
        try:
            job = scheduler._scheduler.get_job("retention")
            return job.next_run_time  # type: ignore[no-any-return]
        finally:
            await scheduler.stop(1)

    when = asyncio.run(scheduled())
    assert (when.hour, when.minute) == (3, 17)
    assert when > datetime.now(UTC)


def test_a_replayed_history_is_merged_into_one_memory(tmp_path: Path) -> None:
    """A resumed session replays its history into a new transcript. A fork that keeps the
    messages' own ids is never saved twice (`store.sessions.Copies`); one written under
    new ids (and stores saved by earlier versions) holds the same conversation twice.
    Retention keeps the oldest and deletes the repeat, leaving a deletion record of where
    it came from; the audit record names both."""
    config, env, _state = _set_up(tmp_path, conversations="never")
    project = tmp_path / "claude" / "-work-gamma"
    project.mkdir()
    history = [_line("first", f"g-{i}", f"the gamma otter migration, point {i}",
                     RECENT + timedelta(minutes=i), "/work/gamma") for i in range(4)]
    (project / "first.jsonl").write_text("".join(history))
    later = RECENT + timedelta(hours=3)
    (project / "second.jsonl").write_text("".join(
        line.replace('"sessionId": "first"', '"sessionId": "second"').replace(
            '"g-', '"r-') for line in history)
        + "".join(_line("second", f"h-{i}", f"and now the otter rollback {i}",
                        later + timedelta(minutes=i), "/work/gamma") for i in range(2)))
    for args in (("ingest", "--once"), ("sync",)):
        assert _cli(config, env, *args).returncode == 0

    def otter_memories() -> list[dict[str, object]]:
        # Recall already shows one of two near-identical memories; the store holds both.
        done = _cli(config, env, "export", "--project", "/work/gamma")
        return [r for r in map(json.loads, done.stdout.splitlines())
                if "otter migration" in r["content"] and r["type"] == "conversation"]

    before = otter_memories()
    assert len(before) == 2, before
    looked = json.loads(_cli(config, env, "retention", "--dry-run", "--json").stdout)
    assert looked["merged"] == 1 and len(otter_memories()) == 2
    done = json.loads(_cli(config, env, "retention", "--json").stdout)
    ((survivor, (repeat,)),) = done["merged_into"].items()
    (kept,) = otter_memories()
    assert kept["id"] == survivor
    assert kept["provenance"]["session_external_id"] == "first"  # the oldest stays
    trail = json.loads(_cli(config, env, "audit", "--memory", repeat, "--json").stdout)
    assert any(e["action"] == "retention" and survivor in e["memory_ids"] for e in trail)
    # The later conversation of the resumed session is its own memory and stays.
    rollback = _cli(config, env, "recall", "otter rollback", "--project", "/work/gamma",
                    "--json")
    assert "otter rollback" in rollback.stdout


def test_status_says_what_retention_may_delete(tmp_path: Path) -> None:
    """`status` names the periods set, and says when nothing is deleted by age (36.2)."""
    config, env, _state = _set_up(tmp_path)
    line = next(x for x in _cli(config, env, "status").stdout.splitlines()
                if x.startswith("retention:"))
    assert "deletes nothing by age" in line
    report = json.loads(_cli(config, env, "status", "--json").stdout)
    assert report["retention"]["expires"] == {}
    assert "conversations" in report["retention"]["kept_for_ever"]
    expiring = write_config(tmp_path / "c90.yaml", tmp_path / "state",
                            {"claude": tmp_path / "claude"}, retention={"conversations": "90d"})
    line = next(x for x in _cli(expiring, env, "status").stdout.splitlines()
                if x.startswith("retention:"))
    assert "conversations after 90 days" in line


FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def test_a_wall_clock_step_ahead_deletes_nothing_until_the_person_says_so(
        tmp_path: Path) -> None:
    """`retention.conversations: 300d`, the daemon running, and the wall clock set 400 days
    forward (libfaketime, the boot clock untouched): the daily job deletes nothing, logs
    it once a run, and doctor says why; `memoryd retention` refuses with one line until
    `--trust-clock` (issue 61.6)."""
    import os
    import signal
    import time

    import pytest
    from helpers import wait_ready

    if not FAKETIME.exists():
        if os.environ.get("FAKETIME_TESTS_REQUIRED"):
            pytest.fail(f"{FAKETIME} is missing: .ci/run installs Debian's faketime")
        pytest.skip("no libfaketime (apt-get install faketime)")
    config, env, state = _set_up(tmp_path, conversations="300d", schedule="* * * * *")
    assert _cli(config, env, "retention").returncode == 0  # the mark, at the true time
    before = _recalled(config, env)
    assert {"old-alpha", "old-beta", "new-alpha"} <= before
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    faked = {**env, "LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset),
             "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=faked,
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(state, proc.pid)
        offset.write_text("+400d\n")
        deadline = time.monotonic() + 150
        while b"retention_clock_ahead" not in (tmp_path / "run.log").read_bytes():
            assert time.monotonic() < deadline and proc.poll() is None, \
                (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(1)
        assert _recalled(config, faked) == before
        refused = _cli(config, faked, "retention")
        assert refused.returncode == 69 and "--trust-clock" in refused.stderr, refused.stderr
        assert _recalled(config, faked) == before
        doctor = _cli(config, faked, "doctor")
        assert "--trust-clock" in doctor.stdout, doctor.stdout
        trusted = _cli(config, faked, "retention", "--trust-clock")
        assert trusted.returncode == 0, trusted.stderr
        assert not {"old-alpha", "old-beta", "new-alpha"} & _recalled(config, faked)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
