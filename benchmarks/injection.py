"""When should a prompt hook stay silent? The injection gate, calibrated on two data sets.

    python -m benchmarks.injection [--locomo-workdir DIR] [--lme-workdir DIR]

For every question of LoCoMo (categories 1-4 answerable, 5 adversarial: memory
cannot answer it) and of the LongMemEval dev split (`*_abs` abstention
questions cannot be answered), as the prompt of a `UserPromptSubmit` hook in
the question's project:

1. The curve: recall through the running daemon's API (`POST /v1/recall`,
   limit 20, as the hook does), then for each threshold the hook's own
   selection (`memory.gate.coverage` >= threshold) and block
   (`build_context`, 1,500 tokens). For the unanswerable questions: the share
   that get no block at all; for the answerable ones: the share whose block
   holds an evidence turn (LoCoMo) or a turn of an answer session (LongMemEval).
2. The default, through the real hook path: `POST /v1/session_event` (what
   `memoryd hook` sends) with the default `agents.prompt_min_relevance`, each
   question in a fresh agent session, twice (the second pass must score as the first).

Targets (issue 14): silent on >= 95 % of unanswerable questions while the block
holds evidence for >= 85 % of answerable ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import structlog

from benchmarks import locomo, longmemeval
from benchmarks._common import REPO, isolated_env, machine
from memoryd.memory.models import MemoryType, Provenance, RecallResult
from memoryd.memory.recall.context import build_context
from memoryd.memory.recall.spoken_time import passes_gate, spoken_time

RUN = f"{os.getpid()}-{int(time.time())}"
THRESHOLDS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.67, 0.75, 0.8, 0.9, 1.0)
CANDIDATES = 20
BUDGET = 1500


@dataclass
class Question:
    prompt: str
    project: str
    answerable: bool
    holds: Callable[[dict[str, Any]], bool]


@dataclass
class Tally:
    answerable: int = 0
    unanswerable: int = 0
    evidence: dict[float, int] = field(default_factory=dict)
    silent: dict[float, int] = field(default_factory=dict)


def _result(record: dict[str, Any]) -> RecallResult:
    prov = record["provenance"]
    return RecallResult(
        memory_id=record["memory_id"], type=MemoryType(record["type"]),
        content=record["content"], score=record["score"],
        provenance=Provenance(session_id=prov.get("session_id"),
                              session_external_id=prov.get("session_external_id"),
                              source=prov.get("source"),
                              message_uuids=tuple(prov.get("message_uuids") or ()),
                              started_at=_moment(prov.get("started_at")),
                              ended_at=_moment(prov.get("ended_at"))),
        created_at=datetime.fromisoformat(record["created_at"].replace("Z", "+00:00")),
        excerpt=record.get("excerpt"))


def _moment(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def block_ids(prompt: str, results: list[dict[str, Any]], threshold: float) -> list[str]:
    """The memory ids the hook's block would hold at `threshold` (domain.blocks.Blocks.prompt:
    a memory of the time the prompt speaks of answers for its time words, and a prompt
    that is only a time is for memories of then)."""
    spoken = spoken_time(prompt, datetime.now(UTC))
    fresh = [r for r in map(_result, results) if passes_gate(r, prompt, spoken, threshold)]
    if not fresh:
        return []
    return [item.result.memory_id for item in build_context(fresh, BUDGET).items]


def locomo_questions(data: list[dict[str, Any]]) -> list[Question]:
    out = []
    for sample in data:
        project = f"/locomo/{sample['sample_id']}"
        for qa in sample["qa"]:
            evidence = {f"{sample['sample_id']}:{e.strip()}" for e in qa.get("evidence", [])}

            def holds(r: dict[str, Any], ev: set[str] = evidence) -> bool:
                return not ev.isdisjoint(r["provenance"]["message_uuids"])

            out.append(Question(qa["question"], project, qa["category"] != 5, holds))
    return out


def lme_questions(data: list[dict[str, Any]]) -> list[Question]:
    out = []
    for q in data:
        wanted = set(q["answer_session_ids"])

        def holds(r: dict[str, Any], ws: set[str] = wanted) -> bool:
            return bool(longmemeval.sessions_of(r) & ws)

        out.append(Question(q["question"], longmemeval.project_of(q),
                            not q["question_id"].endswith("_abs"), holds))
    return out


def measure(config: Path, questions: list[Question], default: float,
            ) -> tuple[Tally, Tally, Tally]:
    """The curve over THRESHOLDS, and the default through the hook's own endpoint, twice
    (each pass in fresh agent sessions: a session is never given a memory twice)."""
    env = isolated_env(config.parent / "xdg")
    state = config.parent / "state"
    socket = state / "memoryd.sock"
    log = (config.parent / "daemon.log").open("ab")
    daemon = subprocess.Popen([sys.executable, "-m", "memoryd", "--config", str(config), "run"],
                              env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)
    curve, real, again = Tally(), Tally(), Tally()
    try:
        deadline = time.monotonic() + 120
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)),
                          base_url="http://memoryd", timeout=120) as api:
            for n, q in enumerate(questions):
                results = api.post("/v1/recall", json={
                    "query": q.prompt[:2000], "project": q.project,
                    "limit": CANDIDATES}).json()["results"]
                by_id = {r["memory_id"]: r for r in results}
                for tally in (curve, real, again):
                    if q.answerable:
                        tally.answerable += 1
                    else:
                        tally.unanswerable += 1
                for threshold in THRESHOLDS:
                    ids = block_ids(q.prompt, results, threshold)
                    _count(curve, threshold, q, ids, by_id)
                for number, tally in ((1, real), (2, again)):
                    given = api.post("/v1/session_event", json={
                        "agent": "claude", "event": "prompt",
                        "session_id": f"calib-{RUN}-{number}-{n}", "cwd": q.project,
                        "prompt": q.prompt}).json()
                    _count(tally, default, q, given["memory_ids"], by_id)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        log.close()
    return curve, real, again


def _count(tally: Tally, threshold: float, q: Question, ids: list[str],
           by_id: dict[str, dict[str, Any]]) -> None:
    if q.answerable:
        if any(q.holds(by_id[i]) for i in ids if i in by_id):
            tally.evidence[threshold] = tally.evidence.get(threshold, 0) + 1
    elif not ids:
        tally.silent[threshold] = tally.silent.get(threshold, 0) + 1


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.3f}" if whole else "-"


def table(curves: dict[str, Tally]) -> str:
    names = list(curves)
    head = "| threshold | " + " | ".join(
        f"{n}: block holds evidence | {n}: silent when unanswerable" for n in names) + " |"
    lines = [head, "|---|" + "---|---|" * len(names)]
    for threshold in sorted({t for c in curves.values() for t in c.evidence | c.silent}):
        cells = []
        for name in names:
            c = curves[name]
            cells += [_share(c.evidence.get(threshold, 0), c.answerable),
                      _share(c.silent.get(threshold, 0), c.unanswerable)]
        lines.append(f"| {threshold:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo-workdir", type=Path, default=None)
    parser.add_argument("--lme-workdir", type=Path, default=None)
    parser.add_argument("--distill", metavar="LLM_YAML|local",
                        help="first distil every session (`memoryd distill`) with the model"
                             " whose `memory.llm` settings the YAML file holds (`local`: the"
                             " plumbing's server on 127.0.0.1): the figures with its items;"
                             " without it, the figures without")
    args = parser.parse_args(argv)
    from memoryd.config import AgentSettings

    default = AgentSettings().prompt_min_relevance
    with tempfile.TemporaryDirectory(prefix="memoryd-inject-") as tmp:
        loco_work = args.locomo_workdir or Path(tmp) / "locomo"
        lme_work = args.lme_workdir or Path(tmp) / "lme"
        for work in (loco_work, lme_work):
            work.mkdir(parents=True, exist_ok=True)
        loco_data = json.loads(locomo.DATA.read_text())
        if not (loco_work / "state" / "memory.db").exists():
            asyncio.run(locomo.build(loco_data, loco_work, 6000))
        loco_config = locomo.default_config(loco_work)
        asyncio.run(locomo.embed_with_defaults(loco_work / "state" / "memory.db", loco_config))
        lme_data = longmemeval.load(longmemeval.DATA)
        lme_config = asyncio.run(longmemeval.build(lme_data, lme_work))
        if args.distill:
            for work, config in ((loco_work, loco_config), (lme_work, lme_config)):
                with locomo.distilling(args.distill, work, config) as distill_config:
                    locomo.distill_all(distill_config)
                asyncio.run(locomo.embed_with_defaults(work / "state" / "memory.db", config))
        curves, reals, agains = {}, {}, {}
        curves["LoCoMo"], reals["LoCoMo"], agains["LoCoMo"] = measure(
            loco_config, locomo_questions(loco_data), default)
        curves["LongMemEval"], reals["LongMemEval"], agains["LongMemEval"] = measure(
            lme_config, lme_questions(lme_data), default)
    print(f"machine: {machine()}")
    if args.distill:
        print(f"with the items `memoryd distill` kept ({args.distill})")
    print(f"answerable / unanswerable: LoCoMo {curves['LoCoMo'].answerable} /"
          f" {curves['LoCoMo'].unanswerable}, LongMemEval {curves['LongMemEval'].answerable} /"
          f" {curves['LongMemEval'].unanswerable}\n")
    print(table(curves))
    print(f"\nthrough POST /v1/session_event (the hook's path), default threshold {default},"
          " pass 1:\n")
    print(table(reals))
    print("\npass 2 (the same questions again, in fresh agent sessions):\n")
    print(table(agains))


if __name__ == "__main__":
    main()
