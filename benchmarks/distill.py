"""Distillation (issue 33): the plumbing's figures, and one command for a real model.

    python -m benchmarks.distill                  # a model server on 127.0.0.1 (no model here)
    MEMORYD_LLM_API_KEY=... python -m benchmarks.distill --provider openai \\
        --base-url https://api.openai.com/v1 --model gpt-4o-mini   # any endpoint you have
    python -m benchmarks.distill --quality llm.yaml   # recall and the hook, with and without

The real Claude Code fixture transcripts (`shared/fixtures/transcripts/claude`) are laid
out under a fresh Claude root, ingested, and saved to a fresh embedded memory store by
memoryd's own recovery pass, in this process: once with distillation off and once on
(the same data, a fresh state each time), so the cost on capture is the difference of
the two (queueing a segment is one row in the transaction that saves it). Then the
queue is sent through `Distiller` (the daemon's worker), the rate aside, and the figures
are printed: segments sent a second, items per segment, tokens per session, duplicates
avoided, and what a second pass over the same sessions' segments (as `memoryd distill
--since` would queue them) adds.

Without `--provider`, the model is a server on 127.0.0.1 answering each segment with one
fact per message of the person (its first sentence), so the figures are the plumbing's
(HTTP, checks, masking, duplicate search, stores), not a model's quality. With a real
endpoint, the same run measures what that model extracts. The server streams its answer
when asked to, as the real endpoints do.

`--quality LLM_YAML` (a YAML file holding the `memory.llm` settings, or `local` for the
plumbing's server) is the quality run in one command: `benchmarks.locomo --modes cli`,
`benchmarks.longmemeval` and `benchmarks.injection`, each with `--distill LLM_YAML`:
recall on LoCoMo and LongMemEval-dev, and the hook's evidence and silence, with and
without the items the model extracts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks._common import REPO, SHARED, isolate_this_process, machine, sql_value

FIXTURES = SHARED / "fixtures" / "transcripts" / "claude"
_USER_LINE = re.compile(r"^\[(\d+)\] user: (.+)$", re.M)


def _items(body: dict[str, Any]) -> tuple[str, int, int]:
    """(the model's text, tokens in, tokens out) for a request."""
    text = str(body["messages"][-1]["content"])
    items = []
    for number, said in _USER_LINE.findall(text):
        sentence = re.split(r"(?<=[.!?])\s", said.strip(), maxsplit=1)[0][:200]
        if len(sentence) > 12:
            items.append({"type": "fact", "content": sentence, "evidence": [int(number)]})
    answer = json.dumps({"items": items})
    return answer, len(text) // 4 + 300, len(answer) // 4


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    answer, tokens_in, tokens_out = _items(body)
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out}}


def _stream(body: dict[str, Any]) -> Iterator[bytes]:
    """The answer as OpenAI streams it: chunks of the text, the usage, `[DONE]`."""
    answer, tokens_in, tokens_out = _items(body)
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"content": answer[i:i + 64]}}]}
        for i in range(0, len(answer), 64)]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": tokens_in,
                                            "completion_tokens": tokens_out}})
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


@contextmanager
def local_model() -> Iterator[str]:
    """A chat completions server on 127.0.0.1 (port 0); its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            if body.get("stream"):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                for frame in _stream(body):
                    self.wfile.write(frame)
                return
            data = json.dumps(_answer(body)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _lay_out(root: Path) -> int:
    """The Claude fixtures under `root` as Claude Code writes them; how many."""
    project = root / "-home-dev-fixtures"
    project.mkdir(parents=True)
    count = 0
    for path in sorted(FIXTURES.glob("*.jsonl")):
        shutil.copy(path, project / path.name)
        count += 1
    return count


async def _capture(work: Path, llm: dict[str, Any]) -> tuple[Any, float]:
    """Ingest and save every fixture into a fresh state; (settings, recovery seconds)."""
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.ingest.ingester import Ingester
    from memoryd.lifecycle.recovery import Recovery
    from memoryd.lifecycle.sync_policy import recovery_policy
    from memoryd.memory import SQLiteMemoryBackend
    from memoryd.store.database import open_store

    root = work / "claude"
    _lay_out(root)
    settings = load_settings(None, state_dir=str(work / "state"),
                             sources=[{"kind": "claude", "root": str(root)}],
                             memory={"embeddings": {"provider": "none"}, "llm": llm})
    clock = SystemClock()
    async with open_store(settings) as conn:
        ingester = Ingester(conn, settings, clock)
        await ingester.load()
        await ingester.run_once()
        backend = await SQLiteMemoryBackend.open(settings.memory_path, clock=clock)
        try:
            began = time.perf_counter()
            await Recovery(conn, backend, clock, recovery_policy(settings)).run(force=True)
            seconds = time.perf_counter() - began
        finally:
            await backend.close()
    return settings, seconds


async def _send(settings: Any) -> dict[str, Any]:
    from memoryd.clock import SystemClock
    from memoryd.distill.providers import make_provider
    from memoryd.distill.worker import Distiller
    from memoryd.memory import SQLiteMemoryBackend
    from memoryd.store.database import open_store

    clock = SystemClock()
    async with open_store(settings) as conn:
        backend = await SQLiteMemoryBackend.open(settings.memory_path, clock=clock)
        distiller = Distiller(conn, backend, clock, settings,
                              make_provider(settings.memory.llm, settings.distill_dir))
        totals = {"jobs": 0, "stored": 0, "duplicates": 0, "skipped": 0, "tokens": 0}
        began = time.perf_counter()
        try:
            while True:
                report = await distiller.run(max_jobs=50)
                for key in totals:
                    totals[key] += getattr(report, key)
                if not report.jobs or report.stopped:
                    break
        finally:
            await distiller.close()
            await backend.close()
        totals["seconds"] = time.perf_counter() - began
    return totals


async def _requeue(settings: Any) -> int:
    """The sessions' segments queued again as `memoryd distill --since` cuts them."""
    from memoryd.distill.backlog import plan_backlog
    from memoryd.store.database import open_store
    from memoryd.store.distill_queue import enqueue_backlog

    async with open_store(settings) as conn:
        backlog = await plan_backlog(conn, settings, datetime(1970, 1, 1, tzinfo=UTC))
        await enqueue_backlog(conn, backlog.entries, datetime.now(UTC))
    return backlog.segments


