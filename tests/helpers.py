"""Shared test helpers: the real fixture transcripts, settings files, daemon subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The real transcripts the tests read, kept in the repository with their sources and
#: licences (`tests/data/transcripts/SOURCES.md`): a clone needs nothing beside it.
TRANSCRIPTS = REPO / "tests" / "data" / "transcripts"


def fixture_files(kind: str) -> list[Path]:
    """Every real fixture transcript of one agent (claude, codex, gemini), sorted."""
    return sorted(p for p in (TRANSCRIPTS / kind).iterdir() if p.suffix in (".jsonl", ".json"))


def lay_out_fixtures(base: Path) -> dict[str, Path]:
    """Copy every fixture into agent-shaped roots under `base`; returns kind -> root.

    Fixture names flatten their origin path with `__`; the last part is the file
    name an agent would write, and `__subagents__` marks a Claude subagent file.
    """
    roots = {kind: base / kind for kind in ("claude", "codex", "gemini")}
    for root in roots.values():
        root.mkdir(parents=True, exist_ok=True)
    project = roots["claude"] / "-home-user-project"
    for path in fixture_files("claude"):
        if "__subagents__" in path.name:
            parent, agent = path.name.split("__subagents__")
            target = project / parent.split("__")[-1] / "subagents" / agent
        else:
            target = project / path.name.split("__")[-1]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    day = roots["codex"] / "2025" / "10" / "20"
    day.mkdir(parents=True)
    for path in fixture_files("codex"):
        shutil.copy(path, day / f"rollout-{path.stem.split('__')[-1]}.jsonl")
    chats = roots["gemini"] / "0f3a" / "chats"
    chats.mkdir(parents=True)
    for path in fixture_files("gemini"):
        shutil.copy(path, chats / path.name.split("__")[-1])
    return roots


def sources_for(roots: dict[str, Path]) -> list[dict[str, str]]:
    return [{"kind": kind, "root": str(root)} for kind, root in roots.items()]


def write_config(path: Path, state_dir: Path, roots: dict[str, Path], **extra: object) -> Path:
    """A YAML settings file for a daemon subprocess over `roots`."""
    import yaml

    settings = {"state_dir": str(state_dir), "sources": sources_for(roots), **extra}
    # Tests never fetch the local model's weights from the network (see weights.py).
    memory = settings.setdefault("memory", {})
    memory.setdefault("embeddings", {}).setdefault("fetch_model", False)  # type: ignore[union-attr]
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def daemon_env(tmp_path: Path) -> dict[str, str]:
    """The environment for a memoryd subprocess: no MEMORYD_* or config from this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg-config")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def memoryd_command(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "memoryd", *args]


def wait_ready(state_dir: Path, pid: int, timeout: float = 30.0) -> None:
    """Block until the daemon with `pid` has written its status (its signal handlers are set)."""
    import json
    import time

    deadline = time.monotonic() + timeout
    status = state_dir / "status.json"
    while time.monotonic() < deadline:
        try:
            if json.loads(status.read_text()).get("pid") == pid:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"memoryd (pid {pid}) did not become ready in {timeout}s")


def unsynced_messages(db: Path) -> int:
    """How many stored messages are not yet in memory (past each session's sync index)."""
    import sqlite3

    conn = sqlite3.connect(db, timeout=30)
    try:
        return int(conn.execute(
            "SELECT COALESCE(SUM(message_count - memory_sync_index), 0) FROM sessions"
        ).fetchone()[0])
    finally:
        conn.close()


def wait_for(predicate: object, timeout: float = 20.0, what: str = "the condition") -> None:
    """Poll `predicate` until it is true; fail after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextlib.contextmanager
def local_time_zone(name: str) -> Iterator[None]:
    """The process's local time zone set to `name` (e.g. Asia/Tokyo) inside the block."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


class JsonHandler(BaseHTTPRequestHandler):
    """A fake HTTP service's request handler (on 127.0.0.1, port 0): reads JSON bodies,
    answers JSON, logs nothing."""

    def read_json(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def send_json(self, answer: Any, status: int = 200) -> None:
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.asynccontextmanager
async def in_memory(server: Any) -> Any:
    """The official SDK's client talking to memoryd's MCP server in-process: a transport
    (`mcp.Client(in_memory(server))`) whose every message goes through `server.handle`,
    serialized both ways as it would be on stdio."""
    import anyio
    import mcp.types as types
    from mcp.shared.message import SessionMessage

    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](16)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](16)

    async def pump() -> None:
        async for sent in from_client:
            line = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
            answer = await server.handle(json.loads(line))
            if answer is not None:
                await to_client.send(SessionMessage(types.jsonrpc_message_adapter.validate_json(
                    json.dumps(answer), by_name=False)))

    streams = (to_server, from_client, to_client, from_server)
    async with anyio.create_task_group() as group:
        group.start_soon(pump)
        try:
            yield from_server, to_server
        finally:
            group.cancel_scope.cancel()
            for stream in streams:
                await stream.aclose()
