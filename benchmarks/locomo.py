"""LoCoMo evidence recall through the real pipeline: transcripts -> ingest -> recovery -> recall.

    python -m benchmarks.locomo [--data ../shared/datasets/locomo10.json] [--scale 100000]

The data set is read where it lies (never copied). Each LoCoMo conversation
becomes one project (`/locomo/<sample_id>`); each of its sessions one Claude
transcript file, the first speaker as `user`, the second as `assistant`, each
turn's text prefixed with the speaker's name (the questions name people), a
shared photo as its caption, the session's date as the timestamps (turns 30 s
apart) and the LoCoMo `dia_id` in the message uuid. `ingest_once` and
`sync_now` (what `memoryd ingest --once` and `memoryd sync` run) store and save
them; every question of categories 1-4 is then asked through
`SQLiteMemoryBackend.recall`, as `memoryd recall --project` does (recall is a
pure read, so the modes cannot change each other's ranking).

Metrics, per category and overall (a result's provenance is its message uuids;
with chunked recall only the matched chunks' messages):
- recall@k: some result among the first k holds an evidence turn;
- nDCG@5: binary gain (a result holding an evidence turn), ideal = as many such
  results at the top as there are memories holding evidence (at most 5);
- ctx@1000: an evidence turn is in the results that fit in a 1,000-token
  context block (4 characters a token; each result's excerpt, else its content);
- 10 turns: an evidence turn is among the first 10 turns the results cover, in rank
  order (the figure peers publish: recall over 10 retrieved turns);
- p50/p95: wall time of one recall call, query embedding included.

Mode `cli` is the path users take, and the one the README reports: every
question goes through `memoryd recall --json --stdin --project P --limit 10`
(one process per conversation) with the default settings of this install, and
every question is asked twice in a row (two passes); the second pass must
score as the first (recall never feeds its own ranking). Its latency is the
process's wall time divided by its questions. The other modes call the backend
in-process with a fusion forced, to compare fusions; they are not what users get.

Modes: `none` keyword (FTS5 BM25 over chunks), `local` vectors alone (all-MiniLM-
L6-v2, under ONNX Runtime unless `--runtime numpy`), `hybrid` both, weighted
0.1 vector / 0.9 keyword (`--vector-weight`, the setting
`memory.embeddings.vector_weight`) and `hybrid-rrf` both by reciprocal rank fusion.
(Keyword recall over whole segments, `none-segments`, went with schema v7: the chunks
are the only full-text index.)
`--scale N` adds synthetic memories until the store holds N and measures again
(their vectors are sums of embedded template sentences, see `_synthetic`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from benchmarks._common import REPO, SHARED, isolate_this_process, machine, percentile, write_config
from memoryd.clock import SystemClock
from memoryd.config import load_settings
from memoryd.ingest.once import ingest_once
from memoryd.lifecycle.sync import sync_now
from memoryd.memory import MemoryType, RecallResult, SQLiteMemoryBackend
from memoryd.memory.embeddings.interface import Embedder
from memoryd.memory.embeddings.local import LocalEmbedder
from memoryd.memory.export_format import memory_to_record
from memoryd.memory.recall.fusion import VECTOR_WEIGHT

DATA = SHARED / "datasets" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
MODES = ("cli", "none", "local", "hybrid", "hybrid-rrf")
CONTEXT_TOKENS = 1000
COVERAGE_TURNS = 10


def _date(text: str) -> datetime:
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").astimezone()


def write_transcripts(data: list[dict[str, Any]], root: Path) -> dict[str, str]:
    """One Claude transcript per LoCoMo session; returns sample_id -> project path."""
    projects: dict[str, str] = {}
    for sample in data:
        sid = sample["sample_id"]
        project = f"/locomo/{sid}"
        projects[sid] = project
        conv = sample["conversation"]
        first = conv["speaker_a"]
        folder = root / f"-locomo-{sid}"
        folder.mkdir(parents=True, exist_ok=True)
        number = 1
        while f"session_{number}" in conv:
            turns = conv[f"session_{number}"]
            start = _date(conv[f"session_{number}_date_time"])
            lines = []
            for i, turn in enumerate(turns):
                role = "user" if turn["speaker"] == first else "assistant"
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                lines.append(json.dumps({
                    "type": role, "uuid": f"{sid}:{turn['dia_id']}",
                    "sessionId": f"{sid}-s{number}", "cwd": project,
                    "timestamp": (start + timedelta(seconds=30 * i)).isoformat(),
                    "message": {"role": role, "content": f"{turn['speaker']}: {text}"},
                }))
            (folder / f"{sid}-s{number}.jsonl").write_text("\n".join(lines) + "\n")
            number += 1
    return projects


@dataclass
class Scores:
    hits5: list[float] = field(default_factory=list)
    hits10: list[float] = field(default_factory=list)
    ndcg5: list[float] = field(default_factory=list)
    ctx: list[float] = field(default_factory=list)
    turns10: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)

    def row(self) -> dict[str, float]:
        def mean(v: list[float]) -> float:
            return statistics.fmean(v) if v else float("nan")
        return {"n": len(self.hits10), "recall@5": mean(self.hits5),
                "recall@10": mean(self.hits10), "ndcg@5": mean(self.ndcg5),
                "ctx@1000": mean(self.ctx), "turns@10": mean(self.turns10),
                "p50_ms": percentile(self.latency_ms, 50),
                "p95_ms": percentile(self.latency_ms, 95)}


@dataclass(frozen=True)
class Found:
    """What scoring needs of one result, from the backend or from `recall --json`."""

    message_uuids: tuple[str, ...]
    text: str

    @classmethod
    def of(cls, result: RecallResult) -> Found:
        return cls(result.provenance.message_uuids, result.excerpt or result.content)

    @classmethod
    def of_json(cls, record: dict[str, Any]) -> Found:
        return cls(tuple(record["provenance"]["message_uuids"]),
                   record.get("excerpt") or record["content"])


def score_question(results: list[Found], evidence: set[str], relevant: int,
                   into: Scores) -> None:
    flags = [not evidence.isdisjoint(r.message_uuids) for r in results]
    into.hits5.append(float(any(flags[:5])))
    into.hits10.append(float(any(flags[:10])))
    dcg = sum(1 / math.log2(i + 2) for i, f in enumerate(flags[:5]) if f)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(max(relevant, 1), 5)))
    into.ndcg5.append(dcg / ideal)
    budget, found = CONTEXT_TOKENS * 4, False
    for result, flag in zip(results, flags, strict=True):
        text = result.text
        if budget <= 0:
            break
        found = found or flag
        budget -= len(text)
    into.ctx.append(float(found))
    # Peers publish recall over the 10 best turns: the results' turns, in rank order, up
    # to COVERAGE_TURNS of them.
    turns: dict[str, None] = {}
    for result in results:
        for uuid in result.message_uuids:
            if len(turns) < COVERAGE_TURNS:
                turns.setdefault(uuid, None)
    into.turns10.append(float(not evidence.isdisjoint(turns)))


async def build(data: list[dict[str, Any]], work: Path, segment_max_chars: int) -> Path:
    """Transcripts ingested and synced through the daemon's own entry points; the memory db."""
    isolate_this_process(work / "xdg")
    root = work / "claude"
    write_transcripts(data, root)
    config = write_config(work / "config.yaml", work / "state", root,
                          segment_max_chars=segment_max_chars,
                          memory={"embeddings": {"provider": "none"}})
    settings = load_settings(config)
    clock = SystemClock()
    began = time.perf_counter()
    await ingest_once(settings, clock)
    report = await sync_now(settings, clock, None)
    print(f"ingest + sync: {time.perf_counter() - began:.1f} s, "
          f"{report.segments_saved if report else 0} segments", file=sys.stderr)
    return settings.memory_path