async def run(args: argparse.Namespace, work: Path, base_url: str | None) -> None:
    llm = {"provider": args.provider or "openai", "base_url": args.base_url or base_url or "",
           "model": args.model or "plumbing", "per_minute": 600,
           "daily_tokens": args.daily_tokens}
    _, off = await _capture(work / "off", {"provider": "none"})
    settings, on = await _capture(work / "on", llm)
    db = settings.database_path
    queued = sql_value(db, "SELECT COUNT(*) FROM distill_queue")
    sessions = sql_value(db, "SELECT COUNT(DISTINCT session_id) FROM distill_queue")
    first = await _send(settings)
    again = await _requeue(settings)
    second = await _send(settings)
    print(f"machine: {machine()}")
    print(f"model: {llm['provider']} {llm['model']} at {llm['base_url']}"
          + (" (a server on 127.0.0.1: the plumbing, not a model)" if base_url else ""))
    print(f"capture, {sessions} sessions of the Claude fixtures: recovery {off:.3f} s with"
          f" distillation off, {on:.3f} s on ({queued} segments queued in the same"
          " transactions)")
    jobs = max(1, first["jobs"])
    items = first["stored"] + first["duplicates"]
    print(f"first pass: {first['jobs']} segments in {first['seconds']:.2f} s"
          f" ({first['jobs'] / first['seconds']:.1f} segments/s, rate aside),"
          f" {items} items ({items / jobs:.2f} a segment), {first['stored']} stored,"
          f" {first['duplicates']} duplicates avoided,"
          f" {first['skipped']} skipped, {first['tokens']:,} tokens"
          f" ({first['tokens'] / max(1, sessions):,.0f} a session)")
    print(f"second pass (`distill --since` over the same sessions): {again} segments queued"
          f" again, {second['stored']} stored, {second['duplicates']} duplicates avoided,"
          f" {second['tokens']:,} tokens")


def quality(llm: str) -> int:
    """The quality run: each benchmark in turn, with `--distill llm`; the first failure
    stops it."""
    import subprocess
    import sys

    for command in (["benchmarks.locomo", "--modes", "cli"], ["benchmarks.longmemeval"],
                    ["benchmarks.injection"]):
        print(f"$ python -m {' '.join(command)} --distill {llm}", flush=True)
        done = subprocess.run([sys.executable, "-m", *command, "--distill", llm], cwd=REPO)
        if done.returncode != 0:
            return done.returncode
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", choices=["openai", "anthropic", "claude-cli",
                                               "codex-cli", "gemini-cli"])
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--daily-tokens", type=int, default=10_000_000)
    parser.add_argument("--quality", metavar="LLM_YAML|local",
                        help="run the recall and hook benchmarks with and without the items")
    args = parser.parse_args()
    if args.quality:
        return quality(args.quality)
    work = Path(tempfile.mkdtemp(prefix="memoryd-bench-distill-"))
    try:
        key = os.environ.get("MEMORYD_LLM_API_KEY")
        isolate_this_process(work / "xdg")
        if key is not None:  # the one MEMORYD_ variable a real endpoint needs
            os.environ["MEMORYD_LLM_API_KEY"] = key
        if args.provider:
            asyncio.run(run(args, work, None))
        else:
            with local_model() as url:
                asyncio.run(run(args, work, url))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
