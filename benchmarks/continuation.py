"""What a new session is given about the project's earlier sessions, through the hook.

    python -m benchmarks.continuation [--baseline REV] [--keep]

For every session after the first in each multi-session project of the real
transcripts in `../shared/fixtures/transcripts/` (read in place) and in
`benchmarks/data/continuation/` (public real sessions whose earlier sessions leave
todo items unfinished, kept gzipped; origins and licences in its SOURCES.md and
benchmarks/README.md), as memoryd is installed by default:

1. The project is a real git repository made in the benchmark's temp dir, with a
   linked worktree (`git worktree add`): the project's sessions alternate between
   the main tree and the worktree (a session's sub-directory is kept), their paths
   rewritten to point there, so one project spans two worktrees as it does for
   people who run agents in parallel.
2. Memory as of the target session's start: only the sessions that ended before it,
   timestamps shifted so that the target starts now; `memoryd ingest --once`, then
   `memoryd sync`, then `memoryd run`.
3. `memoryd hooks install --agent claude` writes the hooks; the SessionStart hook is
   run as written (its executable swapped for this tree's `python -m memoryd`), with
   the payload Claude Code sends, twice; the block is what it prints.

Reported, for this tree and for `--baseline` (today's block, default: the commit
before session digests) side by side (issue 31.5):
- known-file recall: of the files the target session goes on to edit that earlier
  sessions of the project had edited, the share the block names (target >= 0.80);
- open-item recall: of the previous session's unfinished todo items, the share the
  block names (target 1.00);
- block size p50 / p95 in characters (target p50 <= 6,000);
- noise share: the block's characters copied verbatim from earlier sessions' tool
  inputs, file contents or tool output (runs of 30 characters or more; file paths
  excepted), over all of the blocks' characters (target <= 5 %); and beside it the
  share outside what a digest is asked to quote from tool traffic (commands run, their
  results' first lines, todo items): the measure counts those too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import yaml

from benchmarks._common import REPO, SHARED, machine, median, percentile
from benchmarks.transcript_corpus import Session, load_corpus, place, transcript_path
from benchmarks.transcript_corpus import projects as corpus_projects
from memoryd.hooks.install import settings_path
from memoryd.names import Agent

FIXTURES = SHARED / "fixtures" / "transcripts"
#: Public real sessions that the fixtures lack: projects whose sessions leave todos open.
DATA = REPO / "benchmarks" / "data" / "continuation"
DEFAULT_BASELINE = "8bfaf18"
#: Published agent homes gathered as benchmarks/data/continuation/SOURCES.md says (not
#: shipped: their licences do not allow it).
CORPUS_ENV = "MEMORYD_BENCH_CORPUS"
DEFAULT_CORPUS = Path.home() / ".cache" / "memoryd-bench" / "continuation"
#: Runs of this many characters or more copied from tool traffic count as noise.
NOISE_RUN = 30
#: File paths, and the ids that name sessions and commits: naming them is the point.
_PATH = re.compile(r"(?:[\w.@+-]*/)+[\w.@+-]+|\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b"
                   r"|\b[0-9a-f]{7,40}\b")


def projects(corpus: list[Path]) -> dict[str, list[Session]]:
    """The multi-session projects among the fixtures, the vendored data and `corpus`."""
    return corpus_projects(load_corpus([FIXTURES, DATA, *corpus]))


def targets_of(sessions: list[Session], most: int) -> list[int]:
    """Which sessions of a project are targets: those that go on to edit files earlier
    sessions edited (else any after the first), at most `most`, spread evenly."""
    known: set[str] = set()
    overlapping, later = [], []
    for position, session in enumerate(sessions):
        edited = session.edited()
        if position:
            later.append(position)
            if known & set(edited):
                overlapping.append(position)
        known.update(edited)
    chosen = overlapping or later
    if len(chosen) <= most:
        return chosen
    step = (len(chosen) - 1) / max(1, most - 1)
    return sorted({chosen[round(i * step)] for i in range(most)})


# -- one target ---------------------------------------------------------------------

def _git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _make_repository(work: Path, name: str) -> tuple[Path, Path]:
    main, other = work / "repos" / name, work / "repos" / f"{name}-feature"
    main.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=main)
    (main / "README").write_text("bench\n")
    _git("add", ".", cwd=main)
    _git("commit", "-qm", "init", cwd=main)
    _git("worktree", "add", "-q", "-b", "feature", str(other), cwd=main)
    return main, other


@dataclass
class Measured:
    known: int = 0
    known_named: int = 0
    open: int = 0
    open_named: int = 0
    sizes: list[int] = field(default_factory=list)
    noise_chars: int = 0
    beyond_chars: int = 0  # noise outside what a digest is asked to quote
    chars: int = 0
    stable: int = 0
    targets: int = 0
    decisions: int = 0
    decisions_named: int = 0


def _grams(texts: list[str]) -> set[str]:
    grams: set[str] = set()
    for text in texts:
        flat = " ".join(text.split())
        for i in range(0, max(0, len(flat) - NOISE_RUN + 1)):
            grams.add(flat[i:i + NOISE_RUN])
    return grams


def _noise(block: str, traffic: list[str], words: list[str], quoted: list[str],
           show: bool = False) -> tuple[int, int]:
    """Characters of `block` inside a run of >= NOISE_RUN characters found verbatim in the
    tool traffic (whitespace runs as one space, file paths and ids excepted) and not in
    the person's or the agent's own words (a request the agent also passed to a
    subagent is the person's words, not tool output); and of those, the ones not inside
    what a digest is asked to quote (`Session.quoted`)."""
    grams = _grams(traffic) - _grams(words)
    asked = _grams(quoted)
    masked = _PATH.sub(lambda m: "\0" * len(m.group(0)), block)
    covered = [False] * len(block)
    beyond = [False] * len(block)
    for i in range(0, max(0, len(masked) - NOISE_RUN + 1)):
        run = masked[i:i + NOISE_RUN]
        if run in grams:
            for j in range(i, i + NOISE_RUN):
                covered[j] = True
                beyond[j] = beyond[j] or run not in asked
    if show:
        runs = re.finditer(r"(?:x)+", "".join("x" if c else "." for c in beyond))
        for found in runs:
            print(f"  noise beyond the quotes: {block[found.start():found.end()]!r}")
    return sum(covered), sum(beyond)


def _env(home: Path, tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_STATE_HOME=str(home / ".local" / "state"),
               XDG_DATA_HOME=str(home / ".local" / "share"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_RUNTIME_DIR=str(home / "run"),
               PYTHONPATH=str(tree))
    (home / "run").mkdir(parents=True, exist_ok=True, mode=0o700)
    config = home / ".config" / "memoryd" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    # The defaults, but no embedding model download in a benchmark.
    config.write_text(yaml.safe_dump({"memory": {"embeddings": {"fetch_model": False}}}))
    return env


def _memoryd(tree: Path, env: dict[str, str], *args: str, **kwargs: Any
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memoryd", *args], env=env, cwd=tree,
                          capture_output=True, text=True, timeout=600, **kwargs)


def _session_start_command(home: Path, agent: str) -> list[str]:
    settings = json.loads(settings_path(cast(Agent, agent), "hooks", "user", home,
                                        home).read_text())
    for group in settings["hooks"]["SessionStart"]:
        for hook in group["hooks"]:
            # `memoryd hook --agent ...`, or (since the shell client) `/bin/sh
            # memoryd-hook.sh memoryd hook --agent ...`: either tree's install.
            words = shlex.split(hook["command"])
            for at in range(len(words) - 1):
                if words[at:at + 2] == ["hook", "--agent"]:
                    return [sys.executable, "-m", "memoryd", *words[at:]]
    raise RuntimeError(f"memoryd hooks install wrote no SessionStart hook for {agent}")


def _wait(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.05)


def measure_target(tree: Path, work: Path, earlier: list[Session], target: Session,
                   places: dict[str, Path]) -> tuple[str, str]:
    """The block the SessionStart hook gives `target` (twice) with memory of `earlier`."""
    home = work / "home"
    env = _env(home, tree)
    shift = datetime.now(UTC) - target.started
    for session in earlier:
        place(home, session, places[session.id], shift)
    agent = target.agent
    for args in (("hooks", "install", "--agent", agent), ("ingest", "--once"), ("sync",)):
        done = _memoryd(tree, env, *args)
        if done.returncode != 0:
            raise RuntimeError(f"memoryd {' '.join(args)}: {done.stderr[-2000:]}")
    command = _session_start_command(home, agent)
    state = home / ".local" / "share" / "memoryd"
    with (work / "daemon.log").open("w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "memoryd", "run"], env=env, cwd=tree,
                                  stdout=subprocess.DEVNULL, stderr=log)
    try:
        _wait(state / "memoryd.sock")
        target_cwd = target.cwd.replace(target.root, str(places[target.id]))
        Path(target_cwd).mkdir(parents=True, exist_ok=True)
        payload = {"session_id": target.id, "cwd": target_cwd, "source": "startup",
                   "transcript_path": str(transcript_path(home, target, target_cwd)),
                   "hook_event_name": "SessionStart", "model": "a-model",
                   "timestamp": datetime.now(UTC).isoformat()}
        blocks = []
        for _ in range(2):
            done = subprocess.run(command, input=json.dumps(payload), env=env, cwd=target_cwd,
                                  capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"the SessionStart hook failed: {done.stderr[-2000:]}")
            answer = json.loads(done.stdout) if done.stdout.strip() else {}
            blocks.append(answer.get("hookSpecificOutput", {}).get("additionalContext") or "")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    return blocks[0], blocks[1]


#: A decision said in so many words (the benchmark's own reading, not memoryd's).
_DECISION = re.compile(r"(?im)^\W*(?:decision|decided)\s*:\s*(.{12,})$|"
                       r"\bwe(?:'ve| have)? decided (?:to|that|on) ([^.\n]{8,})")


def _decisions(session: Session) -> list[str]:
    """Decisions the person or the agent stated in so many words: a few of their words
    each, as the measure looks for them. A template's ("Decision: [what was chosen]",
    a line that ends on a colon) is none."""
    found = []
    for text in session.own_words():
        for match in _DECISION.finditer(text):
            said = " ".join((match.group(1) or match.group(2)).split()).strip("*_ ")
            if len(said.split()) >= 3 and not said.startswith(("[", "<")) \
                    and not said.endswith(":"):
                found.append(said[:40])
    return found


def _stated(earlier: list[Session]) -> list[str]:
    """The decisions of `earlier`, each once; one said in several sessions word for word
    is a pasted document or a template, not a decision of one of them."""
    seen: dict[str, set[str]] = {}
    for session in earlier:
        for said in _decisions(session):
            seen.setdefault(said, set()).add(session.id)
    return [said for said, sessions in seen.items() if len(sessions) == 1]


def run_tree(tree: Path, label: str, scratch: Path, groups: dict[str, list[Session]],
             show: bool, most: int) -> dict[str, Measured]:
    """Each project's figures."""
    results: dict[str, Measured] = {}
    for number, (key, sessions) in enumerate(groups.items()):
        measured = results.setdefault(key, Measured())
        places: dict[str, Path] = {}
        for position in targets_of(sessions, most):
            target = sessions[position]
            earlier = [s for s in sessions[:position] if s.ended <= target.started] or \
                sessions[:position]
            work = scratch / f"{label}-{number}-{position}"
            work.mkdir(parents=True)
            main, other = _make_repository(work, f"p{number}")
            places = {s.id: (main if i % 2 == 0 else other) for i, s in enumerate(sessions)}
            first, second = measure_target(tree, work, earlier, target, places)
            measured.targets += 1
            measured.stable += first == second
            block = first
            known_before = {f for s in earlier for f in s.edited()}
            going_to = [f for f in target.edited() if f in known_before]
            measured.known += len(going_to)
            measured.known_named += sum(f in block for f in going_to)
            previous = max(earlier, key=lambda s: s.ended)
            items = previous.open_items()
            measured.open += len(items)
            measured.open_named += sum(" ".join(i.split())[:60] in " ".join(block.split())
                                       for i in items)
            decided = _stated(earlier)
            measured.decisions += len(decided)
            measured.decisions_named += sum(d in " ".join(block.split()) for d in decided)
            measured.sizes.append(len(block))
            traffic = [t.replace(s.root, str(places[s.id])) for s in earlier
                       for t in s.tool_traffic()]
            words = [t.replace(s.root, str(places[s.id])) for s in earlier
                     for t in s.own_words()]
            quoted = [t.replace(s.root, str(places[s.id])) for s in earlier
                      for t in s.quoted()]
            strict, beyond = _noise(block, traffic, words, quoted, show)
            measured.noise_chars += strict
            measured.beyond_chars += beyond
            measured.chars += len(block)
            if show:
                print(f"--- {label}: {target.agent} {target.id} in {key} after "
                      f"{len(earlier)} sessions ({len(block)} characters)")
                print(block)
            print(f"  {key} target {position}: {len(going_to)} known files, "
                  f"{sum(f in block for f in going_to)} named; {len(block)} chars",
                  file=sys.stderr, flush=True)
    return results


