"""A deterministic Claude Code-format corpus: `<root>/projects/<project>/<session>.jsonl`.

Lines have the shape of real Claude Code transcripts (see the fixtures under
`shared/fixtures/transcripts/claude/`): user prompts, assistant text, thinking and
tool_use lines, tool_result lines (with the `toolUseResult` copy that makes real
transcripts large, and base64 screenshots), and the bookkeeping lines memoryd
skips: `progress`, `file-history-snapshot`, `summary`. About one tool result in
fifty is a long line of 50-500 KB; some sessions have a subagent transcript under
`<session>/subagents/`, and some a compaction (a `compact_boundary` line and its
summary).

    python -m benchmarks.gen_corpus --mb 200 --out /tmp/corpus

The same `--mb` and `--seed` always give byte-identical files. A `manifest.json`
beside `projects/` records what was generated, so a later run can reuse it.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
import uuid as uuidlib
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

MB = 1 << 20
MANIFEST = "manifest.json"
#: Bump when the generator's output changes, so an old cached corpus is not reused.
GENERATOR_VERSION = 1

_SYLLABLES = (
    "ka ri to mo na lu se vi pa de ko ra mi su te no ha be ly zo qua fen dor "
    "tis gar vel mon pri sta cor lin tra bel ost urn emb ald")
_COMMON = (
    "the a to of and in is it that for on with as this be are we can should will "
    "file function test error value config run build change update add fix return "
    "import module class type list data path line user memory session daemon store "
    "query index message commit offset parse read write check case handle")
_CODE_LINES = (
    "def {w}_{v}(self, {w}: int) -> None:",
    "    return self._{w}.{v}({w}, timeout=30)",
    "    if not {w}:",
    "        raise ValueError(\"{w} {v} is empty\")",
    "import {w}.{v} as {w}",
    "for {w} in {v}_items:",
    "    {w}_{v} = {w}.get(\"{v}\", 0) + 1",
    "class {W}{V}({W}Base):",
    "    \"\"\"{W} the {v} of a {w}.\"\"\"",
    "# TODO: {w} {v} later",
    "const {w} = await {v}.fetch(`/api/{w}`);",
    "  {w}: {v}.map((x) => x.{w}),",
)
_TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "Glob", "TodoWrite", "WebFetch")
_MODELS = ("claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805")


class Pools:
    """Large pre-built strings that lines take random slices of (fast, deterministic)."""

    def __init__(self, rng: random.Random, text_chars: int = 3 * MB) -> None:
        words = _COMMON.split()
        syllables = _SYLLABLES.split()
        while len(words) < 3000:
            words.append("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))))
        self.words = words
        parts: list[str] = []
        size = 0
        while size < text_chars:
            sentence = " ".join(rng.choices(words, k=rng.randint(6, 22)))
            sentence = sentence[0].upper() + sentence[1:] + rng.choice((". ", ". ", "? ", ".\n\n"))
            parts.append(sentence)
            size += len(sentence)
        self.text = "".join(parts)
        code: list[str] = []
        size = 0
        while size < text_chars:
            w, v = rng.choice(words), rng.choice(words)
            line = rng.choice(_CODE_LINES).format(w=w, v=v, W=w.title(), V=v.title())
            code.append(line)
            size += len(line) + 1
        self.code = "\n".join(code)
        self.b64 = base64.b64encode(rng.randbytes(3 * MB // 4 * 3)).decode()

    @staticmethod
    def _slice(rng: random.Random, pool: str, n: int) -> str:
        if n >= len(pool):
            return (pool * (n // len(pool) + 1))[:n]
        start = rng.randrange(0, len(pool) - n)
        return pool[start : start + n]

    def prose(self, rng: random.Random, n: int) -> str:
        return self._slice(rng, self.text, max(1, n)).strip() or "ok"

    def source(self, rng: random.Random, n: int) -> str:
        return self._slice(rng, self.code, max(1, n))

    def base64(self, rng: random.Random, n: int) -> str:
        return self._slice(rng, self.b64, n - n % 4)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _size(rng: random.Random, low: int, high: int) -> int:
    """Log-uniform between low and high: many small, a few large, like real messages."""
    return int(low * (high / low) ** rng.random())


class SessionWriter:
    """Builds the lines of one transcript, chaining uuids and advancing time like Claude Code."""

    def __init__(self, rng: random.Random, pools: Pools, *, cwd: str, session_id: str,
                 start: datetime, sidechain: bool = False, agent_id: str | None = None) -> None:
        self.rng = rng
        self.pools = pools
        self.cwd = cwd
        self.session_id = session_id
        self.now = start
        self.sidechain = sidechain
        self.agent_id = agent_id
        self.parent: str | None = None
        self.messages = 0  # lines memoryd stores as messages
        self.long_lines = 0

    def _uuid(self) -> str:
        return str(uuidlib.UUID(int=self.rng.getrandbits(128), version=4))

    def _envelope(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.now += timedelta(milliseconds=self.rng.randint(200, 20_000))
        record: dict[str, Any] = {
            "parentUuid": self.parent,
            "isSidechain": self.sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": "2.0.24",
            "gitBranch": "main",
        }
        if self.agent_id:
            record["agentId"] = self.agent_id
        record["type"] = kind
        record.update(fields)
        record["uuid"] = self._uuid()
        record["timestamp"] = _iso(self.now)
        if kind in ("user", "assistant", "system"):
            self.parent = record["uuid"]
        return record

    def _line(self, record: dict[str, Any]) -> bytes:
        if record.get("type") in ("user", "assistant") or record.get("subtype") == (
            "compact_boundary"
        ):
            self.messages += 1
        return orjson.dumps(record) + b"\n"

    # -- messages --------------------------------------------------------------------------

    def user_text(self, n: int | None = None) -> bytes:
        text = self.pools.prose(self.rng, n or _size(self.rng, 20, 3000))
        return self._line(self._envelope(
            "user", message={"role": "user", "content": text},
            thinkingMetadata={"level": "none", "disabled": True, "triggers": []}))

    def _assistant(self, content: list[dict[str, Any]]) -> bytes:
        rng = self.rng
        message = {
            "model": rng.choice(_MODELS), "id": "msg_" + self._uuid().replace("-", "")[:24],
            "type": "message", "role": "assistant", "content": content,
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": rng.randint(1, 9),
                      "cache_creation_input_tokens": rng.randint(0, 20_000),
                      "cache_read_input_tokens": rng.randint(0, 90_000),
                      "output_tokens": rng.randint(1, 2000), "service_tier": "standard"},
        }
        return self._line(self._envelope(
            "assistant", message=message, requestId="req_" + self._uuid().replace("-", "")[:24]))

    def assistant_text(self, n: int | None = None) -> bytes:
        text = self.pools.prose(self.rng, n or _size(self.rng, 30, 4000))
        return self._assistant([{"type": "text", "text": text}])

    def thinking(self) -> bytes:
        text = self.pools.prose(self.rng, _size(self.rng, 100, 6000))
        signature = self.pools.base64(self.rng, self.rng.randint(200, 1200))
        return self._assistant([{"type": "thinking", "thinking": text, "signature": signature}])

    def tool_use(self) -> tuple[bytes, str, str]:
        rng = self.rng
        tool = rng.choice(_TOOLS)
        tool_id = "toolu_" + self._uuid().replace("-", "")[:24]
        path = f"{self.cwd}/src/{rng.choice(self.pools.words)}.py"
        if tool == "Bash":
            target = rng.choice(self.pools.words)
            tool_input: dict[str, Any] = {"command": f"pytest -q tests/test_{target}.py",
                                          "description": self.pools.prose(rng, 40)}
        elif tool in ("Edit", "Write"):
            tool_input = {"file_path": path,
                          "old_string": self.pools.source(rng, _size(rng, 20, 2000)),
                          "new_string": self.pools.source(rng, _size(rng, 20, 3000))}
        elif tool == "TodoWrite":
            tool_input = {"todos": [{"content": self.pools.prose(rng, 50), "status": "pending",
                                     "activeForm": self.pools.prose(rng, 50)}
                                    for _ in range(rng.randint(1, 6))]}
        else:
            tool_input = {"file_path": path, "pattern": rng.choice(self.pools.words)}
        content: list[dict[str, Any]] = []
        if rng.random() < 0.4:
            content.append({"type": "text", "text": self.pools.prose(rng, _size(rng, 20, 600))})
        content.append({"type": "tool_use", "id": tool_id, "name": tool, "input": tool_input})
        return self._assistant(content), tool_id, tool

    def tool_result(self, tool_id: str, tool: str) -> bytes:
        rng = self.rng
        roll = rng.random()
        extra: dict[str, Any] = {}
        if roll < 0.006:  # a long line: a whole file, a build log
            self.long_lines += 1
            output = self.pools.source(rng, rng.randint(50_000, 500_000) // 2)
            content: Any = output
            extra["toolUseResult"] = {"stdout": output, "stderr": "", "interrupted": False}
        elif roll < 0.009:  # a screenshot, as real transcripts carry them
            self.long_lines += 1
            data = self.pools.base64(rng, rng.randint(50_000, 500_000))
            content = [{"type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": data}}]
        else:
            output = self.pools.source(rng, _size(rng, 30, 12_000))
            content = output
            if tool == "Read":
                extra["toolUseResult"] = {"type": "text", "file": {
                    "filePath": f"{self.cwd}/src/x.py", "content": output,
                    "numLines": output.count("\n") + 1, "startLine": 1}}
            elif tool == "Bash":
                extra["toolUseResult"] = {"stdout": output, "stderr": "", "interrupted": False}
            else:
                extra["toolUseResult"] = {"type": "update", "filePath": f"{self.cwd}/src/x.py"}
        block: dict[str, Any] = {"tool_use_id": tool_id, "type": "tool_result", "content": content}
        if rng.random() < 0.03:
            block["is_error"] = True
        return self._line(self._envelope(
            "user", message={"role": "user", "content": [block]}, **extra))

    def compaction(self) -> list[bytes]:
        boundary = self._envelope(
            "system", subtype="compact_boundary", content="Conversation compacted",
            isMeta=False, level="info",
            compactMetadata={"trigger": "auto", "preTokens": self.rng.randint(100_000, 180_000)})
        boundary["parentUuid"] = None
        summary = self._envelope(
            "user", isCompactSummary=True, isVisibleInTranscriptOnly=True,
            message={"role": "user", "content": "This session is being continued from a previous"
                     " conversation. Summary: " + self.pools.prose(self.rng, 3000)})
        return [self._line(boundary), self._line(summary)]

    # -- bookkeeping (not messages) ----------------------------------------------------------

    def progress(self, tool_id: str) -> bytes:
        record = self._envelope("progress", data={
            "type": "bash_progress", "output": self.pools.source(self.rng, 200),
            "fullOutput": self.pools.source(self.rng, 600),
            "elapsedTimeSeconds": self.rng.randint(1, 60), "totalLines": 12},
            toolUseID=f"bash-progress-{self.rng.randint(0, 99)}", parentToolUseID=tool_id)
        return self._line(record)

    def snapshot(self) -> bytes:
        backups = {f"src/{self.rng.choice(self.pools.words)}.py": {
            "backupFileName": None, "version": 1, "backupTime": _iso(self.now)}
            for _ in range(self.rng.randint(1, 5))}
        record = {"type": "file-history-snapshot", "messageId": self._uuid(),
                  "snapshot": {"messageId": self.parent or self._uuid(),
                               "trackedFileBackups": backups, "timestamp": _iso(self.now)},
                  "isSnapshotUpdate": self.rng.random() < 0.5}
        return self._line(record)

    def summary(self) -> bytes:
        return self._line({"type": "summary", "summary": self.pools.prose(self.rng, 60),
                           "leafUuid": self._uuid()})

    # -- a whole turn ------------------------------------------------------------------------

    def turn(self) -> list[bytes]:
        """A user prompt and the assistant's work on it, as Claude Code writes it."""
        rng = self.rng
        lines = []
        if rng.random() < 0.5:
            lines.append(self.snapshot())
        lines.append(self.user_text())
        if rng.random() < 0.5:
            lines.append(self.thinking())
        for _ in range(rng.randint(0, 6)):
            line, tool_id, tool = self.tool_use()
            lines.append(line)
            if tool == "Bash":
                lines.extend(self.progress(tool_id) for _ in range(rng.randint(0, 3)))
            lines.append(self.tool_result(tool_id, tool))
        lines.append(self.assistant_text())
        return lines


