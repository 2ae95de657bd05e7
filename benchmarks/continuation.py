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
   run as written (its executable swapped for this tree's `python -m daemon`), with
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
import gzip
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import REPO, SHARED, machine, median, percentile

FIXTURES = SHARED / "fixtures" / "transcripts"
#: Public real sessions that the fixtures lack: projects whose sessions leave todos open.
DATA = REPO / "benchmarks" / "data" / "continuation"
DEFAULT_BASELINE = "8bfaf18"
#: Runs of this many characters or more copied from tool traffic count as noise.
NOISE_RUN = 30
#: File paths, and the ids that name sessions and commits: naming them is the point.
_PATH = re.compile(r"(?:[\w.@+-]*/)+[\w.@+-]+|\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b"
                   r"|\b[0-9a-f]{7,40}\b")
_EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path",
               "NotebookEdit": "notebook_path"}


@dataclass
class Session:
    path: Path
    id: str
    root: str  # the project's root, as the transcript names it
    cwd: str
    started: datetime
    ended: datetime
    lines: list[dict[str, Any]]

    def edited(self) -> list[str]:
        """Files this session's edit tools touched, relative to its project's root."""
        found: list[str] = []
        for record in self.lines:
            for block in _blocks(record):
                if block.get("type") == "tool_use" and block.get("name") in _EDIT_TOOLS:
                    path = (block.get("input") or {}).get(_EDIT_TOOLS[block["name"]])
                    if isinstance(path, str):
                        rel = path.removeprefix(self.root.rstrip("/") + "/")
                        if rel not in found:
                            found.append(rel)
        return found

    def open_items(self) -> list[str]:
        """The unfinished items of the session's last todo list."""
        items: list[str] = []
        for record in self.lines:
            for block in _blocks(record):
                if block.get("type") == "tool_use" and block.get("name") == "TodoWrite":
                    todos = (block.get("input") or {}).get("todos") or []
                    items = [t["content"] for t in todos if isinstance(t, dict)
                             and isinstance(t.get("content"), str)
                             and t.get("status") not in ("completed", "cancelled")]
        return items

    def own_words(self) -> Iterator[str]:
        """What the person typed and the agent wrote to them (text blocks, not tools)."""
        for record in self.lines:
            message = record.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                yield content
            for block in _blocks(record):
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    yield block["text"]

    def quoted(self) -> Iterator[str]:
        """What a digest is asked to quote from tool traffic (issue 31.1): the commands
        run, their results' first lines (a failure's error, a commit's message) and the
        todo items."""
        for record in self.lines:
            for block in _blocks(record):
                if block.get("type") == "tool_use":
                    args = block.get("input") or {}
                    if isinstance(args.get("command"), str):
                        yield args["command"]
                    for todo in args.get("todos") or []:
                        if isinstance(todo, dict) and isinstance(todo.get("content"), str):
                            yield todo["content"]
                elif block.get("type") == "tool_result":
                    for text in _strings(block.get("content")):
                        first = next((line for line in text.splitlines() if line.strip()), "")
                        yield first

    def tool_traffic(self) -> Iterator[str]:
        """Every tool input's strings and every tool result's text."""
        for record in self.lines:
            for block in _blocks(record):
                if block.get("type") == "tool_use":
                    yield from _strings(block.get("input"))
                elif block.get("type") == "tool_result":
                    yield from _strings(block.get("content"))
            if isinstance(record.get("toolUseResult"), (dict, str, list)):
                yield from _strings(record["toolUseResult"])


