"""Backfill throughput: memoryd's `ingest --once` beside two baselines, as whole processes.

    python -m benchmarks.backfill                # 200 MB corpus, two rounds
    python -m benchmarks.backfill --mb 100 --rounds 4
    python -m benchmarks.backfill --mb 50 --profile   # where memoryd's time goes

All read the same generated Claude-format files (benchmarks.gen_corpus; reused from
`--corpus` when already there), each as a process of its own, timed from start to
exit: memoryd as `python -m memoryd ingest --once` on a fresh state_dir, the baselines
as `python benchmarks/baseline_loops.py` (`--inprocess` runs all three in this
process instead). The baselines, both into a table without indexes, in WAL mode with
synchronous=NORMAL like memoryd's database, one executemany and one transaction a
file:

- `bare` (the issue's bar): every line parsed with orjson and inserted as it is;
- `baseline`: the lines memoryd stores as messages (user, assistant,
  compact_boundary) kept as rows (session, index, role, content, raw).

The page cache cannot be dropped without root, so every file is read once before
timing (all then read from memory), and the order alternates between rounds; the
median round is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import gen_corpus
from benchmarks._common import (
    MB,
    REPO,
    count_rows,
    db_size,
    isolate_this_process,
    isolated_env,
    machine,
    median,
    memoryd_command,
    startup_seconds,
    write_config,
)
from benchmarks.baseline_loops import LOOPS


@dataclass(slots=True)
class Result:
    name: str
    seconds: float
    messages: int
    db_bytes: int


def warm(files: list[Path]) -> tuple[int, float]:
    began = time.perf_counter()
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            while chunk := handle.read(4 * MB):
                total += len(chunk)
    return total, time.perf_counter() - began


# -- the baselines (benchmarks/baseline_loops.py) ------------------------------------------

def loop_subprocess(name: str, files_list: Path, db: Path) -> Result:
    """A baseline loop as a whole process of its own, like memoryd's: its interpreter's
    start-up counts as memoryd's does."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "baseline_loops.py"),
                           name, str(files_list), str(db)],
                          capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"baseline loop {name} failed:\n{done.stderr[-3000:]}")
    return Result(name, seconds, int(done.stdout.split()[0]), db_size(db))


def loop_in_process(name: str, files: list[Path], db: Path) -> Result:
    began = time.perf_counter()
    rows = LOOPS[name](files, db)
    return Result(name, time.perf_counter() - began, rows, db_size(db))


# -- memoryd -------------------------------------------------------------------------------
def memoryd_subprocess(root: Path, work: Path) -> Result:
    state = work / "state"
    config = write_config(work / "config.yaml", state, root)
    env = isolated_env(work / "xdg")
    began = time.perf_counter()
    done = subprocess.run(memoryd_command(config, "ingest", "--once"), env=env, cwd=REPO,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"memoryd ingest --once failed ({done.returncode}):\n{done.stderr[-3000:]}")
    db = state / "memoryd.db"
    return Result("memoryd", seconds, count_rows(db, "session_messages"), db_size(db))


def _ingest_in_process(root: Path, work: Path) -> tuple[float, Path]:
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.ingest.once import ingest_once
    from memoryd.logging import configure_logging

    isolate_this_process(work / "xdg")
    settings = load_settings(None, state_dir=work / "state",
                             sources=[{"kind": "claude", "root": str(root)}], log_format="json")
    configure_logging(settings.log_level, settings.log_format, stream=sys.stderr)
    began = time.perf_counter()
    asyncio.run(ingest_once(settings, SystemClock()))
    return time.perf_counter() - began, settings.database_path


def memoryd_in_process(root: Path, work: Path) -> Result:
    seconds, db = _ingest_in_process(root, work)
    return Result("memoryd", seconds, count_rows(db, "session_messages"), db_size(db))


def profile(root: Path, work: Path, top: int) -> None:
    """cProfile of the in-process ingest. aiosqlite runs SQL on its own thread, which
    cProfile does not see: that time shows as waiting in the event loop (select)."""
    profiler = cProfile.Profile()
    profiler.enable()
    seconds, _db = _ingest_in_process(root, work)
    profiler.disable()
    print(f"\nprofile of the in-process ingest ({seconds:.1f} s, main thread only):")
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(top)
        text = out.getvalue()
        start = text.find("   ncalls")
        print(f"-- top {top} by {key}\n{text[start:]}")


# -- the run -------------------------------------------------------------------------------

