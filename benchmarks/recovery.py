"""Recovery: a full pass from `memory_sync_index = 0`, and quiet -> recallable, live.

    python -m benchmarks.recovery                              # 1,000 sessions, 1,000,000 messages
    python -m benchmarks.recovery --sessions 100 --messages 100000   # about a tenth
    python -m benchmarks.recovery --quick                      # the same as the line above

1. The state database is built directly (fast) through memoryd's own migrations
   (`service.open_store`), then filled with plain sqlite3: N sessions, M messages
   split among them with skewed (log-normal) sizes, in Claude Code's turn shape
   (user prompt, thinking, tool calls and their results, assistant answer) with the
   content lengths memoryd stores from the generated corpus (tool output already
   clipped to 4,000 characters, as the parser does), timestamps a few seconds apart,
   now and then an idle gap of hours or a compaction boundary. `raw` is abbreviated
   (recovery never reads it). Every session is paused and quiet for two days.
2. A full recovery pass, in this process: `Recovery(conn, backend, clock,
   recovery_policy(settings)).run(force=True)` into a fresh embedded SQLite memory
   backend, timed; then every session is checked to be fully synced.
3. `memoryd run` (subprocess) on that same state_dir with `sync_delay` 2 s and
   `sync_check_interval` 1 s follows a new transcript; for each trial a turn (a user
   line with a unique word and the agent's answer) is appended, and the time from the
   append (the session goes quiet) to the row's commit and to `backend.recall(word)`
   finding it is measured. (A question alone is held for its answer, up to
   `sync_max_lag`: the trial would measure that instead.)

`--llm-down` runs all of it with distillation on and its model down (a port on
127.0.0.1 that takes connections and never answers): every saved segment is queued
for the model in the transaction that saves it, and the daemon's worker keeps waiting
on it. Compare with a run without: recovery must not notice.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import random
import shutil
import signal
import sqlite3
import string
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from benchmarks._common import (
    MB,
    REPO,
    add_model_down_options,
    db_size,
    distillation_report,
    isolate_this_process,
    isolated_env,
    machine,
    median,
    memoryd_command,
    model_down,
    sql_value,
    write_config,
)
from benchmarks.gen_corpus import Pools, SessionWriter

_TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite")
_CLIP = 4000  # memoryd.ingest.parsers.common.CONTENT_TOOL_LIMIT


def _loguniform(rng: random.Random, low: int, high: int) -> int:
    return int(low * (high / low) ** rng.random())


def _split(rng: random.Random, total: int, parts: int) -> list[int]:
    """`total` split into `parts` skewed sizes, each at least 1, summing to `total`."""
    weights = [rng.lognormvariate(0, 1.0) for _ in range(parts)]
    scale = (total - parts) / sum(weights)
    sizes = [1 + int(w * scale) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


class MessageMaker:
    """Rows for `session_messages` in the shape and sizes memoryd stores from Claude Code."""

    def __init__(self, rng: random.Random, pools: Pools, floor: int = 0) -> None:
        self.rng = rng
        self.pools = pools
        #: Every message's text at least this long (`--huge`: the audit's ~4 KB messages).
        self.floor = floor

    def _uuid(self) -> str:
        return str(uuidlib.UUID(int=self.rng.getrandbits(128), version=4))

    def turn(self) -> list[tuple[str, str, str, str | None, str | None]]:
        """(role, kind, content, tool_name, tool_input) for one prompt and its answer."""
        rng, pools = self.rng, self.pools
        out: list[tuple[str, str, str, str | None, str | None]] = [
            ("user", "message", pools.prose(rng, _loguniform(rng, 20, 3000)), None, None)]
        if rng.random() < 0.5:
            out.append(("assistant", "thinking",
                        "[thinking] " + pools.prose(rng, _loguniform(rng, 100, 6000)), None, None))
        for _ in range(rng.randint(0, 6)):
            tool = rng.choice(_TOOLS)
            tool_input = orjson.dumps({"file_path": "/src/x.py",
                                       "text": pools.source(rng, _loguniform(rng, 20, 2000))})
            text = tool_input.decode()
            out.append(("assistant", "tool_call", f"[tool_use {tool}] {text[:_CLIP]}", tool,
                        text))
            output = pools.source(rng, _loguniform(rng, 30, 12_000))
            if len(output) > _CLIP:
                output = f"{output[:_CLIP]}… [{len(output) - _CLIP} more characters]"
            out.append(("tool", "tool_result", output, None, None))
        out.append(("assistant", "message", pools.prose(rng, _loguniform(rng, 30, 4000)), None,
                    None))
        if self.floor:
            out = [(role, kind, content if len(content) >= self.floor else
                    content + " " + pools.prose(rng, self.floor - len(content)), name, given)
                   for role, kind, content, name, given in out]
        return out


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _migrate(settings: Any) -> None:
    from memoryd.store.database import open_store

    async with open_store(settings):
        pass


def build_state(settings: Any, sessions: int, messages: int, seed: int,
                floor: int = 0) -> dict[str, int]:
    """Fill the migrated state database; returns counts of what was written."""
    asyncio.run(_migrate(settings))
    rng = random.Random(seed)
    maker = MessageMaker(rng, Pools(rng), floor)
    conn = sqlite3.connect(settings.database_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")  # a fixture: durability does not matter here
    now = datetime.now(UTC)
    quiet_since = now - timedelta(days=2)
    sizes = _split(rng, messages, sessions)
    projects = [f"/home/dev/code/project-{i}" for i in range(30)]
    insert = ("INSERT INTO session_messages (session_id, message_index, role, kind, content,"
              " tool_name, tool_input, uuid, timestamp, is_sidechain, raw, byte_offset,"
              " dedupe_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)")
    boundaries = gaps = 0
    conn.execute("BEGIN")
    pending = 0
    for n, size in enumerate(sizes):
        external_id = str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
        project = rng.choice(projects)
        moment = quiet_since - timedelta(seconds=size * 12 + rng.randint(0, 86_400))
        started = moment
        session_id = n + 1
        rows = []
        turn: list[Any] = []
        offset = 0
        for index in range(size):
            if not turn:
                turn = maker.turn()
                if rng.random() < 0.003:
                    turn.insert(0, ("system", "compact_boundary", "Conversation compacted",
                                    None, '{"trigger":"auto"}'))
                    boundaries += 1
                if rng.random() < 0.01:
                    moment += timedelta(hours=rng.randint(1, 12))
                    gaps += 1
            role, kind, content, tool_name, tool_input = turn.pop(0)
            moment += timedelta(milliseconds=rng.randint(200, 20_000))
            uuid = maker._uuid()
            stamp = _iso(moment)
            raw = orjson.dumps({"type": role, "uuid": uuid, "timestamp": stamp,
                                "sessionId": external_id, "cwd": project,
                                "abbreviated": len(content)}).decode()
            rows.append((session_id, index, role, kind, content, tool_name, tool_input, uuid,
                         stamp, raw, offset, uuid))
            offset += len(content) + 500
        conn.execute(
            "INSERT INTO sessions (id, source, external_id, project, transcript_path, status,"
            " started_at, last_message_at, last_ingested_at, memory_sync_index, message_count,"
            " created_at) VALUES (?, 'claude', ?, ?, ?, 'paused', ?, ?, ?, 0, ?, ?)",
            (session_id, external_id, project,
             f"/nonexistent{project.replace('/', '-')}/{external_id}.jsonl",
             _iso(started), _iso(moment), _iso(quiet_since), size, _iso(started)))
        conn.executemany(insert, rows)
        pending += size
        if pending >= 50_000:
            conn.execute("COMMIT")
            conn.execute("BEGIN")
            pending = 0
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"boundaries": boundaries, "idle_gaps": gaps, "largest": max(sizes),
            "smallest": min(sizes)}


class Breakdown:
    """Wall time spent in each step of a recovery pass, by wrapping the functions it calls
    (in this process only; the wrappers cost a perf_counter pair per call)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap_async(self, name: str, func: Any) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await func(*args, **kwargs)
            finally:
                self._add(name, time.perf_counter() - began)
        return timed

    def wrap(self, name: str, func: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self._add(name, time.perf_counter() - began)
        return timed

    def _add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def report(self, total: float) -> str:
        parts = [f"{name} {sec:.1f} s ({sec / total:.0%}, {self.calls[name]} calls, "
                 f"{sec / self.calls[name] * 1000:.2f} ms each)"
                 for name, sec in sorted(self.seconds.items(), key=lambda kv: -kv[1])]
        rest = total - sum(self.seconds.values())
        return "; ".join([*parts, f"other {rest:.1f} s ({rest / total:.0%})"])


async def recover(settings: Any, breakdown: Breakdown) -> tuple[float, Any, int]:
    from memoryd.clock import SystemClock
    from memoryd.lifecycle import recovery as recovery_module
    from memoryd.lifecycle.recovery import Recovery
    from memoryd.lifecycle.sync_policy import recovery_policy
    from memoryd.memory.opening import open_memory_backend
    from memoryd.process import tune_threads
    from memoryd.store import sessions as store
    from memoryd.store.database import open_store

    tune_threads()  # as `memoryd run` and `memoryd sync` do
    clock = SystemClock()
    for name in ("messages_from", "advance_sync_index"):
        setattr(store, name, breakdown.wrap_async(name, getattr(store, name)))
    recovery_module.plan_segments = breakdown.wrap(  # type: ignore[attr-defined]
        "plan_segments", recovery_module.plan_segments)
    async with open_store(settings) as conn:
        backend = await open_memory_backend(settings, clock)
        backend.save_conversation_segment = breakdown.wrap_async(  # type: ignore[method-assign]
            "save_conversation_segment", backend.save_conversation_segment)
        try:
            began = time.perf_counter()
            report = await Recovery(conn, backend, clock, recovery_policy(settings)).run(
                force=True)
            seconds = time.perf_counter() - began
        finally:
            await backend.close()
        async with conn.execute(
            "SELECT COALESCE(SUM(message_count - memory_sync_index), 0) FROM sessions"
        ) as cursor:
            row = await cursor.fetchone()
    return seconds, report, int(row[0])


# -- quiet -> recallable -------------------------------------------------------------------
def _start_daemon(config: Path, work: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen(memoryd_command(config, "run"), env=isolated_env(work / "xdg"),
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def _append(path: Path, line: bytes) -> None:
    """Append and flush: from here on the line is on disk for memoryd to see."""
    with open(path, "ab") as handle:
        handle.write(line)
        handle.flush()


async def _recallable(backend: Any, memory_db: Path, word: str, notes: list[str]) -> bool:
    """`backend.recall(word)` finds it; should recall itself fail, a plain FTS5 match on
    the memory database stands in (and the failure is reported)."""
    from memoryd.errors import BackendError

    try:
        found = await backend.recall(word, limit=1)
        return bool(found) and word in found[0].content
    except BackendError as exc:
        if not notes:
            notes.append(f"backend.recall raised {exc!r}; fell back to an FTS5 MATCH query")
        return bool(sql_value(memory_db, "SELECT 1 FROM memory_chunks_fts WHERE"
                               " memory_chunks_fts MATCH ?", (f'"{word}"',)))


async def quiet_to_recallable(settings: Any, work: Path, trials: int, sync_delay: float,
                              check_interval: float, seed: int,
                              extra: dict[str, Any]) -> list[tuple[float, float]]:
    from memoryd.clock import SystemClock
    from memoryd.memory import SQLiteMemoryBackend

    rng = random.Random(seed)
    pools = Pools(rng, text_chars=1 << 20)
    root = Path(str(settings.sources[0].root))
    cwd = "/home/dev/code/quiet-check"
    session_id = "11111111-2222-4333-8444-555555555555"
    writer = SessionWriter(rng, pools, cwd=cwd, session_id=session_id,
                           start=datetime.now(UTC))
    path = root / cwd.replace("/", "-") / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(writer.user_text(300) + writer.assistant_text(600))

    config = write_config(work / "config.yaml", settings.state_dir, root,
                          sync_delay=sync_delay, sync_check_interval=check_interval, **extra)
    db = settings.database_path
    log_path = work / "memoryd-run.log"
    proc = _start_daemon(config, work, log_path)
    results: list[tuple[float, float]] = []
    notes: list[str] = []
    backend = None
    try:
        unsynced = ("SELECT message_count - memory_sync_index FROM sessions"
                    " WHERE external_id = ?")
        began = time.perf_counter()
        deadline = began + 120
        while sql_value(db, unsynced, (session_id,)) != 0:
            if time.perf_counter() > deadline or proc.poll() is not None:
                sys.exit(f"memoryd run did not sync the new session (see {log_path})")
            await asyncio.sleep(0.1)
        print(f"memoryd run: started, new transcript stored and synced in "
              f"{time.perf_counter() - began:.1f} s")
        backend = await SQLiteMemoryBackend.open(settings.memory_path, clock=SystemClock())
        for trial in range(trials):
            word = "quiet" + "".join(rng.choice(string.ascii_lowercase) for _ in range(10))
            line = writer._line(writer._envelope("user", message={
                "role": "user", "content": f"Remember the codename {word} for the release. "
                + pools.prose(rng, 200)}))
            # A trial starts just after the sync job found the last word; without a random
            # pause every append would fall at the same phase of the job's interval.
            await asyncio.sleep(rng.uniform(0, check_interval))
            count = "SELECT message_count FROM sessions WHERE external_id = ?"
            before = sql_value(db, count, (session_id,)) or 0
            # A whole turn, the agent's answer too: a question alone waits for its answer
            # (up to `sync_max_lag`) before it is saved, so that the two are one memory.
            _append(path, line + writer.assistant_text(200))
            appended = time.perf_counter()
            committed = None
            deadline = appended + sync_delay + 60
            while time.perf_counter() < deadline:
                # By the session's message count (indexed): session_messages has no index on
                # uuid, and scanning a million rows per poll would skew what is measured.
                if committed is None and (sql_value(db, count, (session_id,)) or 0) > before:
                    committed = time.perf_counter()
                if await _recallable(backend, settings.memory_path, word, notes):
                    recalled = time.perf_counter()
                    break
                await asyncio.sleep(0.02)
            else:
                sys.exit(f"trial {trial + 1}: {word} not recallable after {sync_delay + 60} s")
            committed = committed or recalled
            results.append((committed - appended, recalled - appended))
            print(f"  trial {trial + 1}: committed after {(committed - appended) * 1000:.0f} ms,"
                  f" recallable after {recalled - appended:.2f} s")
    finally:
        for note in notes:
            print(f"NOTE: {note}")
        if backend is not None:
            await backend.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return results


def sync_through_cli(settings: Any, root: Path, work: Path, extra: dict[str, Any]) -> None:
    """`memoryd sync` as a process on two copies of the built state: messages/s as a user
    gets them (start-up, default settings, a fresh memory store each time)."""
    for run in (1, 2):
        state = work / f"state-{run}"
        shutil.copytree(settings.state_dir, state)
        # The copy's gigabytes written back to disk during the timing would be measured as
        # memoryd's: a user's state was not written a moment before.
        os.sync()
        config = write_config(work / f"config-{run}.yaml", state, root,
                              log_level="warning", **extra)
        began = time.perf_counter()
        done = subprocess.run(memoryd_command(config, "sync"), env=isolated_env(work / "xdg"),
                              cwd=REPO, capture_output=True, text=True)
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            sys.exit(f"memoryd sync failed ({done.returncode}):\n{done.stderr[-3000:]}")
        # "saved S segments (M messages) from N sessions, ..."
        words = done.stdout.split()
        segments, messages = int(words[1]), int(words[3].lstrip("("))
        print(f"memoryd sync, run {run}: {seconds:.1f} s, {messages} messages in {segments}"
              f" segments: {messages / seconds:,.0f} messages/s")
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true",
                        help="100 sessions, 100,000 messages")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trials", type=int, default=8, help="quiet -> recallable trials")
    parser.add_argument("--sync-delay", type=float, default=2.0)
    parser.add_argument("--sync-check-interval", type=float, default=1.0)
    parser.add_argument("--skip-live", action="store_true",
                        help="only the full recovery pass, not the live part")
    parser.add_argument("--profile", action="store_true",
                        help="run the recovery pass under cProfile (slower) and print hot spots")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--cli", action="store_true",
                        help="the user's path instead of the in-process pass: `memoryd sync`"
                             " as a process, twice, each on a copy of the state")
    parser.add_argument("--huge", type=int, metavar="N", default=None,
                        help="one session of N messages of about 4 KB each (the audit's long"
                             " session) instead of many sessions")
    add_model_down_options(parser, earlier=False)
    args = parser.parse_args(argv)
    with model_down(args.llm_down) as extra:
        return _run(args, parser, extra)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser,
         extra: dict[str, Any]) -> int:
    if args.quick:
        args.sessions, args.messages = 100, 100_000
    if args.huge is not None:
        args.sessions, args.messages = 1, args.huge
    if args.messages < args.sessions:
        parser.error("--messages must be at least --sessions")

    from memoryd.config import load_settings

    work = Path(tempfile.mkdtemp(prefix="memoryd-bench-recovery-"))
    isolate_this_process(work / "xdg")
    root = work / "projects"
    root.mkdir()
    settings = load_settings(None, state_dir=work / "state",
                             sources=[{"kind": "claude", "root": str(root)}],
                             log_format="json", log_level="warning", **extra)
    from memoryd.logging import configure_logging

    configure_logging(settings.log_level, settings.log_format, stream=sys.stderr)
    print(f"machine: {machine()}")
    try:
        began = time.perf_counter()
        facts = build_state(settings, args.sessions, args.messages, args.seed,
                            floor=3500 if args.huge is not None else 0)
        print(f"state: {args.sessions} sessions, {args.messages} messages (sessions of "
              f"{facts['smallest']} to {facts['largest']}; {facts['boundaries']} compaction "
              f"boundaries, {facts['idle_gaps']} idle gaps), memory_sync_index 0; built in "
              f"{time.perf_counter() - began:.1f} s, "
              f"{db_size(settings.database_path) / MB:.0f} MB")
        print(f"policy: segment_max_chars {settings.segment_max_chars}, segment_idle_gap "
              f"{settings.segment_idle_gap:.0f} s; fresh embedded SQLite memory backend")

        if args.cli:
            sync_through_cli(settings, root, work, extra)
            return 0

        profiler = cProfile.Profile() if args.profile else None
        if profiler is not None:
            profiler.enable()
        breakdown = Breakdown()
        seconds, report, left = asyncio.run(recover(settings, breakdown))
        if profiler is not None:
            profiler.disable()
        segments = report.segments_saved + report.segments_already_stored
        print(f"full recovery pass{' (under cProfile)' if profiler else ''}: {seconds:.1f} s, "
              f"{report.messages_synced} messages in {segments} segments from "
              f"{report.sessions} sessions: {report.messages_synced / seconds:,.0f} messages/s, "
              f"{segments / seconds:,.0f} segments/s; memory db "
              f"{db_size(settings.memory_path) / MB:.0f} MB")
        print(f"where the time went: {breakdown.report(seconds)}")
        print(f"check: {left} messages left unsynced"
              + ("" if not report.failed_sessions else f"; FAILED {report.failed_sessions}"))
        if profiler is not None:
            for key in ("tottime", "cumulative"):
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(args.top)
                text = out.getvalue()
                print(f"-- top {args.top} by {key} (main thread; SQL runs on aiosqlite's "
                      f"thread)\n{text[text.find('   ncalls'):]}")

        if not args.skip_live:
            print(f"\nquiet -> recallable: memoryd run, sync_delay {args.sync_delay:g} s, "
                  f"sync_check_interval {args.sync_check_interval:g} s, on this state "
                  f"({args.messages} messages already in memory)")
            results = asyncio.run(quiet_to_recallable(
                settings, work, args.trials, args.sync_delay, args.sync_check_interval,
                args.seed, extra))
            commits = [c for c, _ in results]
            totals = [t for _, t in results]
            print(f"append -> commit: median {median(commits) * 1000:.0f} ms, max "
                  f"{max(commits) * 1000:.0f} ms")
            print(f"quiet -> recallable: median {median(totals):.2f} s, max {max(totals):.2f} s; "
                  f"minus sync_delay: median {median(totals) - args.sync_delay:.2f} s, max "
                  f"{max(totals) - args.sync_delay:.2f} s")
        if extra:
            print(distillation_report(settings.database_path))
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
