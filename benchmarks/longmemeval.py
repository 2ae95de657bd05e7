"""LongMemEval (dev split) session recall through the path users take.

    python -m benchmarks.longmemeval [--data ../shared/datasets/longmemeval-dev/...] [--workdir DIR]

Each question is its own haystack, so its own project (`/lme/<question_id>`);
each haystack session one Claude transcript whose messages carry
`lme:<session_id>:<turn>` as uuid and the session's date as timestamps. The
daemon's own entry points (`ingest --once`, `sync`) store and save them with
the default settings; every question is then asked through `memoryd recall
--json --stdin --project P --limit 10`, twice in a row (two passes: the second
must score as the first). A question counts at k when a result among the first k
comes from one of its answer sessions (LongMemEval's recall_any@k); abstention
questions (`*_abs`) have none and are scored apart by `benchmarks.injection`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from benchmarks._common import REPO, SHARED, isolate_this_process, machine, write_config

DATA = SHARED / "datasets" / "longmemeval-dev" / "longmemeval-dev.jsonl.gz"


def load(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def project_of(question: dict[str, Any]) -> str:
    return f"/lme/{question['question_id']}"


def _when(text: str) -> datetime:
    return datetime.strptime(text.split(" (")[0] + " " + text.split(") ")[-1],
                             "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def write_transcripts(data: list[dict[str, Any]], root: Path) -> None:
    for question in data:
        folder = root / ("-lme-" + question["question_id"])
        folder.mkdir(parents=True, exist_ok=True)
        for sid, date, turns in zip(question["haystack_session_ids"],
                                    question["haystack_dates"],
                                    question["haystack_sessions"], strict=True):
            start = _when(date)
            external = f"{question['question_id']}-{sid}"
            lines = []
            for i, turn in enumerate(turns):
                role = "user" if turn["role"] == "user" else "assistant"
                stamp = (start + timedelta(seconds=30 * i)).isoformat().replace("+00:00", "Z")
                content: Any = turn["content"] if role == "user" else [
                    {"type": "text", "text": turn["content"]}]
                lines.append(json.dumps({
                    "type": role, "uuid": f"lme:{sid}:{i}", "sessionId": external,
                    "cwd": project_of(question), "timestamp": stamp,
                    "message": {"role": role, "content": content}}))
            (folder / f"{external}.jsonl").write_text("\n".join(lines) + "\n")


async def build(data: list[dict[str, Any]], work: Path, keyword_only: bool = False) -> Path:
    """Transcripts stored and saved by the daemon's own entry points; the default config."""
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.ingest.once import ingest_once
    from memoryd.lifecycle.sync import sync_now

    isolate_this_process(work / "xdg")
    root = work / "claude"
    extra: dict[str, Any] = (
        {"memory": {"embeddings": {"fetch_model": False}}} if keyword_only else {})
    config = write_config(work / "default.yaml", work / "state", root, **extra)
    if (work / "state" / "memory.db").exists():
        return config
    write_transcripts(data, root)
    settings = load_settings(config)
    began = time.perf_counter()
    await ingest_once(settings, SystemClock())
    report = await sync_now(settings, SystemClock(), None)
    print(f"ingest + sync: {time.perf_counter() - began:.1f} s,"
          f" {report.segments_saved if report else 0} segments", file=sys.stderr)
    from benchmarks.locomo import embed_with_defaults

    await embed_with_defaults(settings.memory_path, config)
    return config