def default_config(work: Path) -> Path:
    """A config that changes nothing but where memoryd keeps its state: what users get."""
    return write_config(work / "default.yaml", work / "state", work / "claude")


async def embed_with_defaults(path: Path, config: Path) -> str:
    """Vectors for every chunk with the embedder the default settings pick, as the daemon's
    background job would have made them by now; the embedder's name ('none' without one)."""
    from memoryd.memory.embeddings import EmbeddingError, make_embedder

    try:
        settings = load_settings(config)
        embedder = make_embedder(settings.memory.embeddings, settings.models_path)
    except EmbeddingError:
        embedder = None
    if embedder is None:
        return "none"
    await embed_all(path, embedder)
    return embedder.name


async def embed_all(path: Path, embedder: Embedder) -> float:
    backend = await SQLiteMemoryBackend.open(path, clock=SystemClock(), embedder=embedder)
    began, total = time.perf_counter(), 0
    try:
        while (done := await backend.embed_pending(limit=512)):
            total += done
    finally:
        await backend.close()
    seconds = time.perf_counter() - began
    print(f"embedded {total} chunks in {seconds:.1f} s", file=sys.stderr)
    return total / seconds if seconds and total else float("nan")


async def relevant_memories(path: Path, project: str, evidence: set[str]) -> int:
    """How many memories of the project hold an evidence turn (the ideal for nDCG)."""
    import aiosqlite

    async with aiosqlite.connect(path) as conn:
        marks = ",".join("?" for _ in evidence)
        # Only the question's project can hold its evidence; scanning just it keeps the
        # 100,000-memory run from reading every memory's uuids for every question.
        sql = ("SELECT COUNT(DISTINCT m.seq) FROM memories m, json_each(m.message_uuids) j"
               " WHERE m.project = ? AND m.deleted_at IS NULL AND m.superseded_by IS NULL"
               f" AND j.value IN ({marks})")
        async with conn.execute(sql, (project, *evidence)) as cur:
            row = await cur.fetchone()
    return int(row[0]) if row else 0


