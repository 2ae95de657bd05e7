"""Reliability, measured again: the audit's loops in one command, printing the README's table.

    python -m benchmarks.reliability                      # 100 kills, 200 requests, 2,000 idle
    python -m benchmarks.reliability --kills 20 --idle 500

Everything runs against `memoryd run` as a process, on its own state directory, with
the default settings except where a line says otherwise:

1. **Kills.** Three Claude transcripts grow between runs (whole lines, and now and
   then half a line finished in the next round) while the daemon follows them and
   saves segments with no delay (`sync_delay` 0, small segments, so saves are always
   under way). Each run is killed with SIGKILL at a random moment. A kill counts as
   mid-ingest when the run stored messages and lines were still unread at the kill,
   and as mid-sync when the run saved segments and messages were still unsaved.
2. **SIGTERM.** A burst of lines is appended and the daemon is stopped with SIGTERM
   while it saves them: the seconds to exit against `shutdown_grace`, its exit
   status, and its error-level log lines (a clean stop has none).
3. **The end state**, after one clean run to the end: every line written is stored
   exactly once (lost, duplicated), every stored message is in exactly one live
   segment (none in zero, none in two), every session is fully synced.
4. **Concurrent requests.** `--requests` recalls at once (two words of the
   transcripts' vocabulary, one project, as a hook asks), one connection each, on the
   running daemon: answered, failed, p50/p95/max.
5. **Idle connections.** `--idle` connections opened on the socket and left idle; a
   recall meanwhile: answered or not, and how long it took; the log lines written.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import (
    REPO,
    count_rows,
    isolated_env,
    machine,
    memoryd_command,
    percentile,
    sql_value,
    write_config,
)

SESSIONS = 3
WORDS = (
    "deploy", "staging", "migration", "schema", "token", "cache", "retry", "index",
    "worker", "queue", "branch", "commit", "review", "tests", "fixture", "parser",
    "socket", "timeout", "backoff", "session", "vector",
)


@dataclass
class Transcripts:
    """The growing transcripts and every uuid written to each (lines complete or not)."""

    root: Path
    rng: random.Random
    written: dict[str, list[str]] = field(default_factory=dict)
    vocabulary: list[str] = field(default_factory=list)
    pending: dict[str, bytes] = field(default_factory=dict)  # half a line, per file

    def __post_init__(self) -> None:
        # A vocabulary of real size: with a few dozen words every query matches every
        # chunk, which no real store does.
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.vocabulary = list(WORDS) + [
            "".join(self.rng.choice(letters) for _ in range(self.rng.randint(4, 10)))
            for _ in range(5000)]

    def path(self, n: int) -> Path:
        return self.root / f"-home-dev-project{n}" / f"session-{n}.jsonl"

    def _line(self, n: int) -> bytes:
        uuids = self.written.setdefault(str(self.path(n)), [])
        index = len(uuids)
        uuid = f"s{n}-m{index}"
        uuids.append(uuid)
        role = "user" if index % 2 == 0 else "assistant"
        text = " ".join(self.rng.choice(self.vocabulary)
                        for _ in range(self.rng.randint(4, 400)))
        content: Any = text if role == "user" else [{"type": "text", "text": text}]
        stamp = f"2026-11-20T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z"
        record = {"type": role, "uuid": uuid, "sessionId": f"session-{n}",
                  "cwd": f"/home/dev/project{n}", "timestamp": stamp,
                  "message": {"role": role, "content": content}}
        return json.dumps(record).encode() + b"\n"

    def grow(self, lines: int) -> None:
        """Append `lines` lines across the files; sometimes leave one half written."""
        for _ in range(lines):
            n = self.rng.randrange(SESSIONS)
            path = self.path(n)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as out:
                out.write(self.pending.pop(str(path), b""))
                line = self._line(n)
                if self.rng.random() < 0.02:
                    cut = self.rng.randrange(1, len(line) - 1)
                    out.write(line[:cut])
                    self.pending[str(path)] = line[cut:]
                else:
                    out.write(line)

    def finish(self) -> None:
        for name, rest in self.pending.items():
            with open(name, "ab") as out:
                out.write(rest)
        self.pending.clear()

    def total(self) -> int:
        return sum(len(v) for v in self.written.values())

def unsynced(db: Path) -> int:
    return int(sql_value(db, "SELECT SUM(message_count - memory_sync_index) FROM sessions")
               or 0)

def wait_ready(state: Path, pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads((state / "status.json").read_text()).get("pid") == pid:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    sys.exit(f"memoryd (pid {pid}) did not become ready in {timeout:.0f} s")


@dataclass
class Daemon:
    config: Path
    state: Path
    env: dict[str, str]
    log_path: Path

    def start(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            return subprocess.Popen(memoryd_command(self.config, "run"), env=self.env,
                                    cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)

    @property
    def db(self) -> Path:
        return self.state / "memoryd.db"

    @property
    def memory_db(self) -> Path:
        return self.state / "memory.db"


def kill_loop(daemon: Daemon, transcripts: Transcripts, kills: int,
              rng: random.Random) -> dict[str, int]:
    counts = {"kills": 0, "mid_ingest": 0, "mid_sync": 0}
    for _ in range(kills):
        transcripts.grow(rng.randint(200, 3000))
        stored_before = count_rows(daemon.db, "session_messages")
        saved_before = count_rows(daemon.memory_db, "memories")
        proc = daemon.start()
        wait_ready(daemon.state, proc.pid)
        time.sleep(rng.uniform(0.0, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        counts["kills"] += 1
        stored = count_rows(daemon.db, "session_messages")
        saved = count_rows(daemon.memory_db, "memories")
        counts["mid_ingest"] += stored > stored_before and stored < transcripts.total() - len(
            transcripts.pending)
        counts["mid_sync"] += saved > saved_before and unsynced(daemon.db) > 0
    return counts


def sigterm_during_sync(daemon: Daemon, transcripts: Transcripts, grace: float,
                        ) -> dict[str, Any]:
    transcripts.grow(20_000)
    mark = daemon.log_path.stat().st_size if daemon.log_path.exists() else 0
    proc = daemon.start()
    wait_ready(daemon.state, proc.pid)
    saved = count_rows(daemon.memory_db, "memories")
    deadline = time.monotonic() + 120
    while count_rows(daemon.memory_db, "memories") == saved and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    left = unsynced(daemon.db)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=grace + 120)
    seconds = time.monotonic() - began
    with daemon.log_path.open("rb") as log:
        log.seek(mark)
        lines = log.read().decode(errors="replace").splitlines()
    errors = [line for line in lines if '"level": "error"' in line or "Traceback" in line]
    return {"seconds": seconds, "code": code, "errors": len(errors), "unsaved": left}


def run_to_the_end(daemon: Daemon, transcripts: Transcripts) -> subprocess.Popen[bytes]:
    transcripts.finish()
    proc = daemon.start()
    wait_ready(daemon.state, proc.pid)
    deadline = time.monotonic() + 600
    while (count_rows(daemon.db, "session_messages") < transcripts.total()
           or unsynced(daemon.db) > 0):
        if time.monotonic() > deadline:
            sys.exit("the daemon did not store and save everything in 600 s")
        time.sleep(0.2)
    return proc


def end_state(daemon: Daemon, transcripts: Transcripts) -> dict[str, int]:
    conn = sqlite3.connect(daemon.db, timeout=30)
    try:
        stored: dict[str, int] = {}
        for uuid, n in conn.execute("SELECT uuid, COUNT(*) FROM session_messages GROUP BY uuid"):
            stored[uuid] = n
        counts = dict(conn.execute("SELECT id, message_count FROM sessions"))
    finally:
        conn.close()
    written = [u for uuids in transcripts.written.values() for u in uuids]
    lost = sum(1 for u in written if u not in stored)
    duplicated = sum(n - 1 for n in stored.values() if n > 1)
    memory = sqlite3.connect(daemon.memory_db, timeout=30)
    try:
        ranges = memory.execute(
            "SELECT session_id, first_index, last_index FROM memories WHERE type ="
            " 'conversation' AND superseded_by IS NULL AND deleted_at IS NULL").fetchall()
    finally:
        memory.close()
    times: dict[tuple[int, int], int] = {}
    for session, first, last in ranges:
        for index in range(first, last + 1):
            times[(session, index)] = times.get((session, index), 0) + 1
    in_none = sum(1 for session, count in counts.items() for index in range(count)
                  if (session, index) not in times)
    in_two = sum(1 for n in times.values() if n > 1)
    return {"written": len(written), "lost": lost, "duplicated": duplicated,
            "in_no_segment": in_none, "in_two_segments": in_two,
            "unsynced": unsynced(daemon.db)}


PROJECT = "/home/dev/project0"


def _recall(sock: Path, query: str) -> tuple[str | None, float]:
    """(None, ms) when answered, else (why, ms)."""
    import httpx

    began = time.perf_counter()
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)),
                          base_url="http://memoryd", timeout=60) as client:
            response = client.post("/v1/recall", json={"query": query, "project": PROJECT,
                                                           "limit": 10})
        why = None if response.status_code == 200 else f"HTTP {response.status_code}"
    except Exception as exc:  # any failure counts; the table says how many, and why
        why = type(exc).__name__
    return why, (time.perf_counter() - began) * 1000


def concurrent_requests(sock: Path, requests: int, words: list[str],
                        rng: random.Random) -> dict[str, Any]:
    queries = [" ".join(rng.sample(words, 2)) for _ in range(requests)]
    with concurrent.futures.ThreadPoolExecutor(requests) as pool:
        results = list(pool.map(lambda q: _recall(sock, q), queries))
    times = [ms for why, ms in results if why is None]
    reasons = sorted({why for why, _ in results if why is not None})
    return {"answered": len(times), "failed": requests - len(times), "why": reasons,
            "p50": percentile(times, 50) if times else float("nan"),
            "p95": percentile(times, 95) if times else float("nan"),
            "max": max(times, default=float("nan"))}


def idle_connections(sock: Path, daemon: Daemon, count: int) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 100), hard))
    mark = daemon.log_path.stat().st_size
    opened: list[socket.socket] = []
    refused = 0
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(sock))
            except OSError:
                refused += 1
                s.close()
                continue
            opened.append(s)
        time.sleep(1.0)
        why, ms = _recall(sock, "deploy staging")
        time.sleep(1.0)
    finally:
        for s in opened:
            s.close()
    with daemon.log_path.open("rb") as log:
        log.seek(mark)
        lines = log.read().decode(errors="replace").splitlines()
    return {"opened": len(opened), "refused": refused, "recall_ok": why is None, "recall_ms": ms,
            "log_lines": len(lines), "tracebacks": sum("Traceback" in line for line in lines)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="memoryd-bench-reliability-"))
    root = work / "claude"
    root.mkdir()
    state = work / "state"
    grace = 5.0
    config = write_config(work / "config.yaml", state, root, log_level="info",
                          poll_interval="0.1s", sync_delay=0, sync_max_lag=0,
                          sync_check_interval="0.05s", segment_max_chars=2000,
                          shutdown_grace=f"{grace:g}s",
                          memory={"embeddings": {"fetch_model": False}})
    daemon = Daemon(config, state, isolated_env(work / "xdg"), work / "daemon.log")
    transcripts = Transcripts(root, rng)
    print(f"machine: {machine()}")
    proc: subprocess.Popen[bytes] | None = None
    try:
        began = time.perf_counter()
        kills = kill_loop(daemon, transcripts, args.kills, rng)
        print(f"kills: {kills['kills']} SIGKILLs in {time.perf_counter() - began:.0f} s, "
              f"{kills['mid_ingest']} mid-ingest, {kills['mid_sync']} mid-sync")
        stop = sigterm_during_sync(daemon, transcripts, grace)
        print(f"SIGTERM while {stop['unsaved']} messages waited to be saved: exit "
              f"{stop['code']} in {stop['seconds']:.2f} s (shutdown_grace {grace:g} s), "
              f"{stop['errors']} error-level log lines")
        proc = run_to_the_end(daemon, transcripts)
        end = end_state(daemon, transcripts)
        print(f"end state: {end['written']} lines written; {end['lost']} lost, "
              f"{end['duplicated']} duplicated; {end['in_no_segment']} messages in no live "
              f"segment, {end['in_two_segments']} in two; {end['unsynced']} unsynced")
        sock = state / "memoryd.sock"
        _recall(sock, "warm up")  # the daemon opens its memory store on first use
        burst = concurrent_requests(sock, args.requests, transcripts.vocabulary, rng)
        print(f"{args.requests} concurrent recalls: {burst['answered']} answered, "
              f"{burst['failed']} failed {burst['why'] or ''}; p50 {burst['p50']:.0f} ms, "
              f"p95 {burst['p95']:.0f} ms, max {burst['max']:.0f} ms")
        idle = idle_connections(sock, daemon, args.idle)
        print(f"{idle['opened']} idle connections held ({idle['refused']} refused at connect):"
              f" a recall meanwhile {'answered' if idle['recall_ok'] else 'FAILED'} in "
              f"{idle['recall_ms']:.0f} ms; {idle['log_lines']} log lines, "
              f"{idle['tracebacks']} tracebacks")
        failed = (end["lost"] or end["duplicated"] or end["in_no_segment"]
                  or end["in_two_segments"] or end["unsynced"] or burst["failed"]
                  or not idle["recall_ok"] or stop["code"] != 0 or stop["errors"])
        return 1 if failed else 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
