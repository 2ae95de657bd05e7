"""Hook latency as agents see it: whole `memoryd hook` processes, daemon up and down.

    python -m benchmarks.hooks [--memories 100000] [--prompts 200] [--workdir DIR]
    python -m benchmarks.hooks --earlier 20 [--llm-down]   # the same with a model down

Fills a memory store with N memories (three template sentences each, spread
over 50 projects; with the `local` embedder, their vectors too, as
`benchmarks.locomo --scale` makes them), starts `memoryd run` on it with the
default settings, then times `memoryd hook UserPromptSubmit` processes fed
Claude Code's payload: prompts that match memories and prompts that do not,
each session asking twice. Then it stops the daemon and times the direct
fallback. Every hook figure is a whole process, start-up included, as the agent
pays it. Targets (issue 13): daemon up p50 <= 60 ms, p95 <= 150 ms; down p95 <= 1 s.
It also times recall through the daemon's API (`POST /v1/recall`) on the same
store, as a client sees it (issue 14: p50 <= 20 ms, p95 <= 50 ms at 100,000).

`--earlier N` adds N finished transcripts the daemon saves at start-up; `--llm-down`
also turns distillation on with a model that never answers (a port on 127.0.0.1), so
its queue is full and its worker waiting while the hooks are timed: compare the two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    add_model_down_options,
    distillation_report,
    earlier_of,
    earlier_sessions,
    isolate_this_process,
    isolated_env,
    machine,
    median,
    model_down,
    percentile,
    write_config,
)

PROJECT = "/synthetic/p0"
PROMPTS = [
    "why does the build fail on empty input?",
    "the scheduler times out during concurrent writes again",
    "what did we decide about the retry logic and a 503 answer",
    "can you add a dark mode toggle to the settings screen",
    "rename the variable foo to bar in main.py",
    "the login page crashes with an expired certificate",
    "write a haiku about autumn",
    "how should the logger handle unicode paths",
]


RUN = f"{os.getpid()}-{int(time.time())}"


def _hook_command() -> list[str]:
    return [sys.executable, "-m", "memoryd", "hook", "--agent", "claude"]


def time_hooks(env: dict[str, str], socket: Path | None, prompts: int, seed: int,
               ) -> tuple[list[float], int]:
    """Milliseconds per hook process, and how many printed a block."""
    rng = random.Random(seed)
    args = _hook_command() + (["--socket", str(socket)] if socket else [])
    timings, injected = [], 0
    for i in range(prompts):
        prompt = rng.choice(PROMPTS)
        # Fresh sessions every run: a session is never given the same memory twice.
        payload = json.dumps({"session_id": f"bench-{RUN}-{seed}-{i // 2}", "cwd": PROJECT,
                              "transcript_path": "/nonexistent/t.jsonl",
                              "hook_event_name": "UserPromptSubmit",
                              "permission_mode": "default", "prompt": prompt}).encode()
        began = time.perf_counter()
        done = subprocess.run([*args, "UserPromptSubmit"], input=payload, env=env,
                              capture_output=True, check=False)
        timings.append((time.perf_counter() - began) * 1000)
        injected += bool(done.stdout)
    return timings, injected


def time_api_recall(socket: Path, queries: int, seed: int) -> list[float]:
    """Milliseconds per recall through the daemon's API (the client's time, one connection)."""
    import httpx

    rng = random.Random(seed)
    timings = []
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)),
                      base_url="http://memoryd", timeout=60) as client:
        for _ in range(queries):
            body = {"query": rng.choice(PROMPTS), "project": PROJECT, "limit": 10}
            began = time.perf_counter()
            client.post("/v1/recall", json=body).raise_for_status()
            timings.append((time.perf_counter() - began) * 1000)
    return timings


async def fill(state: Path, total: int) -> int:
    from benchmarks.locomo import add_synthetic
    from memoryd.config import load_settings
    from memoryd.memory.embeddings import EmbeddingError, make_embedder

    settings = load_settings(state.parent / "config.yaml")
    try:
        embedder = make_embedder(settings.memory.embeddings, settings.models_path)
    except EmbeddingError:
        embedder = None
    from memoryd.clock import SystemClock
    from memoryd.memory.opening import open_memory_backend

    await (await open_memory_backend(settings, SystemClock())).close()  # creates the schema
    projects = [f"/synthetic/p{i}" for i in range(10)]
    return await add_synthetic(state / "memory.db", total, projects, embedder)


def run(work: Path, memories: int, prompts: int, earlier: int = 0,
        model: dict[str, Any] | None = None) -> str:
    env = isolated_env(work / "xdg")
    isolate_this_process(work / "xdg")
    config = write_config(work / "config.yaml", work / "state", work / "claude", **(model or {}))
    (work / "claude").mkdir(exist_ok=True)
    earlier_sessions(work / "claude", earlier)
    env["MEMORYD_CONFIG"] = str(config)
    began = time.perf_counter()
    (work / "state").mkdir(mode=0o700, parents=True, exist_ok=True)
    count = asyncio.run(fill(work / "state", memories))
    lines = [f"machine: {machine()}", f"store: {count} memories"
             f" (filled in {time.perf_counter() - began:.0f} s)"]
    log = (work / "daemon.log").open("ab")
    daemon = subprocess.Popen([sys.executable, "-m", "memoryd", "--config", str(config), "run"],
                              env=env, stdout=subprocess.DEVNULL, stderr=log)
    socket = work / "state" / "memoryd.sock"
    try:
        deadline = time.monotonic() + 120
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time_hooks(env, socket, 5, seed=0)  # the daemon opens its stores on first use
        for attempt in (1, 2):
            timings = time_api_recall(socket, prompts, seed=20 + attempt)
            lines.append(f"API recall (POST /v1/recall, limit 10), pass {attempt}:"
                         f" {len(timings)} queries, p50 {median(timings):.1f} ms, p95"
                         f" {percentile(timings, 95):.1f} ms")
        for attempt in (1, 2):
            timings, injected = time_hooks(env, socket, prompts, seed=attempt)
            lines.append(f"daemon up, pass {attempt}: {len(timings)} hooks, p50"
                         f" {median(timings):.1f} ms, p95 {percentile(timings, 95):.1f} ms,"
                         f" max {max(timings):.1f} ms; {injected} injected a block")
        if model:
            lines.append(distillation_report(work / "state" / "memoryd.db"))
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        log.close()
    for attempt in (1, 2):
        timings, injected = time_hooks(env, None, max(10, prompts // 10), seed=10 + attempt)
        lines.append(f"daemon down, pass {attempt}: {len(timings)} hooks, p50"
                     f" {median(timings):.1f} ms, p95 {percentile(timings, 95):.1f} ms,"
                     f" max {max(timings):.1f} ms; {injected} injected a block")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=None)
    add_model_down_options(parser)
    args = parser.parse_args(argv)
    args.earlier = earlier_of(args)
    with model_down(args.llm_down) as model:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
            print(run(args.workdir, args.memories, args.prompts, args.earlier, model))
            return
        with tempfile.TemporaryDirectory(prefix="memoryd-hooks-") as work:
            print(run(Path(work), args.memories, args.prompts, args.earlier, model))


if __name__ == "__main__":
    main()