async def evaluate(path: Path, data: list[dict[str, Any]], projects: dict[str, str],
                   mode: str, embedder: Embedder | None,
                   vector_weight: float) -> dict[str, dict[str, float]]:
    opts: dict[str, Any] = {}
    if mode in ("local", "hybrid", "hybrid-rrf", "hybrid-relative"):
        fusion = {"local": "vector", "hybrid": "weighted", "hybrid-rrf": "rrf",
                  "hybrid-relative": "relative"}[mode]
        opts = {"embedder": embedder, "fusion": fusion, "vector_weight": vector_weight}
    backend = await SQLiteMemoryBackend.open(path, clock=SystemClock(), **opts)
    per: dict[str, Scores] = defaultdict(Scores)
    ideal: dict[frozenset[str], int] = {}
    try:
        if embedder is not None and mode != "none":
            await backend.recall("warm up", project="/nowhere")
        for sample in data:
            project = projects[sample["sample_id"]]
            for qa in sample["qa"]:
                if qa["category"] not in CATEGORIES:
                    continue
                evidence = {f"{sample['sample_id']}:{e.strip()}" for e in qa["evidence"]}
                key = frozenset(evidence)
                if key not in ideal:
                    ideal[key] = await relevant_memories(path, project, evidence)
                began = time.perf_counter()
                results = await backend.recall(qa["question"], project=project, limit=10)
                elapsed = (time.perf_counter() - began) * 1000
                for name in ("all", CATEGORIES[qa["category"]]):
                    score_question([Found.of(r) for r in results], evidence, ideal[key],
                                   per[name])
                    per[name].latency_ms.append(elapsed)
    finally:
        await backend.close()
    return {name: scores.row() for name, scores in per.items()}


