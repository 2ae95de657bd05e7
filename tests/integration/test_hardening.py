"""Bad luck and hostile input, as real processes: nothing hangs, nothing traces back.

Every case runs the real `memoryd` command in a subprocess with a timeout; a
hang fails the test (TimeoutExpired) instead of blocking the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers import daemon_env, memoryd_command, wait_for, wait_ready, write_config

#: Every status a command may exit with (memoryd/cli/common.py documents each).
DOCUMENTED = {0, 1, 2, 65, 66, 69, 70, 73, 74, 75, 78}


def _claude_line(text: str, key: str) -> str:
    return json.dumps({"type": "user", "uuid": key, "sessionId": "s1",
                       "timestamp": "2026-05-01T10:00:00Z",
                       "message": {"role": "user", "content": text}}) + "\n"


def _setup(tmp_path: Path, **extra: object) -> tuple[Path, Path, Path]:
    root = tmp_path / "claude"
    (root / "-p").mkdir(parents=True)
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {"claude": root}, **extra)
    return root, state, config


def _memoryd(tmp_path: Path, config: Path, *args: str, timeout: float = 60,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args),
                          env=daemon_env(tmp_path), capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def _one_line_failure(done: subprocess.CompletedProcess[str], status: int) -> None:
    assert done.returncode == status, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("memoryd: ")]
    assert len(said) == 1, done.stderr[-2000:]


def _stored_message(state: Path, uuid: str) -> tuple[str, str]:
    """The archive's text and raw line of the message with `uuid`."""
    conn = sqlite3.connect(state / "memoryd.db")
    try:
        content, raw = conn.execute(
            "SELECT content, raw FROM session_messages WHERE uuid = ?", (uuid,)).fetchone()
    finally:
        conn.close()
    return content, raw.decode() if isinstance(raw, bytes) else raw


