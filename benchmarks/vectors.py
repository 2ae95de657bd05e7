"""Vectors in the background: how fast the daemon embeds a backlog, and what it costs
ingest and recall meanwhile.

    python -m benchmarks.vectors [--ingest-mb 100] [--queries 100]

1. LoCoMo's conversations as Claude transcripts (as `benchmarks.locomo` writes them),
   stored and saved by `memoryd ingest --once` and `memoryd sync`: every chunk waits
   for a vector. Default settings, but the local model's weights are fetched into the
   state directory beforehand (what the daemon does on its first embedding) and
   `sync_check_interval` is an hour (so the transcripts added in step 3 add no chunks).
2. `memoryd run`; `memoryd status --json` is asked every second: chunks still waiting,
   and the pace and expected end the daemon reports. Chunks a second = chunks
   embedded / time from the first one to the last.
3. While it embeds, and again once it is done, on the same daemon:
   - recall: `--queries` LoCoMo questions through `POST /v1/recall` (limit 10), twice;
   - ingest: a generated Claude corpus of `--ingest-mb` MB (`benchmarks.gen_corpus`)
     (another seed each time) copied into the watched root, twice in each phase; MB/s
     from the copy to every message committed.
   The ratios during / after are the cost of embedding to the daemon's own work.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import gen_corpus
from benchmarks._common import (
    MB,
    REPO,
    isolated_env,
    machine,
    memoryd_command,
    percentile,
    write_config,
)
from benchmarks.locomo import DATA, write_transcripts


def cli(config: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(memoryd_command(config, *args), env=env, cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"memoryd {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def status(config: Path, env: dict[str, str]) -> dict[str, Any]:
    memory: dict[str, Any] = json.loads(cli(config, env, "status", "--json"))["memory"]
    return memory


def recall_pass(socket: Path, questions: list[str]) -> list[float]:
    times = []
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)),
                      base_url="http://memoryd", timeout=60) as client:
        for question in questions:
            began = time.perf_counter()
            answer = client.post("/v1/recall", json={"query": question, "limit": 10})
            times.append((time.perf_counter() - began) * 1000)
            answer.raise_for_status()
    return times


def stored_messages(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM session_messages").fetchone()[0])
    finally:
        conn.close()


def ingest_rate(root: Path, db: Path, corpus: gen_corpus.CorpusInfo) -> float:
    """MB/s from copying `corpus` into the watched root to all its messages stored."""
    want = stored_messages(db) + corpus.messages
    began = time.perf_counter()
    shutil.copytree(corpus.root, root / Path(corpus.root).parent.name)
    while stored_messages(db) < want:
        time.sleep(0.02)
    return corpus.bytes / MB / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ingest-mb", type=float, default=100.0)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="memoryd-bench-vectors-"))
    root, state = work / "claude", work / "state"
    root.mkdir()
    data = json.loads(DATA.read_text())
    write_transcripts(data, root)
    questions = [q["question"] for sample in data for q in sample["qa"]
                 if q.get("category") != 5][:args.queries]
    # No sync while measuring: the corpora added in step 3 must not add chunks.
    config = write_config(work / "config.yaml", state, root, sync_check_interval="1h")
    env = isolated_env(work / "xdg")
    # Four corpora, each of other names (a file named like a live transcript elsewhere
    # would be held back as a possible move): two while embedding, two after.
    corpora = [gen_corpus.ensure(work / f"corpus-{seed}", int(args.ingest_mb * MB), seed)[0]
               for seed in (11, 12, 13, 14)]
    proc = None
    try:
        cli(config, env, "ingest", "--once")
        cli(config, env, "sync")
        fetch = ("from pathlib import Path; from daemon.config import load_settings;"
                 " from daemon.memory.embeddings import weights;"
                 f" weights.fetch(load_settings(Path({str(config)!r})).models_path)")
        subprocess.run([sys.executable, "-c", fetch], env=env, cwd=REPO, check=True,
                       capture_output=True)
        waiting = status(config, env)["chunks_waiting_for_vector"]
        print(f"backlog: {waiting} chunks (LoCoMo, {len(data)} conversations)")
        with (work / "daemon.log").open("wb") as log:
            proc = subprocess.Popen(memoryd_command(config, "run"), env=env, cwd=REPO,
                                    stdout=subprocess.DEVNULL, stderr=log)
        socket = state / "memoryd.sock"
        while not socket.exists():
            time.sleep(0.1)
        began = time.perf_counter()
        seen: list[tuple[float, int, Any, Any]] = []

        def look() -> int:
            memory = status(config, env)
            left = int(memory["chunks_waiting_for_vector"])
            seen.append((time.perf_counter() - began, left,
                         memory.get("embedding_per_second"),
                         memory.get("embedding_done_in_seconds")))
            return left

        while look() >= waiting:
            time.sleep(0.5)
        first = seen[-1][0]
        during = [recall_pass(socket, questions) for _ in range(2)]
        ingest_during = [ingest_rate(root, state / "memoryd.db", corpus)
                         for corpus in corpora[:2]]
        still = look()
        if still == 0:
            print("WARNING: the backlog ended before the measurements while embedding did")
        while look() > 0:
            time.sleep(1.0)
        last = seen[-1][0]
        after = [recall_pass(socket, questions) for _ in range(2)]
        ingest_after = [ingest_rate(root, state / "memoryd.db", corpus)
                        for corpus in corpora[2:]]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    rate = (waiting - 0) / max(last - first, 1e-9)
    print(f"\nembedding: {waiting} chunks in {last - first:.1f} s after the first one "
          f"(started {first:.1f} s after the daemon): {rate:.1f} chunks/s")
    paced = [s for s in seen if s[2] and s[1] > 0]
    if paced:
        t, left, pace, done_in = paced[len(paced) // 4]
        print(f"status at {t:.0f} s: {left} waiting, {pace} a second, done in {done_in} s "
              f"(predicted end {t + done_in:.0f} s, actual {last:.0f} s)")
    for label, passes in (("while embedding", during), ("after", after)):
        for n, times in enumerate(passes, 1):
            print(f"recall {label}, pass {n}: p50 {percentile(times, 50):.1f} ms, "
                  f"p95 {percentile(times, 95):.1f} ms ({len(times)} queries)")
    p50_during = percentile([t for p in during for t in p], 50)
    p50_after = percentile([t for p in after for t in p], 50)
    print(f"recall p50 while embedding / after: {p50_during / p50_after:.2f} "
          "(target <= 1.10)")
    for label, rates in (("while embedding", ingest_during), ("after", ingest_after)):
        print(f"ingest {label}: two corpora of {args.ingest_mb:g} MB at "
              + " and ".join(f"{r:.1f}" for r in rates) + " MB/s")
    ratio = statistics.mean(ingest_after) / statistics.mean(ingest_during)
    print(f"ingest time while embedding / after (mean MB/s): {ratio:.2f} (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