async def evaluate_cli(path: Path, config: Path, data: list[dict[str, Any]],
                       projects: dict[str, str], passes: int = 2,
                       ) -> list[dict[str, dict[str, float]]]:
    """Every question through `memoryd recall --json --stdin`, default settings, `passes` times."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ideal: dict[frozenset[str], int] = {}
    rows = []
    for _ in range(passes):
        per: dict[str, Scores] = defaultdict(Scores)
        for sample in data:
            project = projects[sample["sample_id"]]
            asked = [qa for qa in sample["qa"] if qa["category"] in CATEGORIES]
            began = time.perf_counter()
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "memoryd", "--config", str(config), "recall", "--json",
                 "--stdin", "--project", project, "--limit", "10"],
                input="".join(" ".join(qa["question"].split()) + "\n" for qa in asked),
                capture_output=True, text=True, env=env, check=True)
            each_ms = (time.perf_counter() - began) * 1000 / max(len(asked), 1)
            answers = done.stdout.split("\n")[:-1]
            assert len(answers) == len(asked), done.stderr[-2000:]
            for qa, line in zip(asked, answers, strict=True):
                evidence = {f"{sample['sample_id']}:{e.strip()}" for e in qa["evidence"]}
                key = frozenset(evidence)
                if key not in ideal:
                    ideal[key] = await relevant_memories(path, project, evidence)
                found = [Found.of_json(r) for r in json.loads(line)]
                for name in ("all", CATEGORIES[qa["category"]]):
                    score_question(found, evidence, ideal[key], per[name])
                    per[name].latency_ms.append(each_ms)
        rows.append({name: scores.row() for name, scores in per.items()})
    return rows


_SUBJECTS = ["the build", "the parser", "the cache", "the deploy script", "the API client",
             "the test suite", "the migration", "the scheduler", "the login page", "the CLI",
             "the config loader", "the websocket handler", "the retry logic", "the logger"]
_VERBS = ["fails on", "times out during", "needs a fix for", "was refactored around",
          "now handles", "crashes with", "was rewritten to avoid", "should log", "skips"]
_OBJECTS = ["empty input", "unicode paths", "a missing token", "large files", "a 503 answer",
            "daylight saving time", "concurrent writes", "a stale lock", "null bytes",
            "the Windows line endings", "an expired certificate", "a full disk"]


def pool_size() -> int:
    """How many distinct template sentences synthetic memories are made of."""
    return len(_SUBJECTS) * len(_VERBS) * len(_OBJECTS)


def _synthetic(rng: random.Random) -> tuple[str, list[int]]:
    picks = [rng.randrange(pool_size()) for _ in range(3)]
    return " ".join(_sentence(p) for p in picks), picks


def _sentence(p: int) -> str:
    o, rest = p % len(_OBJECTS), p // len(_OBJECTS)
    v, s = rest % len(_VERBS), rest // len(_VERBS)
    return f"user: {_SUBJECTS[s]} {_VERBS[v]} {_OBJECTS[o]}."


async def add_synthetic(path: Path, total: int, projects: list[str],
                        embedder: Embedder | None) -> int:
    """Fill the store up to `total` memories, spread over the LoCoMo projects and others.

    Embedding 100,000 texts with the model would take over half an hour here, so
    each synthetic memory is three template sentences and its vector the
    normalised sum of those sentences' real embeddings.
    """
    import aiosqlite

    from memoryd.memory import Memory, Provenance, new_memory_id

    async with aiosqlite.connect(path) as conn, conn.execute(
            "SELECT COUNT(*) FROM memories") as cur:
        row = await cur.fetchone()
    have = int(row[0]) if row else 0
    wanted = max(0, total - have)
    rng = random.Random(5)
    owners = projects + [f"/synthetic/p{i}" for i in range(40)]
    now = datetime.now().astimezone()
    records, picks_of = [], []
    for _ in range(wanted):
        text, picks = _synthetic(rng)
        project = rng.choice(owners)
        memory = Memory(id=new_memory_id(), content=text, type=MemoryType.FACT,
                        importance=0.5, project=project, tags=(),
                        provenance=Provenance(project=project), created_at=now, updated_at=now)
        records.append(memory_to_record(memory))
        picks_of.append(picks)
    backend = await SQLiteMemoryBackend.open(path, clock=SystemClock())
    try:
        await backend.import_records(records)
    finally:
        await backend.close()
    if embedder is not None and wanted:
        base = embedder.embed([_sentence(p) for p in range(pool_size())])
        ids = [r["id"] for r in records]
        async with aiosqlite.connect(path) as conn:
            rows = []
            for start in range(0, len(ids), 900):
                part = ids[start:start + 900]
                marks = ",".join("?" for _ in part)
                async with conn.execute(
                    f"SELECT m.id, c.seq FROM memories m JOIN memory_chunks c"
                    f" ON c.memory_seq = m.seq WHERE m.id IN ({marks})", part) as cur:
                    rows.extend(await cur.fetchall())
            where = {memory_id: seq for memory_id, seq in rows}
            vectors = []
            for memory_id, picks in zip(ids, picks_of, strict=True):
                v = base[picks].sum(axis=0)
                v /= np.linalg.norm(v)
                vectors.append((where[memory_id], embedder.name, v.astype(np.float32).tobytes()))
            await conn.executemany(
                "INSERT OR REPLACE INTO chunk_vectors (chunk_seq, model, vector) VALUES (?,?,?)",
                vectors)
            await conn.commit()
    return have + wanted


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = ["| mode | category | n | recall@5 | recall@10 | nDCG@5 | ctx@1000 | 10 turns"
             " | p50 ms | p95 ms |", "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, per in results.items():
        for name in ["all", *CATEGORIES.values()]:
            if name not in per:
                continue
            r = per[name]
            lines.append(f"| {mode} | {name} | {r['n']:.0f} | {r['recall@5']:.3f} | "
                         f"{r['recall@10']:.3f} | {r['ndcg@5']:.3f} | {r['ctx@1000']:.3f} | "
                         f"{r['turns@10']:.3f} | "
                         f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace, data: list[dict[str, Any]]) -> str:
    if args.limit:
        data = data[:args.limit]
    modes = [m for m in args.modes.split(",") if m]
    embedder: Embedder | None = None
    local_model: LocalEmbedder | None = None
    if any(m in ("local", "hybrid", "hybrid-rrf") for m in modes):
        began = time.perf_counter()
        local_model = LocalEmbedder.load(args.runtime)
        print(f"local model loaded in {time.perf_counter() - began:.2f} s "
              f"({local_model.runtime})", file=sys.stderr)
        embedder = local_model
    with tempfile.TemporaryDirectory(prefix="memoryd-locomo-") as tmp:
        work = Path(args.workdir) if args.workdir else Path(tmp)
        projects = {s["sample_id"]: f"/locomo/{s['sample_id']}" for s in data}
        existing = work / "state" / "memory.db"
        if args.workdir and existing.exists():
            path = existing  # built by an earlier run with --workdir: reuse it
        else:
            path = await build(data, work, args.segment_max_chars)
        rate = await embed_all(path, embedder) if embedder is not None else float("nan")
        weight = args.vector_weight
        results: dict[str, dict[str, dict[str, float]]] = {}
        if "cli" in modes:
            default = default_config(work)
            default_embedder = await embed_with_defaults(path, default)
            for number, row in enumerate(
                    await evaluate_cli(path, default, data, projects), 1):
                results[f"cli ({default_embedder}), pass {number}"] = row
            if args.distill:
                with distilling(args.distill, work, default) as config:
                    await asyncio.to_thread(distill_all, config)
                    await embed_with_defaults(path, default)
                    for number, row in enumerate(
                            await evaluate_cli(path, default, data, projects), 1):
                        results[f"cli + distilled ({args.distill}), pass {number}"] = row
        results.update({m: await evaluate(path, data, projects, m, embedder, weight)
                        for m in modes if m != "cli"})
        runtime = local_model.runtime if embedder is not None else "-"
        out = [f"machine: {machine()}", f"segment_max_chars: {args.segment_max_chars}",
               f"local runtime: {runtime}", f"vector weight: {args.vector_weight}",
               f"embedding rate during build: {rate:.1f} chunks/s", "", table(results)]
        if args.scale:
            count = await add_synthetic(path, args.scale, list(projects.values()), embedder)
            scaled = {f"{m} @{count}": await evaluate(path, data, projects, m, embedder, weight)
                      for m in modes}
            out += ["", f"scale: {count} memories", "", table(scaled)]
    return "\n".join(out)


@contextlib.contextmanager
def distilling(how: str, work: Path, default: Path) -> Iterator[Path]:
    """The default config with `memory.llm` from the YAML file `how`, or `local`: the
    plumbing's model server on 127.0.0.1 (`benchmarks.distill`: one fact per message of
    the person), to try the path without a model."""
    import yaml

    settings = yaml.safe_load(default.read_text())
    if how == "local":
        from benchmarks.distill import local_model

        with local_model() as url:
            settings.setdefault("memory", {})["llm"] = {
                "provider": "openai", "base_url": url, "model": "plumbing",
                "per_minute": 600, "daily_tokens": 100_000_000}
            config = work / "distill.yaml"
            config.write_text(yaml.safe_dump(settings))
            yield config
        return
    settings.setdefault("memory", {})["llm"] = yaml.safe_load(Path(how).read_text())
    config = work / "distill.yaml"
    config.write_text(yaml.safe_dump(settings))
    yield config


def distill_all(config: Path) -> None:
    """`memoryd distill` over every session, as a user runs it (no daemon: the command
    sends them itself, at the config's rate)."""
    import os
    import subprocess

    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "--config", str(config), "distill", "--since",
         "100 years ago"], env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, check=True)
    print(f"distilled in {time.perf_counter() - began:.1f} s: "
          + " ".join(done.stdout.split()[-12:]), file=sys.stderr)


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--segment-max-chars", type=int, default=6000)
    parser.add_argument("--scale", type=int, default=0, help="fill up to N memories and rerun")
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--out", help="also write the report to this file")
    parser.add_argument("--workdir", help="build here, or reuse what an earlier run built here")
    parser.add_argument("--runtime", choices=["auto", "onnx", "numpy"], default="auto",
                        help="how the local model runs (auto: ONNX Runtime when installed)")
    parser.add_argument("--vector-weight", type=float, default=VECTOR_WEIGHT,
                        help="the vector share of hybrid's fused score (default %(default)s)")
    parser.add_argument("--distill", metavar="LLM_YAML|local",
                        help="then distil every session (`memoryd distill`) with the model"
                             " whose `memory.llm` settings the YAML file holds (`local`: the"
                             " plumbing's server on 127.0.0.1) and ask again (needs cli)")
    args = parser.parse_args()
    if not 0.0 <= args.vector_weight <= 1.0:
        parser.error("--vector-weight must be within 0..1")
    report = asyncio.run(main_async(args, json.loads(Path(args.data).read_text())))
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")


if __name__ == "__main__":
    main()
