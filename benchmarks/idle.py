"""Idle cost: the CPU an idle `memoryd run` uses while it watches many transcripts.

    python -m benchmarks.idle                    # 1,000 transcripts, 120 s measured
    python -m benchmarks.idle --files 200 --seconds 30

`memoryd run` with default settings (poll_interval 2 s, file notifications on)
on a fresh state_dir and a Claude root of `--files` transcripts (12 projects,
20 lines each, about 8 KB a file). Once every line is stored, every session saved
to memory with its digest, and the daemon quiet (under 2 % of a core for 5 s), the
CPU time it uses (user +
system, from /proc/<pid>/stat, every thread) is read at the start and the end
of `--seconds`, with its RSS. Prints % of one core (target: <= 1 %) and the
same figure per second of polling. Run `python -m benchmarks.latency` beside
it: idle savings must not slow the append-to-row latency (p50 <= 100 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import (
    count_rows,
    isolated_env,
    machine,
    memoryd_command,
    write_config,
)

LINES_PER_FILE = 20


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _write_root(root: Path, files: int) -> int:
    for n in range(files):
        folder = root / f"-project-{n % 12}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(LINES_PER_FILE):
            role = "user" if i % 2 == 0 else "assistant"
            lines.append(json.dumps({
                "type": role, "uuid": f"f{n}-m{i}", "sessionId": f"s{n}",
                "timestamp": "2026-01-01T00:00:00Z",
                "message": {"role": role, "content": f"message {i} of file {n} " + "x" * 300},
            }))
        (folder / f"s{n}.jsonl").write_text("\n".join(lines) + "\n")
    return files * LINES_PER_FILE


def _unsaved(db: Path) -> int:
    """Sessions whose messages or digest are not in memory yet (the daemon still works)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return -1
    try:
        return int(conn.execute(
            "SELECT COUNT(*) FROM sessions WHERE message_count > memory_sync_index"
            " OR digest_index < memory_sync_index").fetchone()[0])
    except sqlite3.Error:
        return -1
    finally:
        conn.close()

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memoryd-idle-") as tmp:
        work = Path(tmp)
        root = work / "claude"
        expected = _write_root(root, args.files)
        config = write_config(work / "config.yaml", work / "state", root,
                              memory={"embeddings": {"fetch_model": False}})
        env = isolated_env(work / "xdg")
        proc = subprocess.Popen(memoryd_command(config, "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            while count_rows(work / "state" / "memoryd.db", "session_messages") < expected:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the daemon did not store every line")
                time.sleep(0.5)
            # Idle means after the work: every session saved to memory with its digest,
            # then the daemon quiet (under 2 % of a core over 5 s) before measuring.
            while _unsaved(work / "state" / "memoryd.db") != 0:
                if time.monotonic() > deadline + 1800 or proc.poll() is not None:
                    raise SystemExit("the daemon did not save every session")
                time.sleep(1)
            settled = time.monotonic()
            while True:
                cpu = _cpu_seconds(proc.pid)
                time.sleep(5)
                if _cpu_seconds(proc.pid) - cpu < 0.1 or time.monotonic() - settled > 300:
                    break
            before, began, rss_before = _cpu_seconds(proc.pid), time.monotonic(), _rss_mb(proc.pid)
            time.sleep(args.seconds)
            used, wall = _cpu_seconds(proc.pid) - before, time.monotonic() - began
            rss = _rss_mb(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    print(f"machine: {machine()}")
    print(f"idle daemon, {args.files} transcripts, {wall:.0f} s: "
          f"{100 * used / wall:.2f} % of one core ({used:.2f} s CPU), RSS {rss:.1f} MB "
          f"({rss_before:.1f} MB when the window began) (targets: <= 1 %, <= 80 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