@dataclass(slots=True)
class CorpusInfo:
    root: str
    seed: int
    target_bytes: int
    files: int = 0
    bytes: int = 0
    lines: int = 0
    messages: int = 0
    long_lines: int = 0
    projects: int = 0
    version: int = GENERATOR_VERSION


def _write_session(path: Path, writer: SessionWriter, target: int, info: CorpusInfo,
                   first_lines: list[bytes] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    size = 0
    with open(path, "wb") as handle:
        pending = list(first_lines or [])
        while size < target:
            if not pending:
                pending = writer.turn()
                if writer.rng.random() < 0.01:
                    pending[0:0] = writer.compaction()
            line = pending.pop(0)
            handle.write(line)
            size += len(line)
            info.lines += 1
        for line in pending:  # finish the turn in hand
            handle.write(line)
            size += len(line)
            info.lines += 1
    info.files += 1
    info.bytes += size


def generate(out: Path, total_bytes: int, seed: int = 1, projects: int = 12) -> CorpusInfo:
    """Write a corpus of at least `total_bytes` under `out/projects`; same seed, same bytes."""
    rng = random.Random(seed)
    pools = Pools(rng)
    root = out / "projects"
    info = CorpusInfo(root=str(root), seed=seed, target_bytes=total_bytes)
    cwds = [f"/home/dev/code/{rng.choice(pools.words)}-{rng.choice(pools.words)}-{i}"
            for i in range(projects)]
    info.projects = len(cwds)
    start = datetime(2025, 10, 1, 9, 0, tzinfo=UTC)
    n = 0
    while info.bytes < total_bytes:
        cwd = cwds[n % len(cwds)] if n < len(cwds) else rng.choice(cwds)
        session_id = str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
        project_dir = root / cwd.replace("/", "-")
        writer = SessionWriter(rng, pools, cwd=cwd, session_id=session_id,
                               start=start + timedelta(hours=n))
        # Session sizes are skewed like real ones: most a few hundred KB, a few many MB.
        target = min(int(rng.lognormvariate(12.6, 1.1)), 12 * MB)
        first = [writer.summary()] if rng.random() < 0.2 else []
        _write_session(project_dir / f"{session_id}.jsonl", writer, target, info, first)
        info.messages += writer.messages
        info.long_lines += writer.long_lines
        if rng.random() < 0.1:  # a subagent's own transcript, a child session
            agent_id = f"{rng.getrandbits(32):08x}"
            agent = SessionWriter(rng, pools, cwd=cwd, session_id=session_id,
                                  start=writer.now, sidechain=True, agent_id=agent_id)
            path = project_dir / session_id / "subagents" / f"agent-{agent_id}.jsonl"
            _write_session(path, agent, target // 4, info)
            info.messages += agent.messages
            info.long_lines += agent.long_lines
        n += 1
    (out / MANIFEST).write_text(json.dumps(asdict(info), indent=2), encoding="utf-8")
    return info


def ensure(out: Path, total_bytes: int, seed: int = 1) -> tuple[CorpusInfo, bool]:
    """The corpus at `out`, reused when its manifest matches, else generated; (info, reused)."""
    manifest = out / MANIFEST
    if manifest.exists():
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            info = CorpusInfo(**data)
        except (ValueError, TypeError):
            info = None
        if (info is not None and info.seed == seed and info.target_bytes == total_bytes
                and info.version == GENERATOR_VERSION and Path(info.root).is_dir()):
            return info, True
    if (out / "projects").exists():
        import shutil

        shutil.rmtree(out / "projects")
    out.mkdir(parents=True, exist_ok=True)
    return generate(out, total_bytes, seed), False


def corpus_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.jsonl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200.0, help="total size (default 200 MB)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    info, reused = ensure(args.out, int(args.mb * MB), args.seed)
    elapsed = time.perf_counter() - began
    print(f"corpus {'reused' if reused else 'generated'} in {elapsed:.1f} s: {info.root}")
    print(f"  files {info.files}, projects {info.projects}, {info.bytes / MB:.1f} MB, "
          f"lines {info.lines}, messages {info.messages}, long lines (50-500 KB) "
          f"{info.long_lines}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