def _blocks(record: dict[str, Any]) -> list[dict[str, Any]]:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _when(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _load(path: Path) -> Session | None:
    lines: list[dict[str, Any]] = []
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    for raw in data.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            lines.append(record)
    stamps = [t for r in lines if (t := _when(r.get("timestamp"))) is not None]
    cwds = [r["cwd"] for r in lines if isinstance(r.get("cwd"), str) and r["cwd"].startswith("/")]
    ids = [r["sessionId"] for r in lines if isinstance(r.get("sessionId"), str)]
    if not stamps or not cwds or not ids or any(r.get("isSidechain") for r in lines[:1]):
        return None
    cwd = min(cwds, key=len)
    return Session(path, ids[0], cwd, cwd, min(stamps), max(stamps), lines)


def projects() -> dict[str, list[Session]]:
    """The multi-session projects among the fixtures: sessions grouped by the shortest
    working directory among them (a sub-directory's sessions join their project)."""
    files = [*sorted((FIXTURES / "claude").glob("*.jsonl")),
             *sorted(DATA.glob("*/*.jsonl.gz"))]
    sessions = [s for p in files
                if "__subagents__" not in p.name and (s := _load(p)) is not None]
    # Artificial test data (`/tmp`) is not a project.
    sessions = [s for s in sessions if s.root not in ("/tmp", "/tmp/project")]
    roots = sorted({s.root for s in sessions}, key=len)
    grouped: dict[str, list[Session]] = {}
    for session in sessions:
        root = next(r for r in roots if session.root == r or session.root.startswith(r + "/"))
        session.root = root
        grouped.setdefault(root, []).append(session)
    return {root: sorted(found, key=lambda s: s.started) for root, found in grouped.items()
            if len(found) > 1}


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


def _encode(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def _rewrite(session: Session, root: Path, shift: timedelta) -> str:
    out = []
    for record in session.lines:
        stamp = _when(record.get("timestamp"))
        if stamp is not None:
            record = {**record, "timestamp": (stamp + shift).isoformat(
                timespec="milliseconds").replace("+00:00", "Z")}
        out.append(json.dumps(record).replace(session.root, str(root)))
    return "\n".join(out) + "\n"


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
    return subprocess.run([sys.executable, "-m", "daemon", *args], env=env, cwd=tree,
                          capture_output=True, text=True, timeout=600, **kwargs)


def _session_start_command(home: Path) -> list[str]:
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    for group in settings["hooks"]["SessionStart"]:
        for hook in group["hooks"]:
            # `memoryd hook --agent ...`, or (since the shell client) `/bin/sh
            # memoryd-hook.sh memoryd hook --agent ...`: either tree's install.
            words = shlex.split(hook["command"])
            for at in range(len(words) - 1):
                if words[at:at + 2] == ["hook", "--agent"]:
                    return [sys.executable, "-m", "daemon", *words[at:]]
    raise RuntimeError("memoryd hooks install wrote no SessionStart hook")


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
    projects_dir = home / ".claude" / "projects"
    for session in earlier:
        root = places[session.id]
        cwd = session.cwd.replace(session.root, str(root))
        Path(cwd).mkdir(parents=True, exist_ok=True)
        folder = projects_dir / _encode(cwd)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{session.id}.jsonl").write_text(_rewrite(session, root, shift))
    for args in (("hooks", "install", "--agent", "claude"), ("ingest", "--once"), ("sync",)):
        done = _memoryd(tree, env, *args)
        if done.returncode != 0:
            raise RuntimeError(f"memoryd {' '.join(args)}: {done.stderr[-2000:]}")
    command = _session_start_command(home)
    state = home / ".local" / "share" / "memoryd"
    with (work / "daemon.log").open("w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "daemon", "run"], env=env, cwd=tree,
                                  stdout=subprocess.DEVNULL, stderr=log)
    try:
        _wait(state / "memoryd.sock")
        target_cwd = target.cwd.replace(target.root, str(places[target.id]))
        Path(target_cwd).mkdir(parents=True, exist_ok=True)
        payload = {"session_id": target.id, "cwd": target_cwd, "source": "startup",
                   "transcript_path": str(projects_dir / _encode(target_cwd)
                                          / f"{target.id}.jsonl"),
                   "hook_event_name": "SessionStart", "model": "claude-sonnet-4-5"}
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


def run_tree(tree: Path, label: str, scratch: Path, groups: dict[str, list[Session]],
             show: bool) -> Measured:
    measured = Measured()
    for number, (root, sessions) in enumerate(groups.items()):
        for position in range(1, len(sessions)):
            target = sessions[position]
            earlier = [s for s in sessions if s.ended < target.started]
            if not earlier:
                continue
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
            measured.open_named += sum(" ".join(i.split())[:60] in block for i in items)
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
                print(f"--- {label}: {target.id} in {root} ({len(block)} characters)")
                print(block)
    return measured


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
    return (f"| {name} | {share(m.known_named, m.known)} | {share(m.open_named, m.open)} | "
            f"{median(sizes):,.0f} / {percentile(sizes, 95):,.0f} | "
            f"{100 * m.noise_chars / max(1, m.chars):.1f} % | "
            f"{100 * m.beyond_chars / max(1, m.chars):.1f} % | {m.stable}/{m.targets} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE,
                        help="the git revision whose block is today's (default: %(default)s)")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--show", action="store_true", help="print every block")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args(argv)
    groups = projects()
    scratch = Path(tempfile.mkdtemp(prefix="memoryd-bench-continuation-"))
    try:
        print(f"machine: {machine()}")
        print(f"projects: {len(groups)}; sessions: "
              + ", ".join(f"{root} {len(s)}" for root, s in groups.items()))
        rows = [_row("this tree", run_tree(REPO, "new", scratch, groups, args.show))]
        if not args.no_baseline:
            base = _baseline_tree(args.baseline, scratch)
            rows.append(_row(f"today ({args.baseline})",
                             run_tree(base, "base", scratch, groups, args.show)))
        print("| block | known-file recall | open-item recall | size p50 / p95 | noise |"
              " noise beyond the quotes | same when asked twice |")
        print("|---|---|---|---|---|---|---|")
        for row in rows:
            print(row)
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
