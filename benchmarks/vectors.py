"""Vectors in the background: how fast the daemon embeds a backlog, and what it costs
ingest and recall meanwhile.

    python -m benchmarks.vectors [--ingest-mb 100] [--queries 100] [--peer-workdir DIR]
                                 [--no-peer] [--keep]

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
4. The model's speed in tokens a second on the backlog's texts: the daemon's pace from
   10 % to 35 % of the backlog (before step 3 asks anything of it), memoryd's model
   alone in this process (32 texts a call, as the daemon calls it), and
   sentence-transformers on the same weights and texts in the peers' virtual environment
   (`benchmarks.peers`; made on first use, offline under `unshare -n`, needs root;
   `--no-peer` skips it). Issue 37's target: the daemon at >= 1.5x sentence-transformers.
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
    count_rows,
    isolated_env,
    machine,
    memoryd_command,
    percentile,
    write_config,
)
from benchmarks.locomo import DATA, write_transcripts

#: The share of the backlog over which the model's pace is taken, before anything else
#: is asked of the daemon.
QUIET_FROM, QUIET_TO = 0.1, 0.35
PEERS_WORKDIR = Path.home() / ".cache" / "memoryd-peers"


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

def ingest_rate(root: Path, db: Path, corpus: gen_corpus.CorpusInfo) -> float:
    """MB/s from copying `corpus` into the watched root to all its messages stored."""
    want = count_rows(db, "session_messages") + corpus.messages
    began = time.perf_counter()
    shutil.copytree(corpus.root, root / Path(corpus.root).parent.name)
    while count_rows(db, "session_messages") < want:
        time.sleep(0.02)
    return corpus.bytes / MB / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ingest-mb", type=float, default=100.0)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--peer-workdir", type=Path, default=PEERS_WORKDIR,
                        help="the peers' virtual environment (benchmarks.peers; made on first"
                             " use, about 1.9 GB) where sentence-transformers runs")
    parser.add_argument("--no-peer", action="store_true",
                        help="skip sentence-transformers")
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
        fetch = ("from pathlib import Path; from memoryd.config import load_settings;"
                 " from memoryd.memory.embeddings import weights;"
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

        # The model's pace with nothing else to do, over the first quarter of the backlog:
        # watched in the database, not with `memoryd status` processes, which would take
        # the cores the background threads yield.
        # It starts past the first few percent: the daemon's own start-up work is done.
        memory_db = state / "memory.db"
        while (done := count_rows(memory_db, "chunk_vectors")) == 0:
            time.sleep(0.1)
        first = time.perf_counter() - began
        while (done := count_rows(memory_db, "chunk_vectors")) < waiting * QUIET_FROM:
            time.sleep(0.1)
        quiet_from = (time.perf_counter() - began, done)
        while (done := count_rows(memory_db, "chunk_vectors")) < waiting * QUIET_TO:
            time.sleep(0.25)
        quiet_to = (time.perf_counter() - began, done)
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
        proc.terminate()
        proc.wait(60)
        proc = None
        speeds = model_speeds(work, state, waiting, quiet_from, quiet_to,
                              None if args.no_peer else args.peer_workdir)
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
    print("\n".join(speeds))
    return 0

def model_speeds(work: Path, state: Path, backlog: int, start: tuple[float, int],
                 end: tuple[float, int], peer: Path | None) -> list[str]:
    """Tokens a second on the backlog's texts: the daemon's quiet pace, memoryd's model
    alone in this process, and sentence-transformers on the same weights and texts."""
    import numpy as np

    from memoryd.memory.embeddings import local

    conn = sqlite3.connect(f"file:{state / 'memory.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT c.content, v.vector FROM memory_chunks c JOIN chunk_vectors v"
                            " ON v.chunk_seq = c.seq ORDER BY c.seq").fetchall()
    finally:
        conn.close()
    texts = [r[0] for r in rows][:backlog]
    stored = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows][:backlog])
    model = local.LocalEmbedder.load(models=state / "models")
    try:
        tokens = [len(e.ids) for e in model._tokenizer.encode_batch(texts)]
        # The daemon embeds in seq order: after `n` chunks, the first `n` are done.
        done = np.concatenate([[0], np.cumsum(tokens)])
        (t0, done0), (t1, done1) = start, end
        daemon_rate = (done[done1] - done[done0]) / max(t1 - t0, 1e-9)
        model.embed(texts[:32])
        began = time.perf_counter()
        for at in range(0, len(texts), 32):  # as the daemon calls it, 32 texts at a time
            model.embed(texts[at:at + 32])
        alone = sum(tokens) / (time.perf_counter() - began)
    finally:
        model.close()
    lines = [f"\nthe model's speed on the backlog's {len(texts)} chunks ({sum(tokens)} tokens,"
             f" {model.runtime}):",
             f"  the daemon, before the measurements above (chunks {done0}..{done1}"
             f" of {backlog}, {t1 - t0:.1f} s): {daemon_rate:,.0f} tokens/s",
             f"  memoryd's model alone, 32 texts a call: {alone:,.0f} tokens/s"]
    if peer is None:
        return lines
    from benchmarks.peers.__main__ import sentence_transformers_speed

    path = work / "backlog.json"
    path.write_text(json.dumps(texts))
    st = sentence_transformers_speed(peer.resolve(), path)
    theirs = np.load(path.with_suffix(".st.npy"))
    rate = st["tokens"] / st["seconds"]
    lines += [f"  sentence-transformers {st['sentence_transformers']} (torch {st['torch']},"
              f" {st['threads']} threads, batch 32), same weights and texts: {rate:,.0f} tokens/s"
              f" ({st['tokens']} tokens)",
              f"  the daemon / sentence-transformers: {daemon_rate / rate:.2f}x; the model alone:"
              f" {alone / rate:.2f}x (target >= 1.5)",
              f"  the daemon's stored vectors against sentence-transformers': lowest cosine"
              f" {float((theirs * stored).sum(axis=1).min()):.6f}"]
    return lines


if __name__ == "__main__":
    sys.exit(main())
