"""A state is logged once when it begins and once when it ends (issue 32.13): an
embedding endpoint that is down, then back, through a real daemon and a real HTTP
server on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import daemon_env, memoryd_command, wait_for, wait_ready, write_config

DIMENSIONS = 8


class _Endpoint(BaseHTTPRequestHandler):
    up = False

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not type(self).up:
            self.send_response(503)
            self.end_headers()
            return
        data = [{"index": i, "embedding": [1.0] + [0.0] * (DIMENSIONS - 1)}
                for i in range(len(body["input"]))]
        answer = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, type[_Endpoint]]]:
    handler = type("Endpoint", (_Endpoint,), {"up": False})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def test_an_embedding_endpoint_down_then_back_is_said_once_each(
        tmp_path: Path, endpoint: tuple[str, type[_Endpoint]]) -> None:
    url, handler = endpoint
    root = tmp_path / "claude" / "-p"
    root.mkdir(parents=True)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    (root / "s.jsonl").write_text("".join(json.dumps({
        "type": "user", "uuid": f"u{i}", "sessionId": "s", "cwd": "/p", "timestamp": now,
        "message": {"role": "user", "content": f"the deploy checklist item {i}"}}) + "\n"
        for i in range(3)))
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, {"claude": tmp_path / "claude"},
                          sync_delay=0, sync_max_lag="1s", sync_check_interval="0.5s",
                          log_format="json", memory={"embeddings": {
                              "provider": "openai", "fetch_model": False,
                              "openai": {"base_url": url, "dimensions": DIMENSIONS,
                                         "api_key_env": ""}}})
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                env=daemon_env(tmp_path), stdout=subprocess.DEVNULL,
                                stderr=log)
    try:
        wait_ready(state, proc.pid)

        def events() -> list[str]:
            found = []
            for line in log_path.read_text().splitlines():
                try:
                    found.append(json.loads(line)["event"])
                except (ValueError, KeyError, TypeError):
                    continue
            return found

        wait_for(lambda: "embedding_failed" in events(), timeout=30, what="a failed embedding")
        time.sleep(12)  # two more tries of the embedding job, at least
        for _ in range(3):
            recalled = subprocess.run(
                memoryd_command("--config", str(config), "recall", "deploy checklist"),
                env=daemon_env(tmp_path), capture_output=True, text=True, timeout=60)
            assert recalled.returncode == 0, recalled.stderr
        seen = events()
        assert seen.count("embedding_failed") == 1, seen
        assert "embeddings_retry" not in seen
        handler.up = True
        wait_for(lambda: "embedding_resumed" in events(), timeout=30, what="embedding back")
        assert events().count("embedding_resumed") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def test_a_backfill_hands_its_memory_back_once_when_it_is_over(tmp_path: Path) -> None:
    """After a backfill (here 1,200 sessions, each a segment) the daemon hands SQLite's
    page caches and the freed heap back once, when recovery has gone quiet: not during
    the backfill, and not again on every quiet pass after it. Restarted, it does so once
    after its start-up (which reads every file's state and every file)."""
    from helpers import unsynced_messages

    old = "2026-01-01T00:00:00.000Z"
    for n in range(1200):
        folder = tmp_path / "claude" / f"-p{n % 6}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"s{n}.jsonl").write_text("".join(json.dumps({
            "type": role, "uuid": f"u{n}-{i}", "sessionId": f"s{n}", "cwd": "/p",
            "timestamp": old, "message": {"role": role, "content": f"step {i} of task {n}"}})
            + "\n" for i, role in enumerate(("user", "assistant"))))
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, {"claude": tmp_path / "claude"},
                          sync_delay=0, sync_max_lag="1s", sync_check_interval="0.5s",
                          log_format="json", memory={"embeddings": {"provider": "none"}})
    log_path = tmp_path / "daemon.log"

    def start() -> subprocess.Popen[bytes]:
        with log_path.open("wb") as log:
            return subprocess.Popen(memoryd_command("--config", str(config), "run"),
                                    env=daemon_env(tmp_path), stdout=subprocess.DEVNULL,
                                    stderr=log)

    proc = start()
    try:
        wait_ready(state, proc.pid)

        def records() -> list[dict[str, object]]:
            found = []
            for line in log_path.read_text().splitlines():
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
            return found

        wait_for(lambda: any(r.get("event") == "memory_released" for r in records()),
                 timeout=90, what="memory handed back")
        assert unsynced_messages(state / "memoryd.db") == 0
        time.sleep(3)  # several quiet passes more
        seen = [r for r in records() if r.get("event") in ("synced", "memory_released")]
        assert [r["event"] for r in seen].count("memory_released") == 1
        released = [r["event"] for r in seen].index("memory_released")
        saved = sum(int(str(r.get("segments", 0))) for r in seen[:released])
        assert saved >= 1200 and all(r["event"] != "synced" or not r.get("segments")
                                     for r in seen[released:])

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        proc = start()
        wait_ready(state, proc.pid)
        wait_for(lambda: any(r.get("event") == "memory_released" for r in records()),
                 timeout=60, what="memory handed back after start-up")
        time.sleep(3)
        assert [r.get("event") for r in records()].count("memory_released") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