def recall_cli(config: Path, project: str, queries: list[str], limit: int = 10,
               as_of: datetime | None = None) -> tuple[list[list[dict[str, Any]]], float]:
    """`memoryd recall --json --stdin` for these queries; results and ms per query.

    `as_of`: when the questions are asked (their time words, "a week ago", are read as
    said then: LongMemEval's questions carry their own date)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    began = time.perf_counter()
    asked = ["--as-of", as_of.isoformat()] if as_of is not None else []
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "--config", str(config), "recall", "--json", "--stdin",
         "--project", project, "--limit", str(limit), *asked],
        input="".join(" ".join(q.split()) + "\n" for q in queries), capture_output=True,
        text=True, env=env, check=True)
    each = (time.perf_counter() - began) * 1000 / max(len(queries), 1)
    return [json.loads(line) for line in done.stdout.split("\n")[:-1]], each


def sessions_of(result: dict[str, Any]) -> set[str]:
    """The haystack sessions a result comes from: its messages', or the session it names
    (a digest covers its whole session and lists no message)."""
    found = {uuid.split(":")[1] for uuid in result["provenance"]["message_uuids"]
             if uuid.startswith("lme:")}
    named = result["provenance"].get("session_external_id") or ""
    question = (result.get("project") or "").removeprefix("/lme/")
    if question and named.startswith(question + "-"):
        found.add(named[len(question) + 1:])
    return found


def evaluate(config: Path, data: list[dict[str, Any]], passes: int = 2) -> list[dict[str, Any]]:
    rows = []
    for _ in range(passes):
        hits: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        share: list[float] = []
        latency: list[float] = []
        for question in data:
            if question["question_id"].endswith("_abs"):
                continue
            [results], each = recall_cli(config, project_of(question), [question["question"]],
                                         as_of=_when(question["question_date"]))
            latency.append(each)
            wanted = set(question["answer_session_ids"])
            for k in (1, 5, 10):
                found = set().union(*(sessions_of(r) for r in results[:k])) if results else set()
                hit = float(bool(found & wanted))
                hits["all"][k].append(hit)
                hits[question["question_type"]][k].append(hit)
            top10 = set().union(*(sessions_of(r) for r in results[:10])) if results else set()
            share.append(len(top10 & wanted) / len(wanted))
        rows.append({"hits": {t: {k: statistics.fmean(v) for k, v in ks.items()}
                              for t, ks in hits.items()},
                     "n": {t: len(ks[5]) for t, ks in hits.items()},
                     "answer_sessions_found@10": statistics.fmean(share),
                     "ms_per_query": statistics.median(latency)})
    return rows


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["| pass | type | n | recall_any@1 | @5 | @10 |", "|---|---|---|---|---|---|"]
    for number, row in enumerate(rows, 1):
        for kind in ["all", *sorted(t for t in row["hits"] if t != "all")]:
            h = row["hits"][kind]
            lines.append(f"| {number} | {kind} | {row['n'][kind]} | {h[1]:.3f} | {h[5]:.3f} |"
                         f" {h[10]:.3f} |")
        lines.append(f"| {number} | answer sessions found in the top 10 |  |"
                     f" {row['answer_sessions_found@10']:.3f} |  |  |")
        lines.append(f"| {number} | process ms per question (one query a process) |  |"
                     f" {row['ms_per_query']:.0f} |  |  |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keyword-only", action="store_true",
                        help="no embedding model: keyword recall (minutes, not half an hour)")
    parser.add_argument("--distill", metavar="LLM_YAML|local",
                        help="then distil every session (`memoryd distill`) with the model"
                             " whose `memory.llm` settings the YAML file holds (`local`: the"
                             " plumbing's server on 127.0.0.1) and ask again")
    args = parser.parse_args(argv)
    data = load(args.data)
    with tempfile.TemporaryDirectory(prefix="memoryd-lme-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        config = asyncio.run(build(data, work, args.keyword_only))
        print(f"machine: {machine()}")
        print(report(evaluate(config, data)))
        if args.distill:
            from benchmarks.locomo import distill_all, distilling

            with distilling(args.distill, work, config) as distill_config:
                distill_all(distill_config)
            if not args.keyword_only:  # the observations' vectors, as the daemon makes them
                from benchmarks.locomo import embed_with_defaults

                asyncio.run(embed_with_defaults(work / "state" / "memory.db", config))
            print(f"after `memoryd distill` ({args.distill}):")
            print(report(evaluate(config, data)))


if __name__ == "__main__":
    main()
