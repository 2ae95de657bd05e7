"""Recall of things said in other words, through the path users take.

    python -m benchmarks.paraphrase [--workdir DIR]     # DIR: a benchmarks.locomo --workdir

LoCoMo ships, beside its questions, an `observation` list per session: facts
about each speaker in a third person's words, each with the dialogue turn(s)
it comes from ("Caroline attended an LGBTQ support group recently and found
the transgender stories inspiring." <- D1:3). Asked as queries against the
LoCoMo store, they test recall of a memory worded differently from the query.
Three sets of 2,541 / 2,541 / 1,518 queries:

- `observation`: the observation as written (names and most content words
  are shared with the turn: mostly a keyword task);
- `no-names`: the speakers' names removed (who said it is no longer a clue);
- `reworded`: every word whose first five letters also begin a word of the
  evidence turn removed as well, keeping queries with at least 3 content
  words left: what is left shares no word with the memory (a harsh, synthetic
  proxy for paraphrase: the words left are often fragments).

Every query goes through `memoryd recall --json --stdin --project P --limit 10`
with the default settings of this install (one process per conversation),
twice; a query counts at k when a result among the first k holds an evidence
turn. Not a replacement for a real paraphrase data set (none could be installed
here); see benchmarks/README.md for what it can and cannot say.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import structlog

from benchmarks._common import REPO, machine
from benchmarks.locomo import DATA, build, default_config, embed_with_defaults
from memoryd.memory.recall.gate import content_words

SETS = ("observation", "no-names", "reworded")


def queries(data: list[dict[str, Any]]) -> list[tuple[str, str, str, set[str]]]:
    """(set, project, query, evidence uuids) for every observation of every sample."""
    out = []
    for sample in data:
        sid, conv = sample["sample_id"], sample["conversation"]
        names = [conv["speaker_a"], conv["speaker_b"]]
        turns = {f"{sid}:{t['dia_id']}": t["text"] for key, value in conv.items()
                 if key.startswith("session_") and isinstance(value, list) for t in value}
        for session in sample["observation"].values():
            for items in session.values():
                for text, ev in items:
                    refs = ev if isinstance(ev, list) else re.split(r"[;,]\s*", ev)
                    evidence = {f"{sid}:{e.strip()}" for e in refs if e.strip()}
                    project = f"/locomo/{sid}"
                    out.append(("observation", project, text, evidence))
                    bare = text
                    for name in names:
                        bare = re.sub(rf"\b{re.escape(name)}'s\b", "their", bare)
                        bare = re.sub(rf"\b{re.escape(name)}\b", "", bare)
                    bare = " ".join(bare.split())
                    out.append(("no-names", project, bare, evidence))
                    said = {w[:5] for e in evidence
                            for w in re.findall(r"\w+", turns.get(e, "").lower())}
                    kept = [w for w in re.findall(r"[\w']+", bare) if w.lower()[:5] not in said]
                    if len(content_words(" ".join(kept))) >= 3:
                        out.append(("reworded", project, " ".join(kept), evidence))
    return out


def ask(config: Path, asked: list[tuple[str, str, str, set[str]]],
        passes: int = 2) -> list[dict[str, dict[str, float]]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    by_project: dict[str, list[tuple[str, str, str, set[str]]]] = defaultdict(list)
    for item in asked:
        by_project[item[1]].append(item)
    rows = []
    for _ in range(passes):
        hits: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for project, items in by_project.items():
            done = subprocess.run(
                [sys.executable, "-m", "memoryd", "--config", str(config), "recall", "--json",
                 "--stdin", "--project", project, "--limit", "10"],
                input="".join(" ".join(q.split()) + "\n" for _s, _p, q, _e in items),
                capture_output=True, text=True, env=env, check=True)
            answers = done.stdout.split("\n")[:-1]
            assert len(answers) == len(items), done.stderr[-2000:]
            for (name, _p, _q, evidence), line in zip(items, answers, strict=True):
                flags = [not evidence.isdisjoint(r["provenance"]["message_uuids"])
                         for r in json.loads(line)]
                hits[name].append((float(any(flags[:5])), float(any(flags[:10]))))
        rows.append({name: {"n": len(v), "recall@5": statistics.fmean(a for a, _ in v),
                            "recall@10": statistics.fmean(b for _, b in v)}
                     for name, v in hits.items()})
    return rows


async def main_async(args: argparse.Namespace, data: list[dict[str, Any]]) -> str:
    with tempfile.TemporaryDirectory(prefix="memoryd-paraphrase-") as tmp:
        work = Path(args.workdir) if args.workdir else Path(tmp)
        if not (work / "state" / "memory.db").exists():
            await build(data, work, 6000)
        config = default_config(work)
        embedder = await embed_with_defaults(work / "state" / "memory.db", config)
        rows = ask(config, queries(data))
    lines = [f"machine: {machine()}", f"embedder (default settings): {embedder}", "",
             "| set | n | pass | recall@5 | recall@10 |", "|---|---|---|---|---|"]
    for number, row in enumerate(rows, 1):
        for name in SETS:
            r = row[name]
            lines.append(f"| {name} | {r['n']:.0f} | {number} | {r['recall@5']:.3f} | "
                         f"{r['recall@10']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--workdir", help="a benchmarks.locomo --workdir to reuse")
    args = parser.parse_args()
    print(asyncio.run(main_async(args, json.loads(Path(args.data).read_text()))))


if __name__ == "__main__":
    main()