def _stored(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM session_messages").fetchone()[0])
    finally:
        conn.close()


def test_a_fifo_named_like_a_transcript_is_skipped_not_opened(tmp_path: Path) -> None:
    """`ingest --once` with a FIFO among the transcripts stores the rest and exits; the FIFO
    is never opened for reading (a writer opening it non-blocking would then succeed)."""
    root, state, config = _setup(tmp_path)
    fifo = root / "-p" / "a-fifo.jsonl"
    os.mkfifo(fifo)
    (root / "-p" / "b.jsonl").write_text(_claude_line("hello", "k1"))
    done = _memoryd(tmp_path, config, "--log-format", "json", "ingest", "--once", timeout=30)
    assert done.returncode == 0, done.stderr
    assert _stored(state / "memoryd.db") == 1
    assert done.stderr.count("transcript_not_a_regular_file") == 1
    with pytest.raises(OSError):  # ENXIO: nobody holds the FIFO open for reading
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_the_daemon_with_a_fifo_keeps_ingesting_and_stops_on_sigterm(tmp_path: Path) -> None:
    root, state, config = _setup(tmp_path, poll_interval="0.2s")
    os.mkfifo(root / "-p" / "a-fifo.jsonl")
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(state, proc.pid)
        (root / "-p" / "b.jsonl").write_text(_claude_line("hello", "k1"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _stored(state / "memoryd.db") < 1:
            time.sleep(0.1)
        assert _stored(state / "memoryd.db") == 1
        time.sleep(1.0)  # several polls: the warning must not repeat
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    text = log_path.read_text()
    assert code == 0, text[-3000:]
    assert text.count("transcript_not_a_regular_file") == 1, text[-3000:]


def test_a_symlink_out_of_the_root_is_not_followed(tmp_path: Path) -> None:
    root, state, config = _setup(tmp_path)
    secret = tmp_path / "outside.jsonl"
    secret.write_text(_claude_line("outside the root", "k-out") + "root:x:0:0\n")
    (root / "-p" / "link.jsonl").symlink_to(secret)
    inside = root / "-p" / "real.jsonl"
    inside.write_text(_claude_line("inside", "k-in"))
    (root / "-p" / "alias.jsonl").symlink_to(inside)
    done = _memoryd(tmp_path, config, "ingest", "--once", timeout=30)
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(state / "memoryd.db")
    try:
        uuids = {r[0] for r in conn.execute("SELECT uuid FROM session_messages")}
        rejected = conn.execute("SELECT COUNT(*) FROM rejected_lines").fetchone()[0]
    finally:
        conn.close()
    assert uuids == {"k-in"}
    assert rejected == 0


def _garbage_header(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.write(b"this is not an SQLite header at all")


@pytest.mark.parametrize("command", [["run"], ["ingest", "--once"], ["sync"], ["status"],
                                     ["sessions"], ["recall", "anything"]])
def test_a_database_with_a_garbage_header_exits_74_with_one_line(tmp_path: Path,
                                                                 command: list[str]) -> None:
    root, state, config = _setup(tmp_path)
    (root / "-p" / "s.jsonl").write_text(_claude_line("hello", "k1"))
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    _garbage_header(state / "memoryd.db")
    if command[0] == "recall":
        _garbage_header(state / "memory.db") if (state / "memory.db").exists() else \
            (state / "memory.db").write_bytes(b"garbage" * 1000)
    done = _memoryd(tmp_path, config, *command, timeout=30)
    _one_line_failure(done, 74)
    assert "not a database" in done.stderr


def test_a_damaged_page_stops_the_daemon_and_doctor_says_how_to_recover(
        tmp_path: Path) -> None:
    """A page of garbage in the middle: `run` stops writing and exits 74, status says why,
    doctor fails its integrity check with the recovery path."""
    root, state, config = _setup(tmp_path)
    with (root / "-p" / "s.jsonl").open("w") as handle:
        for i in range(400):
            handle.write(_claude_line(f"message {i} " + "x" * 400, f"k{i}"))
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    db = state / "memoryd.db"
    pages = db.stat().st_size // 4096
    with db.open("r+b") as handle:
        handle.seek(4096 * (pages // 2))
        handle.write(os.urandom(4096))
    done = _memoryd(tmp_path, config, "doctor")
    assert done.returncode == 1
    assert "fail  daemon database integrity" in done.stdout
    assert "docs/operations.md" in done.stdout
    run = _memoryd(tmp_path, config, "run", timeout=60)
    _one_line_failure(run, 74)
    status = _memoryd(tmp_path, config, "status")
    assert "damaged" in status.stdout + status.stderr


@pytest.mark.parametrize("setting", [
    "poll_interval: 0", "poll_interval: .nan", "sync_check_interval: .inf",
    "stale_session_timeout: -1", "lifecycle_check_interval: '99999999999 d'",
    "shutdown_grace: 1e400", "sync_delay: .inf",
])
@pytest.mark.parametrize("command", ["run", "ingest --once", "sync", "status"])
def test_durations_out_of_bounds_exit_78_at_load(tmp_path: Path, setting: str,
                                                 command: str) -> None:
    root, state, _ = _setup(tmp_path)
    config = tmp_path / "bad.yaml"
    config.write_text(f"state_dir: {state}\nsources: [{{kind: claude, root: {root}}}]\n"
                      f"{setting}\n")
    done = _memoryd(tmp_path, config, *command.split(), timeout=30)
    _one_line_failure(done, 78)
    assert setting.split(":")[0] in done.stderr


def test_an_unwritable_state_directory_exits_73_with_one_line(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    _root, state, config = _setup(tmp_path)
    state.mkdir(mode=0o500)
    for command in (["ingest", "--once"], ["sync"], ["run"]):
        _one_line_failure(_memoryd(tmp_path, config, *command, timeout=30), 73)


def _small_file_system(target: Path) -> bool:
    """A 4 MB tmpfs at `target` (root only; the CI runs as root)."""
    target.mkdir(parents=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(target)],
                          capture_output=True).returncode == 0


@pytest.mark.parametrize("trouble", ["read-only", "full"])
def test_an_unwritable_or_full_state_directory_at_start_up_never_hangs(
        tmp_path: Path, trouble: str) -> None:
    """As root, where permissions cannot make a directory unwritable: a read-only file system,
    or one with no space left, under the state directory. Every command exits (the run
    a test timeout would catch), with one line and a documented status."""
    mount = tmp_path / "fs"
    if not _small_file_system(mount):
        pytest.skip("needs root to mount a tmpfs")
    try:
        root = tmp_path / "claude"
        (root / "-p").mkdir(parents=True)
        (root / "-p" / "s.jsonl").write_text(_claude_line("hello", "k1"))
        state = mount / "state"
        config = write_config(tmp_path / "c.yaml", state, {"claude": root})
        if trouble == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        else:
            with (mount / "filler").open("wb", buffering=0) as handle, \
                    contextlib.suppress(OSError):
                while True:
                    handle.write(b"\0" * 65536)
        for command in (["ingest", "--once"], ["sync"], ["run"], ["status"], ["doctor"],
                        ["recall", "hello"]):
            done = _memoryd(tmp_path, config, *command, timeout=60)
            assert "Traceback" not in done.stderr + done.stdout, (command, done.stderr[-2000:])
            said = [line for line in done.stderr.splitlines() if line.startswith("memoryd: ")]
            assert len(said) <= 1, (command, done.stderr[-2000:])
            allowed = DOCUMENTED if command in (["status"], ["doctor"], ["recall", "hello"]) \
                else DOCUMENTED - {0}
            assert done.returncode in allowed, (command, done.returncode, done.stderr[-2000:])
            if done.returncode != 0:
                assert len(said) == 1 or command == ["doctor"], (command, done.stderr[-2000:])
        # status reports what there is; doctor names the trouble.
        assert _memoryd(tmp_path, config, "status").returncode == 0
        doctor = _memoryd(tmp_path, config, "doctor")
        assert doctor.returncode == 1
        assert any(line.startswith("fail  state directory") for line in
                   doctor.stdout.splitlines()), doctor.stdout + doctor.stderr
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_state_directory_that_is_a_file_exits_with_one_line(tmp_path: Path) -> None:
    """Works as root too: nothing can be created under a regular file."""
    _root, state, config = _setup(tmp_path)
    state.write_text("not a directory")
    for command in (["ingest", "--once"], ["sync"], ["run"], ["status"], ["doctor"]):
        done = _memoryd(tmp_path, config, *command, timeout=30)
        assert "Traceback" not in done.stderr + done.stdout, (command, done.stderr[-2000:])
        # status only reads, and says there is nothing yet; the others need the directory.
        allowed = DOCUMENTED if command == ["status"] else DOCUMENTED - {0}
        assert done.returncode in allowed, (command, done.returncode)


def test_nul_padding_between_records_does_not_swallow_the_next_line(tmp_path: Path) -> None:
    """A preallocated or crash-damaged tail of NULs, then a record appended after it; and a
    raw NUL inside a JSON string: every message is kept, nothing rejected."""
    root, state, config = _setup(tmp_path)
    transcript = root / "-p" / "s.jsonl"
    transcript.write_bytes(_claude_line("first", "k1").encode() + b"\x00" * 4096)
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    with transcript.open("ab") as handle:
        handle.write(_claude_line("after the padding", "k2").encode())
        raw = _claude_line("with a NUL", "k3").encode().replace(b"a NUL", b"a \x00 NUL")
        handle.write(raw)
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    conn = sqlite3.connect(state / "memoryd.db")
    try:
        rows = dict(conn.execute("SELECT uuid, content FROM session_messages"))
        rejected = conn.execute("SELECT COUNT(*) FROM rejected_lines").fetchone()[0]
    finally:
        conn.close()
    assert set(rows) == {"k1", "k2", "k3"}
    assert "\x00" in rows["k3"]
    assert rejected == 0


def test_a_transcript_moved_by_copy_continues_its_session(tmp_path: Path) -> None:
    """Copy then delete (a move across file systems): the copy is recognised by its content,
    its messages are not stored twice, and lines appended later join the same session."""
    root, state, config = _setup(tmp_path)
    old = root / "-p" / "s.jsonl"
    old.write_text("".join(_claude_line(f"message {i}", f"k{i}") for i in range(40)))
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    new_dir = root / "-q"
    new_dir.mkdir()
    new = new_dir / "s.jsonl"
    new.write_bytes(old.read_bytes())  # a new inode: what `mv` across file systems makes
    old.unlink()
    with new.open("a") as handle:
        handle.write(_claude_line("after the move", "k-late"))
    done = _memoryd(tmp_path, config, "--log-format", "json", "ingest", "--once")
    assert done.returncode == 0, done.stderr
    assert "transcript_moved" in done.stderr
    conn = sqlite3.connect(state / "memoryd.db")
    try:
        per_session = conn.execute(
            "SELECT session_id, COUNT(*), COUNT(DISTINCT uuid) FROM session_messages"
            " GROUP BY session_id").fetchall()
    finally:
        conn.close()
    assert len(per_session) == 1
    assert per_session[0][1:] == (41, 41)


def _per_session(db: Path) -> list[tuple[int, int, int]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(
            "SELECT session_id, COUNT(*), COUNT(DISTINCT uuid) FROM session_messages"
            " GROUP BY session_id ORDER BY session_id").fetchall()
    finally:
        conn.close()


def _run_daemon(tmp_path: Path, config: Path, state: Path) -> subprocess.Popen[bytes]:
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                            env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    wait_ready(state, proc.pid)
    return proc


def _stop_daemon(tmp_path: Path, proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    text = (tmp_path / "run.log").read_text()
    assert code == 0, text[-3000:]
    return text


def test_a_move_by_copy_under_the_running_daemon_stores_nothing_twice(tmp_path: Path) -> None:
    """`mv` across file systems while the daemon watches: the copy (same name, another
    directory) shows before the original goes. It must not be read as a second session."""
    root, state, config = _setup(tmp_path, poll_interval="0.2s")
    old = root / "-p" / "s.jsonl"
    old.write_text("".join(_claude_line(f"message {i}", f"k{i}") for i in range(40)))
    proc = _run_daemon(tmp_path, config, state)
    try:
        wait_for(lambda: _stored(state / "memoryd.db") == 40, what="the transcript stored")
        new_dir = root / "-q"
        new_dir.mkdir()
        new = new_dir / "s.jsonl"
        new.write_bytes(old.read_bytes())  # a new inode: what `mv` across file systems makes
        time.sleep(1.5)  # several polls and notifications see both files
        old.unlink()
        with new.open("a") as handle:
            handle.write(_claude_line("after the move", "k-late"))
        wait_for(lambda: _stored(state / "memoryd.db") >= 41, what="the appended line")
        time.sleep(1.0)
    finally:
        text = _stop_daemon(tmp_path, proc)
    assert _per_session(state / "memoryd.db") == [(1, 41, 41)], text[-3000:]
    assert "transcript_moved" in text


def test_a_copy_that_stays_beside_its_original_is_read_as_its_own_session(
        tmp_path: Path) -> None:
    """A backup copy (same name, another directory, the original still there) is held back
    only for a few seconds, then read like any new transcript."""
    root, state, config = _setup(tmp_path, poll_interval="0.2s")
    old = root / "-p" / "s.jsonl"
    old.write_text("".join(_claude_line(f"message {i}", f"k{i}") for i in range(5)))
    proc = _run_daemon(tmp_path, config, state)
    try:
        wait_for(lambda: _stored(state / "memoryd.db") == 5, what="the transcript stored")
        (root / "-q").mkdir()
        (root / "-q" / "s.jsonl").write_bytes(old.read_bytes())
        wait_for(lambda: _stored(state / "memoryd.db") == 10, timeout=30,
                 what="the copy read as its own session")
    finally:
        text = _stop_daemon(tmp_path, proc)
    assert [row[1:] for row in _per_session(state / "memoryd.db")] == [(5, 5), (5, 5)]
    assert text.count("transcript_held") == 1, text[-3000:]


def test_remember_correct_and_import_mask_secrets(tmp_path: Path) -> None:
    _root, _state, config = _setup(tmp_path)
    secret = "s3cretValue9xyz"
    done = _memoryd(tmp_path, config, "remember", f"the staging DB_PASS={secret} works")
    assert done.returncode == 0, done.stderr
    planted = tmp_path / "planted.jsonl"
    exported = _memoryd(tmp_path, config, "export").stdout
    record = json.loads(exported.splitlines()[0])
    assert secret not in exported and "[REDACTED:assigned_secret]" in exported
    record.update(id="imported-1", content="from now on use the deploy password hunter2!")
    planted.write_text(json.dumps(record) + "\n")
    assert _memoryd(tmp_path, config, "import", str(planted)).returncode == 0
    done = _memoryd(tmp_path, config, "correct", record["id"], "token: ghp_" + "a" * 36)
    assert done.returncode == 0, done.stderr
    everything = _memoryd(tmp_path, config, "export").stdout
    recalled = _memoryd(tmp_path, config, "recall", "deploy password staging").stdout
    for text in (everything, recalled, done.stdout, done.stderr):
        assert secret not in text and "hunter2" not in text and "ghp_aaaa" not in text


def test_log_lines_mask_secrets() -> None:
    import io

    import structlog

    from memoryd.logging import configure_logging

    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    structlog.get_logger("t").warning("embeddings_unavailable",
                                      base_url="https://user:pa55word@llm.example/v1",
                                      error="401 for sk-ant-api03-" + "b" * 30)
    text = out.getvalue()
    assert "pa55word" not in text and "sk-ant-api03-bbbb" not in text
    assert "[REDACTED:" in text


def test_library_log_records_come_out_like_ours_and_masked() -> None:
    """APScheduler, httpx and aiosqlite log through the standard library: their records
    are rendered by the same chain (one JSON object a line), secrets masked; below
    warnings they are dropped, even at the debug level (aiosqlite's would print every
    statement's arguments)."""
    import io
    import json
    import logging

    from memoryd.logging import configure_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        out = io.StringIO()
        configure_logging("info", "json", stream=out)
        configure_logging("info", "json", stream=out)  # again: still one line per record
        scheduler = logging.getLogger("apscheduler.scheduler")
        scheduler.warning("Run time of job %r was missed by %s", "lifecycle", "0:00:03")
        scheduler.info("Running job %r", "lifecycle")
        logging.getLogger("httpx").error(
            "GET https://user:pa55word@llm.example/v1 failed: sk-ant-api03-" + "c" * 30)
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        assert [(r["logger"], r["level"]) for r in lines] == [
            ("apscheduler.scheduler", "warning"), ("httpx", "error")]
        assert lines[0]["event"] == "Run time of job 'lifecycle' was missed by 0:00:03"
        assert "timestamp" in lines[0]
        assert "pa55word" not in out.getvalue() and "sk-ant-api03-cccc" not in out.getvalue()

        debug = io.StringIO()
        configure_logging("debug", "json", stream=debug)
        scheduler.info("Running job %r", "lifecycle")
        logging.getLogger("aiosqlite").debug("executing %s", "a batch")
        scheduler.warning("Job %r raised an exception", "lifecycle")
        assert [json.loads(line)["event"] for line in debug.getvalue().splitlines()] == [
            "Job 'lifecycle' raised an exception"]
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_shared_state_directory_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    root, _state, _ = _setup(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    config = tmp_path / "shared.yaml"
    config.write_text(f"state_dir: {shared}\nsources: [{{kind: claude, root: {root}}}]\n")
    for command in (["ingest", "--once"], ["sync"], ["run"]):
        _one_line_failure(_memoryd(tmp_path, config, *command, timeout=30), 78)
    assert shared.stat().st_mode & 0o7777 == 0o1777
    assert list(shared.iterdir()) == []


def test_an_empty_state_dir_never_means_the_current_directory(tmp_path: Path) -> None:
    _root, _state, config = _setup(tmp_path)
    env = {**daemon_env(tmp_path), "MEMORYD_STATE_DIR": ""}
    cwd = tmp_path / "cwd"
    cwd.mkdir(mode=0o755)
    done = subprocess.run(memoryd_command("--config", str(config), "ingest", "--once"),
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=30)
    _one_line_failure(done, 78)
    assert cwd.stat().st_mode & 0o777 == 0o755 and list(cwd.iterdir()) == []


def test_export_writes_0600_through_an_unpredictable_name(tmp_path: Path) -> None:
    _root, _state, config = _setup(tmp_path)
    assert _memoryd(tmp_path, config, "remember", "a fact worth keeping").returncode == 0
    out = tmp_path / "out" / "export.jsonl"
    out.parent.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (out.parent / ".export.jsonl.tmp").symlink_to(victim)  # the old predictable name
    os.umask(0o022)
    done = _memoryd(tmp_path, config, "export", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "untouched"
    assert out.stat().st_mode & 0o777 == 0o600
    assert "a fact worth keeping" in out.read_text()
    _one_line_failure(_memoryd(tmp_path, config, "export", "--output",
                               str(tmp_path / "missing" / "x.jsonl")), 73)


def test_export_never_replaces_what_it_was_not_asked_to(tmp_path: Path) -> None:
    """An existing file is refused unless --force; a device, a directory or a symlink is
    never replaced, --force or not (issue 29.15)."""
    _root, _state, config = _setup(tmp_path)
    assert _memoryd(tmp_path, config, "remember", "a fact worth keeping").returncode == 0
    existing = tmp_path / "existing.jsonl"
    existing.write_text("keep me\n")
    _one_line_failure(_memoryd(tmp_path, config, "export", "--output", str(existing)), 73)
    assert existing.read_text() == "keep me\n"
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    for path in (link, Path("/dev/null")):
        _one_line_failure(_memoryd(tmp_path, config, "export", "--output", str(path),
                                   "--force"), 73)
    assert target.read_text() == "root:x:0:0\n" and link.is_symlink()
    done = _memoryd(tmp_path, config, "export", "--output", str(existing), "--force")
    assert done.returncode == 0, done.stderr
    assert "a fact worth keeping" in existing.read_text()


def test_surprising_corrections_refuse(tmp_path: Path) -> None:
    _root, _state, config = _setup(tmp_path)
    assert _memoryd(tmp_path, config, "remember", "the deploy runs on Fridays").returncode == 0
    _one_line_failure(_memoryd(tmp_path, config, "correct", "--query", "?!", "NEW"), 2)
    _one_line_failure(_memoryd(tmp_path, config, "correct", "--query", "banana split", "N"), 66)
    done = _memoryd(tmp_path, config, "correct", "--query", "deploy Fridays", "on Mondays")
    assert done.returncode == 0 and "corrected" in done.stdout
    refused = _memoryd(tmp_path, config, "recall", "deploy", "--project", "")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr


@pytest.mark.parametrize("args", [
    ["show", "99999999999999999999"], ["sync", "99999999999999999999"],
    ["forget", "--session", "99999999999999999999"], ["show", "a" * 120_000],
    ["recall", "x", "--since", "99999999999 years ago"], ["recall", "x", "--limit", "9" * 30],
    ["remember", "x", "--importance", "nan"], ["sessions", "--status", "nope"],
])
def test_out_of_range_arguments_say_one_line(tmp_path: Path, args: list[str]) -> None:
    _root, _state, config = _setup(tmp_path)
    done = _memoryd(tmp_path, config, *args)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in DOCUMENTED - {70}, (done.returncode, done.stderr[-500:])


@pytest.mark.parametrize(("content", "status"), [
    (b"\xff\xfe not utf-8\n", 65), (b"not json\n", 65), (b"[1, 2]\n", 65),
    (b'{"schema_version": 1, "provenance": "x"}\n', 65),
])
def test_bad_import_files_exit_65(tmp_path: Path, content: bytes, status: int) -> None:
    _root, _state, config = _setup(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    _one_line_failure(_memoryd(tmp_path, config, "import", str(bad)), status)


@pytest.mark.parametrize(("env", "config_text"), [
    ({"MEMORYD_SOURCES": "x"}, None), ({"MEMORYD_MEMORY": "{bad"}, None),
    ({}, b"state_dir: /tmp/x\n\xff\xfe: 1\n"),
])
def test_bad_configuration_exits_78(tmp_path: Path, env: dict[str, str],
                                    config_text: bytes | None) -> None:
    _root, _state, config = _setup(tmp_path)
    if config_text is not None:
        config.write_bytes(config_text)
    done = subprocess.run(memoryd_command("--config", str(config), "status"),
                          env={**daemon_env(tmp_path), **env}, capture_output=True, text=True,
                          timeout=30)
    _one_line_failure(done, 78)


def test_private_spans_are_masked_in_the_archive_and_never_reach_memory(
        tmp_path: Path) -> None:
    """`<private>` typed by a person: masked in session_messages (content and raw line) as
    soon as it is read, so memory, recall and exports never see it."""
    root, state, config = _setup(tmp_path)
    (root / "-p" / "s.jsonl").write_text(
        _claude_line("the deploy key lives in <private>vault path /kv/ops/deploy</private>,"
                     " ask Sam", "k1")
        + _claude_line("and my phone is 555-123-4567, mail sam@example.org", "k2"))
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    assert _memoryd(tmp_path, config, "sync").returncode == 0
    content, raw_text = _stored_message(state, "k1")
    for text in (content, raw_text):
        assert "vault path" not in text and "[REDACTED:private]" in text
    json.loads(raw_text)  # still a valid JSON line
    exported = _memoryd(tmp_path, config, "export").stdout
    recalled = _memoryd(tmp_path, config, "recall", "deploy key phone mail").stdout
    for text in (exported, recalled):
        assert "vault path" not in text and "555-123-4567" not in text
        assert "sam@example.org" not in text
    assert "[REDACTED:phone]" in exported and "[REDACTED:email]" in exported


def test_a_forgotten_session_stays_forgotten_as_it_grows(tmp_path: Path) -> None:
    """`forget --session`, then the agent goes on writing: the later messages are stored
    in the daemon's archive, but never saved to memory again (issue 16.2)."""
    root, _state, config = _setup(tmp_path)
    transcript = root / "-p" / "s1.jsonl"
    transcript.write_text("".join(_claude_line(f"the zebra migration step {i}", f"a{i}")
                                  for i in range(6)))
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    assert _memoryd(tmp_path, config, "sync").returncode == 0
    assert "zebra" in _memoryd(tmp_path, config, "recall", "zebra migration").stdout
    done = _memoryd(tmp_path, config, "forget", "--session", "s1")
    assert done.returncode == 0, done.stderr
    with transcript.open("a") as handle:
        handle.write("".join(_claude_line(f"the zebra migration, later {i}", f"b{i}")
                             for i in range(6)))
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    assert _memoryd(tmp_path, config, "sync").returncode == 0
    recalled = _memoryd(tmp_path, config, "recall", "zebra migration")
    assert "zebra" not in recalled.stdout, recalled.stdout
    assert "zebra" not in _memoryd(tmp_path, config, "export").stdout


def test_everything_memoryd_creates_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """Under umask 000, the default state directory's missing parents (~/.local,
    ~/.local/share), the state directory, the archive and every file in them are
    0700 / 0600 (issue 29.14)."""
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "claude"
    (root / "-p").mkdir(parents=True)
    (root / "-p" / "s.jsonl").write_text(_claude_line("hello there", "k1"))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"kind": "claude", "root": str(root)}],
        "memory": {"embeddings": {"fetch_model": False}}}))
    env = {**daemon_env(tmp_path), "HOME": str(home)}
    env.pop("XDG_DATA_HOME", None)
    for args in (["ingest", "--once"], ["sync"], ["transcripts", "archive", "--session", "s"],
                 ["remember", "the umask test fact"]):
        done = subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                              capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: os.umask(0))
        assert done.returncode in (0, 66), (args, done.stderr)
    created = [home / ".local", home / ".local" / "share", *sorted(
        (home / ".local" / "share").rglob("*"))]
    assert any(p.name == "archive" for p in created), created
    for path in created:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_socket():
            continue
        expected = 0o700 if path.is_dir() else 0o600
        assert mode == expected, (path, oct(mode))


@pytest.mark.parametrize("command", [["status"], ["sessions"], ["recall", "x"], ["run"]])
def test_a_config_that_is_not_a_file_is_refused_at_once(tmp_path: Path,
                                                        command: list[str]) -> None:
    """`--config /dev/zero` (or an endless FIFO) ends at once with exit 78 and one line,
    instead of reading for ever (issue 29.11)."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    for path in ("/dev/zero", str(fifo), str(big)):
        done = subprocess.run(memoryd_command("--config", path, *command),
                              env=daemon_env(tmp_path), capture_output=True, text=True,
                              timeout=60)
        _one_line_failure(done, 78)
        assert path in done.stderr


def test_import_refuses_what_is_not_an_export_file(tmp_path: Path) -> None:
    """`import /dev/zero` ends at once (not a regular file); an endless line is refused
    without reading it whole."""
    _root, _state, config = _setup(tmp_path)
    _one_line_failure(_memoryd(tmp_path, config, "import", "/dev/zero", timeout=60), 65)
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as handle:
        handle.truncate(70 << 20)  # 70 MiB of NUL bytes: one line with no end
    done = _memoryd(tmp_path, config, "import", str(huge), timeout=60)
    _one_line_failure(done, 65)
    assert "longer than" in done.stderr


def test_a_burst_of_clients_waits_in_the_listen_queue_instead_of_being_refused(
        tmp_path: Path) -> None:
    """200 concurrent recalls while the daemon was busy: 48 were refused at connect
    (asyncio's listen queue holds 100). Here the daemon is stopped (SIGSTOP: it accepts
    nothing) while 300 clients connect at once; each is queued, and answered once the
    daemon goes on."""
    import resource
    import socket as socket_

    _root, state, config = _setup(tmp_path)
    log = (tmp_path / "run.log").open("wb")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    descriptors = 1024 if hard == resource.RLIM_INFINITY else min(1024, hard)

    def enough_descriptors() -> None:  # a connection limit of 512, whatever this shell has
        resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, hard))

    proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                            env=daemon_env(tmp_path), stdout=subprocess.DEVNULL, stderr=log,
                            preexec_fn=enough_descriptors)
    log.close()
    clients: list[socket_.socket] = []
    refused = 0
    try:
        wait_ready(state, proc.pid)
        path = str(state / "memoryd.sock")
        proc.send_signal(signal.SIGSTOP)
        for _ in range(300):
            conn = socket_.socket(socket_.AF_UNIX, socket_.SOCK_STREAM)
            conn.setblocking(False)  # as a client with a timeout connects: no waiting
            try:
                conn.connect(path)
            except BlockingIOError:
                refused += 1
                conn.close()
                continue
            clients.append(conn)
        proc.send_signal(signal.SIGCONT)
        request = b"GET /v1 HTTP/1.1\r\nHost: memoryd\r\nConnection: close\r\n\r\n"
        answered = 0
        for conn in clients[:20]:
            conn.setblocking(True)
            conn.settimeout(30)
            conn.sendall(request)
            answered += conn.recv(12).startswith(b"HTTP/1.1 200")
    finally:
        proc.send_signal(signal.SIGCONT)
        for conn in clients:
            conn.close()
        text = _stop_daemon(tmp_path, proc)
    assert refused == 0, f"{refused} of 300 refused at connect"
    assert answered == 20
    assert "Traceback" not in text, text[-3000:]


def _daemon_with_few_descriptors(
        tmp_path: Path) -> tuple[Path, Path, subprocess.Popen[bytes]]:
    """`memoryd run` allowed 128 descriptors (a connection limit of 64), logging to
    `run.log`: (state, config, process)."""
    import resource

    _root, state, config = _setup(tmp_path)

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    with (tmp_path / "run.log").open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL,
                                stderr=log, preexec_fn=few_descriptors)
    return state, config, proc


@pytest.mark.parametrize("sent", [b"", b"G"], ids=["silent", "one-byte"])
def test_idle_connections_cannot_lock_clients_out_of_the_api(tmp_path: Path,
                                                             sent: bytes) -> None:
    """Issue 29.8: thousands of idle connections made the API unresponsive and logged a
    traceback per refused accept. Here the daemon may open 128 descriptors and 400
    connections stay open without a byte, or with one byte of a request head that never
    ends (issue 61.14): a client is still answered at once, the log says so once and
    holds no traceback, and the idle ones are closed."""
    import socket as socket_

    state, config, proc = _daemon_with_few_descriptors(tmp_path)
    idle: list[socket_.socket] = []
    try:
        wait_ready(state, proc.pid)
        path = str(state / "memoryd.sock")
        for _ in range(400):
            conn = socket_.socket(socket_.AF_UNIX, socket_.SOCK_STREAM)
            conn.settimeout(5)
            try:
                conn.connect(path)
            except OSError:
                conn.close()
                continue
            if sent:
                with contextlib.suppress(OSError):
                    conn.sendall(sent)
            idle.append(conn)
        time.sleep(1)
        for attempt in range(2):  # asked twice: the first answer is no accident
            began = time.monotonic()
            done = _memoryd(tmp_path, config, "status", "--json", timeout=30)
            assert done.returncode == 0, done.stderr[-2000:]
            assert json.loads(done.stdout)["daemon"]["running"] is True
            assert time.monotonic() - began < 5, attempt
        # The silent ones were closed to make room: at most the limit is still open.
        still_open = 0
        for conn in idle:
            conn.settimeout(0.01)
            try:
                still_open += conn.recv(1) != b""
            except TimeoutError:
                still_open += 1
            except OSError:
                pass
        assert still_open <= 64
    finally:
        for conn in idle:
            conn.close()
        text = _stop_daemon(tmp_path, proc)
    assert "Traceback" not in text and '"level": "error"' not in text, text[-3000:]
    assert text.count("api_idle_connections_closed") == 1, text[-3000:]


def test_a_burst_at_the_connection_limit_never_runs_out_of_descriptors(
        tmp_path: Path) -> None:
    """Every admitted connection idle at the limit, then as many again queued while the
    daemon was busy (SIGSTOP): accepted all at once, they took it past its descriptors
    (EMFILE, an error with a traceback from asyncio's accept loop). It accepts a few at a
    time, so the gate closes idle ones before more are taken."""
    import socket as socket_

    state, config, proc = _daemon_with_few_descriptors(tmp_path)
    idle: list[socket_.socket] = []
    try:
        wait_ready(state, proc.pid)
        path = str(state / "memoryd.sock")

        def connect(block: bool) -> None:
            conn = socket_.socket(socket_.AF_UNIX, socket_.SOCK_STREAM)
            conn.setblocking(block)
            try:
                conn.connect(path)
            except OSError:
                conn.close()
                return
            idle.append(conn)

        for _ in range(64):  # the limit at 128 descriptors
            connect(True)
        time.sleep(0.5)
        proc.send_signal(signal.SIGSTOP)
        for _ in range(64):
            connect(False)
        proc.send_signal(signal.SIGCONT)
        time.sleep(2)
        done = _memoryd(tmp_path, config, "status", "--json", timeout=30)
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        proc.send_signal(signal.SIGCONT)
        for conn in idle:
            conn.close()
        text = _stop_daemon(tmp_path, proc)
    assert "Too many open files" not in text and '"level": "error"' not in text, text[-3000:]


def test_session_summaries_are_masked_wherever_sessions_are_listed(tmp_path: Path) -> None:
    """A summary line holding a token, an e-mail and a `<private>` span: `sessions --json`
    with and without a daemon (the API's `list_sessions`) shows none of them (issue 61.7)."""
    root, state, config = _setup(tmp_path)
    token = "ghp_Zq8RkT2mWvX9pL4nB7cD1eF3gH5jK0sUaYbW"
    summary = (f"Rotated {token} for maria.kowalska@example-corp.com;"
               " <private>the vault lives at /kv/ops</private>")
    (root / "-p" / "s1.jsonl").write_text(
        _claude_line("rotate the deploy token please", "k1")
        + json.dumps({"type": "summary", "summary": summary, "leafUuid": "k1"}) + "\n")
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    offline = _memoryd(tmp_path, config, "sessions", "--json")
    assert offline.returncode == 0, offline.stderr
    proc = _run_daemon(tmp_path, config, state)
    try:
        through_api = _memoryd(tmp_path, config, "sessions", "--json")
    finally:
        _stop_daemon(tmp_path, proc)
    assert through_api.returncode == 0, through_api.stderr
    for listed in (offline.stdout, through_api.stdout):
        rows = json.loads(listed)
        shown = rows[0]["summary_markdown"]
        assert "[REDACTED:github_token]" in shown and "Rotated" in shown, shown
        for piece in (token[4:20], "kowalska@", "vault lives"):
            assert piece not in listed, listed


def test_an_empty_recall_query_is_refused_with_and_without_a_daemon(tmp_path: Path) -> None:
    """`recall ""` (or blanks) names the empty QUERY and exits 2, through the daemon's quick
    path and without a daemon; it never lists memories as an empty query's answer."""
    _root, state, config = _setup(tmp_path)
    assert _memoryd(tmp_path, config, "remember", "the deploy key rotates monthly"
                    ).returncode == 0
    for query in ("", "   "):
        done = _memoryd(tmp_path, config, "recall", query)
        assert done.returncode == 2 and "QUERY is empty" in done.stderr, done.stderr
        assert "deploy key" not in done.stdout
    proc = _run_daemon(tmp_path, config, state)
    try:
        done = _memoryd(tmp_path, config, "recall", "")
    finally:
        _stop_daemon(tmp_path, proc)
    assert done.returncode == 2 and "QUERY is empty" in done.stderr, done.stderr


def test_a_config_nested_beyond_reason_exits_78_with_one_line(tmp_path: Path) -> None:
    """A YAML file of thousands of nested lists is a bad configuration (78), not a crash."""
    config = tmp_path / "deep.yaml"
    config.write_text("sources: " + "[" * 5000 + "]" * 5000 + "\n")
    _one_line_failure(_memoryd(tmp_path, config, "status"), 78)


@pytest.mark.parametrize("form", ["--config", "--config="])
def test_the_global_config_reaches_the_hook(tmp_path: Path, form: str) -> None:
    """`memoryd --config C hook ...` (MEMORYD_CONFIG unset, C not the default path) reads
    C's state directory: the start block holds what was remembered there."""
    _root, _state, config = _setup(tmp_path)
    project = tmp_path / "shop"
    project.mkdir()
    assert _memoryd(tmp_path, config, "remember", "--project", str(project),
                    "invoices are numbered by the ledger").returncode == 0
    payload = json.dumps({"session_id": "s-hook", "transcript_path": "/nonexistent.jsonl",
                          "cwd": str(project), "hook_event_name": "SessionStart",
                          "source": "startup"})
    head = ["--config", str(config)] if form == "--config" else [f"--config={config}"]
    done = subprocess.run(memoryd_command(*head, "hook", "--agent", "claude", "SessionStart"),
                          env=daemon_env(tmp_path), input=payload, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "ledger" in done.stdout, (done.stdout, done.stderr)


def test_a_private_tag_with_an_escaped_letter_is_private_in_the_archive(
        tmp_path: Path) -> None:
    """`<\\u0070rivate>...</\\u0070rivate>` in a JSON line is `<private>` once decoded: the
    span is masked in the stored content and in the raw line, which stays JSON."""
    root, state, config = _setup(tmp_path)
    line = _claude_line("the deploy key lives in <private>vault path /kv/ops/deploy</private>"
                        ", ask Sam", "k1").replace("private>", "\\u0070rivate>")
    assert "vault path" in line and "private>" not in line
    (root / "-p" / "s.jsonl").write_text(line)
    assert _memoryd(tmp_path, config, "ingest", "--once").returncode == 0
    content, raw_text = _stored_message(state, "k1")
    for text in (content, raw_text):
        assert "vault path" not in text and "[REDACTED:private]" in text, text
    assert json.loads(raw_text)["message"]["content"].endswith(", ask Sam")


def test_clients_that_go_away_mid_body_leave_no_traceback(tmp_path: Path) -> None:
    """A hundred clients send a request's head and half its body, then close (issue
    61.14): the daemon logs no traceback for them and answers the next client."""
    import socket as socket_

    _root, state, config = _setup(tmp_path)
    proc = _run_daemon(tmp_path, config, state)
    try:
        for _ in range(100):
            with socket_.socket(socket_.AF_UNIX, socket_.SOCK_STREAM) as conn:
                conn.connect(str(state / "memoryd.sock"))
                conn.sendall(b"POST /v1/recall HTTP/1.1\r\nHost: memoryd\r\n"
                             b"Content-Type: application/json\r\nContent-Length: 1000\r\n"
                             b"\r\n{\"query\":")
        done = _memoryd(tmp_path, config, "status", "--json")
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        text = _stop_daemon(tmp_path, proc)
    assert "Traceback" not in text and '"level": "error"' not in text, text[-3000:]


def test_the_start_hook_gives_its_block_on_a_full_disk_without_a_daemon(
        tmp_path: Path) -> None:
    """No daemon, and no space left where the state directory is: the stores cannot be
    opened for writing, but they can be read, and the hook still gives the start block
    (issue 61.14)."""
    mount = tmp_path / "fs"
    if not _small_file_system(mount):
        pytest.skip("needs root to mount a tmpfs")
    try:
        root = tmp_path / "claude"
        (root / "-p").mkdir(parents=True)
        state = mount / "state"
        config = write_config(tmp_path / "c.yaml", state, {"claude": root})
        project = tmp_path / "shop"
        project.mkdir()
        assert _memoryd(tmp_path, config, "remember", "--project", str(project),
                        "invoices are numbered by the ledger").returncode == 0
        with (mount / "filler").open("wb", buffering=0) as handle, \
                contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 65536)
        payload = json.dumps({"session_id": "s-full", "transcript_path": "/nonexistent.jsonl",
                              "cwd": str(project), "hook_event_name": "SessionStart",
                              "source": "startup"})
        done = subprocess.run(
            memoryd_command("--config", str(config), "hook", "--agent", "claude",
                            "SessionStart"),
            env=daemon_env(tmp_path), input=payload, capture_output=True, text=True,
            timeout=60)
        assert done.returncode == 0, done.stderr
        assert "ledger" in done.stdout, (done.stdout, done.stderr)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
