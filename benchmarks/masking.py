"""Masking's throughput: everything that reaches memory is masked, how fast?

    python -m benchmarks.masking [--mb 8] [--runs 2] [--profile]
    python -m benchmarks.masking --sync 10000   # one long session through `memoryd sync`

Three texts, each masked item by item as memory masks them (`redaction.redact`, then the
configured extra patterns, none by default), in this process:

(a) the real fixture transcripts: every line of `tests/data/transcripts` and, when it
    is there, of `shared/fixtures/transcripts` (JSON lines, tool outputs, a base64 image);
(b) long prose with many digit runs: ~3 KB answers and pasted logs of a working day
    (times, dates, versions, ports, counts, amounts, ids, line numbers, hashes);
(c) base64 blobs and minified JSON (an image pasted in, API responses).

For each: MB/s of today's masker (`tests/reference/redaction_re.py`, the implementation
before the scanner, kept as the tests' reference) and of memoryd's, beside the same
text's `orjson.loads` (as a JSON string where it is not JSON) as the floor; every item's
output is compared with the reference's (a difference is printed and fails the run).
Each is measured `--runs` times; the scanner is built before the first (its build time
is printed on its own).

`--sync N`: the user's path for one long session. A Claude Code transcript of N
messages of about 3 KB of (b)'s prose (a person's request, the agent's answer, in
turn) is read by `memoryd ingest --once`; then `memoryd sync` runs as a process on the
default settings, twice, each on a fresh copy of that state, timed as a whole.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from benchmarks._common import (
    MB,
    REPO,
    SHARED,
    isolated_env,
    machine,
    memoryd_command,
    write_config,
)
from memoryd.memory.privacy import redaction
from memoryd.memory.privacy.redaction import mask_extra
from tests.reference import redaction_re as reference

_WORDS = ("the", "build", "failed", "again", "after", "the", "migration", "so", "I",
          "reverted", "the", "change", "and", "ran", "tests", "on", "staging", "with",
          "retries", "because", "the", "cache", "was", "cold", "and", "the", "queue",
          "backed", "up", "while", "the", "worker", "restarted", "twice", "per", "minute",
          "until", "the", "deploy", "finished")


def _transcripts() -> list[str]:
    roots = [REPO / "tests" / "data" / "transcripts", SHARED / "fixtures" / "transcripts"]
    lines: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*.json*")) if root.is_dir() else ():
            text = path.read_bytes().decode("utf-8", "surrogatepass")
            lines += [line for line in text.splitlines() if line]
    return lines


#: The numbers a working day's prose and logs hold: times, dates, versions, ports, row
#: counts, amounts, pids, line numbers, short hashes, durations, epoch milliseconds,
#: percentages, issue numbers, ids.
_NUMBERS: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"{r.randrange(24):02d}:{r.randrange(60):02d}:{r.randrange(60):02d}",
    lambda r: f"2026-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d}",
    lambda r: f"v{r.randrange(4)}.{r.randrange(20)}.{r.randrange(100)}",
    lambda r: f"port {r.randrange(1024, 65535)}",
    lambda r: f"{r.randrange(1, 999):,}{r.choice(['', ',000', ',500'])} rows",
    lambda r: f"${r.randrange(1, 99999):,}.{r.randrange(100):02d}",
    lambda r: f"pid {r.randrange(100, 4194304)}",
    lambda r: f"src/app/{r.choice(_WORDS)}.py:{r.randrange(1, 3000)}",
    lambda r: f"{r.getrandbits(28):07x}",
    lambda r: f"{r.randrange(1, 100000)} ms",
    lambda r: f"{r.randrange(1_600_000_000_000, 1_800_000_000_000)}",
    lambda r: f"{r.randrange(0, 100)}.{r.randrange(10)}%",
    lambda r: f"#{r.randrange(1, 20000)}",
    lambda r: f"{r.randrange(10_000, 10_000_000_000)}",
)


def _number(rng: random.Random) -> str:
    return _NUMBERS[rng.randrange(len(_NUMBERS))](rng)


def _prose(rng: random.Random, size: int) -> str:
    parts: list[str] = []
    length = 0
    while length < size:
        words = [rng.choice(_WORDS) if rng.random() < 0.75 else _number(rng)
                 for _ in range(rng.randrange(8, 24))]
        sentence = " ".join(words).capitalize() + rng.choice([". ", ".\n", ": ", "; "])
        parts.append(sentence)
        length += len(sentence)
    return "".join(parts)


def _minified(rng: random.Random, size: int) -> str:
    records = []
    length = 0
    while length < size:
        record = {"id": rng.getrandbits(63), "uuid": f"{rng.getrandbits(128):032x}",
                  "name": "".join(rng.choices(string.ascii_lowercase, k=rng.randrange(4, 12))),
                  "score": round(rng.random() * 1000, 4), "tags": rng.sample(_WORDS, 3),
                  "created": rng.randrange(1_600_000_000, 1_800_000_000),
                  "nested": {"count": rng.randrange(1000), "ok": rng.random() < 0.5}}
        encoded = json.dumps(record, separators=(",", ":"))
        records.append(encoded)
        length += len(encoded)
    return "[" + ",".join(records) + "]"


def corpora(mb: float, seed: int = 11) -> dict[str, list[str]]:
    rng = random.Random(seed)
    prose = [_prose(rng, rng.randrange(2500, 3500)) for _ in range(int(mb * MB / 3000))]
    blobs: list[str] = []
    length = 0
    while length < mb * MB:
        if rng.random() < 0.5:
            blob = base64.b64encode(rng.randbytes(rng.randrange(20_000, 200_000))).decode()
        else:
            blob = _minified(rng, rng.randrange(2_000, 60_000))
        blobs.append(blob)
        length += len(blob)
    return {"(a) real transcripts": _transcripts(), "(b) prose with digit runs": prose,
            "(c) base64 and minified JSON": blobs}


def _mask(text: str) -> str:
    return mask_extra(redaction.redact(text), ())


def _rate(items: list[str], size: int, function: Callable[[str], object]) -> float:
    started = time.perf_counter()
    for item in items:
        function(item)
    return size / (time.perf_counter() - started) / MB


def _floor(items: list[str]) -> list[bytes]:
    encoded = []
    for item in items:
        try:
            orjson.loads(item)
            encoded.append(item.encode("utf-8", "surrogatepass"))
        except orjson.JSONDecodeError:
            encoded.append(orjson.dumps(item.encode("utf-8", "surrogatepass")
                                        .decode("utf-8", "replace")))
    return encoded


def _transcript(path: Path, messages: int, seed: int = 5) -> int:
    """A Claude Code session of `messages` lines of prose; its size in bytes."""
    rng = random.Random(seed)
    session = "5e55a0de-0000-4000-8000-000000000001"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for number in range(messages):
            role = "user" if number % 2 == 0 else "assistant"
            text = _prose(rng, rng.randrange(2500, 3500))
            content: object = text if role == "user" else [{"type": "text", "text": text}]
            line = {"type": role, "uuid": f"m-{number}", "sessionId": session,
                    "parentUuid": f"m-{number - 1}" if number else None,
                    "timestamp": f"2026-11-02T{number // 3600 % 24:02d}:"
                                 f"{number // 60 % 60:02d}:{number % 60:02d}Z",
                    "cwd": "/home/user/project", "message": {"role": role, "content": content}}
            out.write(json.dumps(line) + "\n")
    return path.stat().st_size


def sync_one_session(messages: int) -> int:
    work = Path(tempfile.mkdtemp(prefix="memoryd-bench-masking-"))
    try:
        root = work / "claude"
        size = _transcript(root / "-home-user-project" / "long.jsonl", messages)
        env = isolated_env(work / "xdg")
        config = write_config(work / "config.yaml", work / "state", root, log_level="warning")
        began = time.perf_counter()
        done = subprocess.run(memoryd_command(config, "ingest", "--once"), env=env, cwd=REPO,
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"memoryd ingest failed ({done.returncode}):\n{done.stderr[-3000:]}")
        print(f"one session of {messages:,} messages, {size / MB:.1f} MB of transcript: "
              f"ingested in {time.perf_counter() - began:.1f} s")
        for run in (1, 2):
            state = work / f"state-{run}"
            shutil.copytree(work / "state", state)
            os.sync()
            copy = write_config(work / f"config-{run}.yaml", state, root, log_level="warning")
            began = time.perf_counter()
            done = subprocess.run(memoryd_command(copy, "sync"), env=env, cwd=REPO,
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - began
            if done.returncode != 0:
                sys.exit(f"memoryd sync failed ({done.returncode}):\n{done.stderr[-3000:]}")
            print(f"memoryd sync, run {run}: {seconds:.2f} s ({done.stdout.strip()}): "
                  f"{messages / seconds:,.0f} messages/s")
            shutil.rmtree(state, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=8.0, help="MB of (b) and of (c)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--profile", action="store_true",
                        help="print where memoryd's masking spends its time on each text")
    parser.add_argument("--sync", type=int, metavar="N", default=None,
                        help="one session of N messages through `memoryd sync` instead")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    if args.sync is not None:
        return sync_one_session(args.sync)
    started = time.perf_counter()
    redaction.prepare()
    print(f"scanner built in {time.perf_counter() - started:.2f} s "
          f"({redaction.scanner_summary()})")
    failed = False
    for name, items in corpora(args.mb).items():
        size = sum(len(i.encode("utf-8", "surrogatepass")) for i in items)
        differ = [i for i, item in enumerate(items) if _mask(item) != reference.redact(item)]
        print(f"\n{name}: {len(items):,} items, {size / MB:.1f} MB; "
              f"outputs differing from the reference: {len(differ)}")
        if differ:
            failed = True
            print(f"  first differing item: #{differ[0]}")
        floor = _floor(items)
        for run in range(1, args.runs + 1):
            today = _rate(items, size, reference.redact)
            ours = _rate(items, size, _mask)
            json_rate = _rate(floor, size, orjson.loads)  # type: ignore[arg-type]
            print(f"  run {run}: memoryd {ours:8.1f} MB/s   today's {today:6.2f} MB/s "
                  f"({ours / today:5.1f}x)   orjson.loads {json_rate:8.1f} MB/s")
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(lambda items=items: [_mask(i) for i in items])
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(8)
            print("\n".join(line for line in out.getvalue().splitlines()[4:] if line))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