def _row(result: Result, total_bytes: int) -> str:
    return (f"{result.name:<9} {result.seconds:9.2f} {total_bytes / MB / result.seconds:9.1f}"
            f" {result.messages / result.seconds:12.0f} {result.messages:10d}"
            f" {result.db_bytes / MB:9.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200.0, help="corpus size (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=Path, default=None,
                        help="where the corpus is generated or reused (default: "
                             "$TMPDIR/memoryd-bench-corpus-<mb>mb-seed<seed>)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds, alternating which runs first (median reported)")
    parser.add_argument("--inprocess", action="store_true",
                        help="call service.ingest_once in this process instead of a subprocess")
    parser.add_argument("--profile", action="store_true",
                        help="afterwards, profile an in-process ingest with cProfile")
    parser.add_argument("--top", type=int, default=25, help="profile rows to print")
    args = parser.parse_args(argv)
    if args.corpus is None:
        args.corpus = (Path(tempfile.gettempdir())
                       / f"memoryd-bench-corpus-{args.mb:g}mb-seed{args.seed}")

    print(f"machine: {machine()}")
    began = time.perf_counter()
    info, reused = gen_corpus.ensure(args.corpus, int(args.mb * MB), args.seed)
    print(f"corpus: {info.root} ({'reused' if reused else 'generated'} in "
          f"{time.perf_counter() - began:.1f} s, seed {info.seed}): {info.files} files in "
          f"{info.projects} projects, {info.bytes / MB:.1f} MB, {info.lines} lines, "
          f"{info.messages} messages, {info.long_lines} lines of 50-500 KB")
    root = Path(info.root)
    files = gen_corpus.corpus_files(root)
    total_bytes, warm_seconds = warm(files)
    print(f"page cache: warmed by reading all {total_bytes / MB:.1f} MB once "
          f"({warm_seconds:.2f} s) before timing")
    mode = "in-process service.ingest_once" if args.inprocess else (
        "subprocess `python -m memoryd ingest --once`")
    # Removed at the end (the corpus stays, for the next run to reuse).
    scratch = tempfile.TemporaryDirectory(prefix="memoryd-bench-")
    try:
        return _measure(args, info, root, files, total_bytes, mode, Path(scratch.name))
    finally:
        scratch.cleanup()


def _measure(args: argparse.Namespace, info: gen_corpus.CorpusInfo, root: Path,
             files: list[Path], total_bytes: int, mode: str, scratch: Path) -> int:
    if not args.inprocess:
        fixed = startup_seconds(isolated_env(scratch / "xdg"))
        mode += f"; its interpreter start-up, included, is {fixed:.2f} s"
    print(f"memoryd: {mode}")

    files_list = scratch / "files.txt"
    files_list.write_text("\n".join(str(f) for f in files))
    runs: dict[str, list[Result]] = {"bare": [], "baseline": [], "memoryd": []}
    for round_no in range(args.rounds):
        order = ["bare", "baseline", "memoryd"]
        if round_no % 2:
            order.reverse()
        for name in order:
            work = Path(tempfile.mkdtemp(prefix=f"memoryd-bench-{name}-"))
            try:
                if name in LOOPS and args.inprocess:
                    result = loop_in_process(name, files, work / f"{name}.db")
                elif name in LOOPS:
                    result = loop_subprocess(name, files_list, work / f"{name}.db")
                elif args.inprocess:
                    result = memoryd_in_process(root, work)
                else:
                    result = memoryd_subprocess(root, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            runs[name].append(result)
            print(f"  round {round_no + 1}: {name:<8} {result.seconds:7.2f} s")

    print(f"\n{'':<9} {'seconds':>9} {'MB/s':>9} {'messages/s':>12} {'messages':>10}"
          f" {'db MB':>9}")
    chosen: dict[str, Result] = {}
    for name, results in runs.items():
        chosen[name] = Result(name, median([r.seconds for r in results]),
                              results[-1].messages, results[-1].db_bytes)
        print(_row(chosen[name], total_bytes))
    bare_run, base, mem = chosen["bare"], chosen["baseline"], chosen["memoryd"]
    ratio = bare_run.seconds / mem.seconds
    verdict = "meets" if ratio >= 0.5 else "MISSES"
    print(f"\nratio memoryd/bare (every line parsed and inserted as it is; the issue's bar):"
          f" {ratio:.2f} of its MB/s (target >= 0.50: {verdict})")
    print(f"ratio memoryd/baseline (message lines kept as fields + raw):"
          f" {base.seconds / mem.seconds:.2f}")
    if mem.messages != info.messages or base.messages != info.messages:
        print(f"WARNING: messages stored differ from the corpus: generated {info.messages}, "
              f"memoryd {mem.messages}, baseline {base.messages}")
    else:
        print(f"check: memoryd and the baseline each stored all {info.messages} messages")
    if args.profile:
        work = Path(tempfile.mkdtemp(prefix="memoryd-bench-profile-"))
        try:
            profile(root, work, args.top)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