def pooled(results: dict[str, Measured]) -> Measured:
    total = Measured()
    for m in results.values():
        for name in ("known", "known_named", "open", "open_named", "decisions",
                     "decisions_named", "noise_chars", "beyond_chars", "chars", "stable",
                     "targets"):
            setattr(total, name, getattr(total, name) + getattr(m, name))
        total.sizes += m.sizes
    return total


def _baseline_tree(rev: str, scratch: Path) -> Path:
    tree = scratch / f"baseline-{rev}"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=REPO,
                             capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as buffer:
        buffer.write(archive)
        buffer.seek(0)
        with tarfile.open(fileobj=buffer) as tar:
            tar.extractall(tree, filter="data")
    return tree


def _row(name: str, m: Measured) -> str:
    def share(a: int, b: int) -> str:
        return f"{a / b:.2f} ({a}/{b})" if b else "n/a (0)"

    sizes = m.sizes or [0]
    return (f"| {name} | {m.targets} | {share(m.known_named, m.known)} | "
            f"{share(m.open_named, m.open)} | {share(m.decisions_named, m.decisions)} | "
            f"{median(sizes):,.0f} / {percentile(sizes, 95):,.0f} | "
            f"{100 * m.noise_chars / max(1, m.chars):.1f} % | "
            f"{100 * m.beyond_chars / max(1, m.chars):.1f} % | {m.stable}/{m.targets} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE,
                        help="the git revision whose block is today's (default: %(default)s)")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--corpus", type=Path, action="append", default=[],
                        help="a directory of published agent homes (repeatable; default: "
                        f"${CORPUS_ENV}, else {DEFAULT_CORPUS})")
    parser.add_argument("--targets", type=int, default=4,
                        help="target sessions per project at most (default: %(default)s)")
    parser.add_argument("--only", default=None, help="only projects whose key holds this")
    parser.add_argument("--show", action="store_true", help="print every block")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args(argv)
    corpus = args.corpus or [Path(p) for p in os.environ.get(CORPUS_ENV, "").split(":") if p]
    if not corpus and DEFAULT_CORPUS.is_dir():
        corpus = [DEFAULT_CORPUS]
    groups = projects(corpus)
    if args.only:
        groups = {k: v for k, v in groups.items() if args.only in k}
    scratch = Path(tempfile.mkdtemp(prefix="memoryd-bench-continuation-"))
    try:
        print(f"machine: {machine()}")
        print(f"projects: {len(groups)} ({', '.join(sorted({k.split(':')[0] for k in groups}))})")
        mine = run_tree(REPO, "new", scratch, groups, args.show, args.targets)
        header = ("| project | targets | known-file recall | open-item recall | decision recall |"
                  " size p50 / p95 | noise | noise beyond the quotes | same when asked twice |")
        print(header)
        print("|---" * 9 + "|")
        for key, m in mine.items():
            print(_row(f"{key} ({len(groups[key])} sessions)", m))
        print(_row("**pooled, this tree**", pooled(mine)))
        if not args.no_baseline:
            base = _baseline_tree(args.baseline, scratch)
            theirs = run_tree(base, "base", scratch, groups, args.show, args.targets)
            print(_row(f"pooled, {args.baseline}", pooled(theirs)))
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
