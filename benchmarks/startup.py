"""Commands as whole processes: status, sessions, recall, context, remember.

    python -m benchmarks.startup                     # empty store, then 100,000 memories
    python -m benchmarks.startup --memories 10000 --runs 10
    python -m benchmarks.startup --scale             # 1,000,000 messages, 200,000 memories

Each command is started `--runs` times as its own process, the way people and
scripts run it (the `memoryd` executable beside this Python, else `python -m memoryd`),
and its wall time from start to exit is taken; p50 and p95 are printed (target:
p50 under 150 ms on an empty store, under 250 ms with 100,000 memories, with the
daemon running). The same commands are timed without a daemon too (the full
command line opens the stores itself). `--scale` times `status`, `sessions`, `recall`
and `context` on a store of 1,000 sessions, 1,000,000 messages (built as
`benchmarks.recovery` builds it) and 200,000 memories (target: under 300 ms), and
prints the database's size per million messages. Settings are the defaults but
`memory.embeddings.fetch_model: false` (no model download in a benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import machine, percentile, workspace

COMMANDS: list[tuple[str, list[str]]] = [
    ("status", ["status"]),
    ("sessions", ["sessions"]),
    ("recall", ["recall", "QUERY"]),
    ("context", ["context", "--query", "QUERY"]),
    ("remember", ["remember", "the benchmark remembers a fact"]),
]


def executable() -> list[str]:
    beside = Path(sys.executable).with_name("memoryd")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "memoryd"]


def _query() -> str:
    """Two content words of a synthetic memory (`benchmarks.backends.fill`): a query that
    finds some memories, as people ask (not "user", which every synthetic turn holds)."""
    import random

    from benchmarks.locomo import _synthetic

    words = [w.strip(".,:") for w in _synthetic(random.Random(11))[0].split()
             if len(w) > 4 and w.strip(".,:").lower() not in ("user", "assistant")]
    return " ".join(words[:2])


def time_commands(config: Path, env: dict[str, str], runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    query = _query()
    for name, template in COMMANDS:
        args = [query if a == "QUERY" else a for a in template]
        samples = []
        for _ in range(runs):
            began = time.perf_counter()
            done = subprocess.run([*executable(), "--config", str(config), *args], env=env,
                                  capture_output=True, timeout=120)
            samples.append((time.perf_counter() - began) * 1000)
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {done.stderr.decode()[-400:]}")
        out[name] = samples
    return out


def wait_for_socket(socket: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not socket.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the daemon did not start")
        time.sleep(0.05)


def measure(label: str, config: Path, env: dict[str, str], socket: Path, runs: int,
            work: Path) -> list[str]:
    rows = []
    without = time_commands(config, env, runs)
    with (work / f"daemon-{label}.log").open("wb") as log:
        proc = subprocess.Popen([*executable(), "--config", str(config), "run"], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_socket(socket, proc)
        time_commands(config, env, 1)  # warm the page cache and the daemon's stores
        passes = [time_commands(config, env, runs) for _ in range(2)]
    finally:
        proc.terminate()
        proc.wait(30)
    for name, _args in COMMANDS:
        cells = [f"{percentile(p[name], 50):.0f} / {percentile(p[name], 95):.0f} ms"
                 for p in passes]
        rows.append(f"| {label} | {name} | {cells[0]} | {cells[1]} |"
                    f" {percentile(without[name], 50):.0f} ms |")
    return rows


def at_scale(config: Path, env: dict[str, str], socket: Path, runs: int,
             work: Path) -> list[str]:
    from benchmarks.backends import fill
    from benchmarks.recovery import build_state
    from memoryd.config import load_settings

    settings = load_settings(config)
    began = time.perf_counter()
    build_state(settings, 1000, 1_000_000, 7)
    import sqlite3

    with sqlite3.connect(settings.database_path) as db:
        db.execute("UPDATE sessions SET memory_sync_index = message_count")
    asyncio.run(fill(config, 200_000, None))
    print(f"built 1,000 sessions, 1,000,000 messages, 200,000 memories in"
          f" {time.perf_counter() - began:.0f} s")
    state_bytes = sum(p.stat().st_size for p in settings.database_path.parent.glob(
        settings.database_path.name + "*"))
    memory_bytes = sum(p.stat().st_size for p in settings.memory_path.parent.glob(
        settings.memory_path.name + "*"))
    with (work / "daemon-scale.log").open("wb") as log:
        proc = subprocess.Popen([*executable(), "--config", str(config), "run"], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_socket(socket, proc)
        rows = ["| command | pass 1 p50 / p95 | pass 2 p50 / p95 |", "|---|---|---|"]
        query = _query()
        for name, template in COMMANDS[:4]:
            args = [query if a == "QUERY" else a for a in template]
            passes = []
            for _ in range(2):
                samples = []
                for _ in range(runs):
                    t = time.perf_counter()
                    subprocess.run([*executable(), "--config", str(config), *args], env=env,
                                   capture_output=True, timeout=120, check=True)
                    samples.append((time.perf_counter() - t) * 1000)
                passes.append(samples)
            rows.append(f"| {name} | " + " | ".join(
                f"{percentile(p, 50):.0f} / {percentile(p, 95):.0f} ms" for p in passes) + " |")
    finally:
        proc.terminate()
        proc.wait(30)
    rows.append(f"\ndaemon's database: {state_bytes / 1e6:,.0f} MB for 1,000,000 messages"
                f" ({state_bytes / 1e6:,.0f} MB per million messages, raw lines abbreviated as"
                f" benchmarks.recovery builds them); memory database: {memory_bytes / 1e6:,.0f}"
                " MB for 200,000 memories")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--scale", action="store_true",
                        help="status, sessions, recall and context at 1,000,000 messages,"
                             " 200,000 memories")
    args = parser.parse_args(argv)
    from benchmarks.backends import fill
    from memoryd.config import load_settings

    with workspace("startup", keep=args.keep) as (work, config, env):
        socket = load_settings(config).socket_path
        print(machine())
        print(f"executable: {' '.join(executable())}")
        if args.scale:
            print("\n".join(at_scale(config, env, socket, args.runs, work)))
            return 0
        rows = ["| store | command | daemon running, pass 1 p50 / p95 | pass 2 p50 / p95 |"
                " no daemon, p50 |", "|---|---|---|---|---|"]
        rows += measure("empty", config, env, socket, args.runs, work)
        began = time.perf_counter()
        asyncio.run(fill(config, args.memories, None))
        print(f"filled {args.memories:,} memories in {time.perf_counter() - began:.0f} s")
        rows += measure(f"{args.memories:,} memories", config, env, socket, args.runs, work)
        print("\n".join(rows))
    return 0

if __name__ == "__main__":
    sys.exit(main())
