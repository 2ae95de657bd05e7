"""The web viewer's pages with real data, through the running daemon's viewer.

    python -m benchmarks.ui                        # 1,000 sessions, 100,000 memories
    python -m benchmarks.ui --sessions 100 --memories 10000 --messages 20000   # quick

1. The state database is built as `benchmarks.recovery` builds it (N sessions,
   M messages in Claude Code's shape, every session already synced), and the
   memory database is filled through the embedded backend's own import with
   `--memories` conversation memories tied to those sessions' message ranges
   (so that session pages link to them and the chart counts them).
2. `memoryd run` starts on it; `memoryd ui --no-browser` asks it for the viewer;
   an HTTP client logs in with the printed address, as a browser would.
3. Each page is fetched once to warm up, then `--requests` times in each of two
   passes; p50 and p95 of each pass are printed (target: every page under 300 ms).
   The chart image is timed apart: its first draw scans a month of messages, then
   it is cached for five minutes.

Settings are the defaults except `memory.embeddings.fetch_model: false` (no model
download in a benchmark; recall is by keywords here, `benchmarks.backends` measures
hybrid recall at this size).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx

from benchmarks._common import machine, memoryd_command, percentile, workspace


def _queries(rng: random.Random, count: int = 10) -> list[str]:
    """Two words of a synthetic memory's text: queries that find something."""
    from benchmarks.locomo import _synthetic

    out = []
    for _ in range(count):
        words = [w.strip(".,:") for w in _synthetic(rng)[0].split() if len(w) > 4]
        out.append(" ".join(rng.sample(words, 2)))
    return out


async def fill_memories(config: Path, total: int, seed: int) -> list[str]:
    """`total` conversation memories over the sessions' first messages; their ids."""
    import sqlite3

    from benchmarks.locomo import _synthetic
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.memory import Memory, MemoryType, Provenance, memory_to_record, new_memory_id
    from memoryd.memory.opening import open_memory_backend

    settings = load_settings(config)
    with sqlite3.connect(settings.database_path) as db:
        rows = db.execute("SELECT id, external_id, project, message_count, started_at"
                          " FROM sessions").fetchall()
    rng = random.Random(seed)
    backend = await open_memory_backend(settings, SystemClock(), vectors=False)
    now = SystemClock().now()
    ids: list[str] = []
    try:
        for start in range(0, total, 5000):
            records = []
            for _ in range(min(5000, total - start)):
                sid, external, project, count, _started = rng.choice(rows)
                first = rng.randrange(max(1, count - 20))
                text, _picks = _synthetic(rng)
                when = now - timedelta(days=rng.uniform(0, 29))
                memory = Memory(
                    id=new_memory_id(), content=text, type=MemoryType.CONVERSATION,
                    importance=0.5, project=project, tags=(),
                    provenance=Provenance(session_id=sid, session_external_id=external,
                                          source="claude", project=project, first_index=first,
                                          last_index=first + 19, started_at=when,
                                          ended_at=when),
                    created_at=now, updated_at=now)
                records.append(memory_to_record(memory))
                ids.append(memory.id)
            await backend.import_records(records)
            print(f"  memories {start + len(records):,}/{total:,}", file=sys.stderr)
    finally:
        await backend.close()
    return ids


def _time(client: httpx.Client, path: str, times: int) -> list[float]:
    out = []
    for _ in range(times):
        began = time.perf_counter()
        answer = client.get(path)
        out.append((time.perf_counter() - began) * 1000)
        if answer.status_code != 200:
            raise RuntimeError(f"{path}: HTTP {answer.status_code}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)

    from benchmarks.recovery import build_state
    from memoryd.config import load_settings

    with workspace("ui", keep=args.keep) as (work, config, env):
        proc: subprocess.Popen[bytes] | None = None
        try:
            print(machine())
            began = time.perf_counter()
            settings = load_settings(config)
            build_state(settings, args.sessions, args.messages, args.seed)
            import sqlite3

            with sqlite3.connect(settings.database_path) as db:
                db.execute("UPDATE sessions SET memory_sync_index = message_count")
                largest = db.execute("SELECT id, message_count FROM sessions"
                                     " ORDER BY message_count DESC LIMIT 1").fetchone()
            ids = asyncio.run(fill_memories(config, args.memories, args.seed))
            print(f"data: {args.sessions:,} sessions, {args.messages:,} messages (largest session"
                  f" {largest[1]:,}), {args.memories:,} memories; built in"
                  f" {time.perf_counter() - began:.0f} s")
            with (work / "daemon.log").open("wb") as log:
                proc = subprocess.Popen(memoryd_command(config, "run"), env=env, stdout=log,
                                        stderr=subprocess.STDOUT)
            socket = settings.socket_path
            deadline = time.monotonic() + 120
            while not socket.exists():
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the daemon did not start (see {work / 'daemon.log'})")
                time.sleep(0.1)
            done = subprocess.run(memoryd_command(config, "ui", "--no-browser"), env=env,
                                  capture_output=True, text=True, timeout=120, check=True)
            url = done.stdout.strip()
            base = url.split("/login")[0]
            rng = random.Random(args.seed)
            with httpx.Client(base_url=base, timeout=60) as client:
                client.get(url[len(base):])
                page_of_memory = f"/memories/{rng.choice(ids)}"
                pages: dict[str, list[str]] = {
                    "overview /": ["/"],
                    "sessions /sessions": ["/sessions"],
                    f"session (largest, {largest[1]:,} messages), first page":
                        [f"/sessions/{largest[0]}"],
                    "session, a page in the middle":
                        [f"/sessions/{largest[0]}?offset={(largest[1] // 400) * 200}"],
                    "memories search (10 queries)": [
                        f"/memories?{httpx.QueryParams({'q': q})}" for q in _queries(rng)],
                    "memory detail": [page_of_memory],
                    "activity": ["/activity"],
                }
                chart_first = _time(client, "/chart.svg?what=messages", 1)[0]
                rows = []
                for name, paths in pages.items():
                    for path in paths:
                        _time(client, path, 1)
                    passes = []
                    for _ in range(2):
                        samples: list[float] = []
                        for path in paths:
                            samples += _time(client, path, max(1, args.requests // len(paths)))
                        passes.append(samples)
                    rows.append((name, passes))
                chart_cached = _time(client, "/chart.svg?what=memories", args.requests)
                found = client.get(pages["memories search (10 queries)"][0]).text
                size, results = len(found), found.count('class="result"')
            print("\n| page | pass 1 p50 / p95 | pass 2 p50 / p95 |")
            print("|---|---|---|")
            worst = 0.0
            for name, passes in rows:
                cells = [f"{percentile(p, 50):.0f} / {percentile(p, 95):.0f} ms" for p in passes]
                worst = max(worst, *(percentile(p, 95) for p in passes))
                print(f"| {name} | {cells[0]} | {cells[1]} |")
            print(f"| chart image, first draw / cached | {chart_first:.0f} ms |"
                  f" {percentile(chart_cached, 50):.0f} ms |")
            print(f"\nslowest p95 of any page: {worst:.0f} ms (target < 300 ms);"
                  f" a search page is {size / 1024:.0f} KB with {results} results")
            log_text = (work / "daemon.log").read_text(errors="replace")
            if re.search(re.escape(url.split("token=")[1]), log_text):
                print("WARNING: the viewer's token is in the daemon's log")
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
