"""Live latency: from a line's append to its row's commit, with `memoryd run` following.

    python -m benchmarks.latency                     # 20 lines/s for 30 s into 4 sessions
    python -m benchmarks.latency --rate 50 --seconds 10 --sessions 8
    python -m benchmarks.latency --earlier 20 [--llm-down]   # the same with a model down

`memoryd run` runs as a subprocess on a fresh state_dir and a temporary Claude
root, with its default settings (poll_interval 2 s, file notifications on). A
writer thread appends user/assistant lines of random size (log-uniform, 200 B to
20 KB) to the transcripts at a steady rate; the append time is taken after
write+flush. A reader thread polls the daemon's database read-only in a tight
loop (`--poll-ms`, 1 ms by default) and notes when each line's row, found by its
uuid, first becomes visible, i.e. committed. Both clocks are this process's
`perf_counter`, so latency = seen - appended, overstated by at most one poll.

`--earlier N` adds N finished sessions of two days ago, which the daemon saves at
start-up; `--llm-down` also configures distillation with a model that takes
connections and never answers, so its queue is full and its worker waiting throughout
the run: compare the two (capture must not notice).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import (
    EARLIER_LINES,
    REPO,
    add_model_down_options,
    count_rows,
    distillation_report,
    earlier_of,
    earlier_sessions,
    isolated_env,
    machine,
    memoryd_command,
    model_down,
    percentile,
    write_config,
)
from benchmarks.gen_corpus import Pools, SessionWriter

ENVELOPE = 420  # bytes a user line carries besides its text


class Poller(threading.Thread):
    """Notes the first time each message uuid is visible in the daemon's database."""

    def __init__(self, db: Path, interval: float) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.interval = interval
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self.polls = 0

    def run(self) -> None:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, isolation_level=None)
        last_id = 0
        while not self.stop.is_set():
            rows = conn.execute("SELECT id, uuid FROM session_messages WHERE id > ? ORDER BY id",
                                (last_id,)).fetchall()
            now = time.perf_counter()
            self.polls += 1
            for row_id, uuid in rows:
                self.seen.setdefault(uuid, now)
                last_id = row_id
            time.sleep(self.interval)
        conn.close()


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    sys.exit(f"timed out after {timeout:.0f} s waiting for {what}")

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="lines per second (20)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to append (30)")
    parser.add_argument("--sessions", type=int, default=4, help="transcripts appended to (4)")
    parser.add_argument("--min-bytes", type=int, default=200)
    parser.add_argument("--max-bytes", type=int, default=20_000)
    parser.add_argument("--poll-ms", type=float, default=1.0, help="reader poll interval")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    add_model_down_options(parser)
    args = parser.parse_args(argv)
    args.earlier = earlier_of(args)
    with model_down(args.llm_down) as model:
        return _run(args, model)


def _run(args: argparse.Namespace, model: dict[str, Any]) -> int:

    rng = random.Random(args.seed)
    pools = Pools(rng, text_chars=1 << 20)
    work = Path(tempfile.mkdtemp(prefix="memoryd-bench-latency-"))
    root = work / "projects"
    state = work / "state"
    db = state / "memoryd.db"
    writers: list[tuple[SessionWriter, Path]] = []
    for i in range(args.sessions):
        cwd = f"/home/dev/code/latency-{i % 2}"
        session_id = f"00000000-0000-4000-8000-{i:012d}"
        writer = SessionWriter(rng, pools, cwd=cwd, session_id=session_id,
                               start=datetime.now(UTC))
        path = root / cwd.replace("/", "-") / f"{session_id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(writer.user_text(200))
        writers.append((writer, path))

    earlier_sessions(root, args.earlier)
    config = write_config(work / "config.yaml", state, root, **model)
    log_path = work / "memoryd.log"
    print(f"machine: {machine()}")
    print(f"memoryd run: subprocess, default settings (poll_interval 2 s); work dir {work}")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(memoryd_command(config, "run"), env=isolated_env(work / "xdg"),
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        started = time.perf_counter()
        _wait_for(lambda: count_rows(db, "session_messages")
                  >= args.sessions + EARLIER_LINES * args.earlier,
                  60, "the daemon to store the first line of every transcript")
        print(f"daemon up and caught up in {time.perf_counter() - started:.2f} s")
        # Let the start-up recovery pass and file watches settle before measuring.
        time.sleep(1.0)

        poller = Poller(db, args.poll_ms / 1000)
        poller.start()
        handles = [open(path, "ab") for _w, path in writers]  # noqa: SIM115
        appended: dict[str, float] = {}
        lateness: list[float] = []
        total = int(args.rate * args.seconds)
        sizes = 0
        begin = time.perf_counter()
        for i in range(total):
            due = begin + i / args.rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            k = rng.randrange(len(writers))
            writer, _path = writers[k]
            size = int(args.min_bytes * (args.max_bytes / args.min_bytes) ** rng.random())
            chars = max(10, size - ENVELOPE)
            line = writer.user_text(chars) if rng.random() < 0.5 else writer.assistant_text(chars)
            handles[k].write(line)
            handles[k].flush()
            now = time.perf_counter()
            assert writer.parent is not None
            appended[writer.parent] = now
            lateness.append(now - due)
            sizes += len(line)
        wrote = time.perf_counter() - begin
        for handle in handles:
            handle.close()
        deadline = time.perf_counter() + 15
        while time.perf_counter() < deadline and not all(u in poller.seen for u in appended):
            time.sleep(0.05)
        poller.stop.set()
        poller.join()
    finally:
        stop_began = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        stopped_in = time.perf_counter() - stop_began

    latencies = [(poller.seen[u] - t) * 1000 for u, t in appended.items() if u in poller.seen]
    missing = len(appended) - len(latencies)
    print(f"appended {len(appended)} lines ({sizes / (1 << 20):.1f} MB, {args.min_bytes} B to "
          f"{args.max_bytes} B) to {args.sessions} transcripts in {wrote:.1f} s "
          f"({len(appended) / wrote:.1f} lines/s; writer late by p99 "
          f"{percentile(lateness, 99) * 1000:.1f} ms); reader polled every {args.poll_ms} ms "
          f"({poller.polls} polls)")
    if latencies:
        p50, p90, p99 = (percentile(latencies, q) for q in (50, 90, 99))
        print(f"append -> commit latency (ms): p50 {p50:.1f}  p90 {p90:.1f}  p99 {p99:.1f}  "
              f"max {max(latencies):.1f}  mean {sum(latencies) / len(latencies):.1f}")
        print(f"targets: p50 <= 100 ms: {'met' if p50 <= 100 else 'MISSED'}; "
              f"p99 <= 2500 ms: {'met' if p99 <= 2500 else 'MISSED'}")
    if missing:
        print(f"WARNING: {missing} appended lines never appeared within 15 s")
    if model:
        print(distillation_report(db))
    print(f"SIGTERM -> exit {code} in {stopped_in:.2f} s")
    if args.keep:
        print(f"kept {work} (daemon log: {log_path})")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if not missing and code == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
