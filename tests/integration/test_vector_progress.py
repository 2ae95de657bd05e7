"""The daemon's embedding job says how fast it goes and when its backlog will be done.

A real daemon embeds through the `openai` provider against a real HTTP server on
127.0.0.1 that answers slowly, so the backlog lasts long enough to be watched.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import JsonHandler, wait_for
from test_agents import Daemon, quick_daemon

from memoryd.lifecycle.throughput import Throughput, eta_seconds

ANSWER_SECONDS = 0.25


class SlowEmbeddings(JsonHandler):
    def do_POST(self) -> None:
        body = self.read_json()
        time.sleep(ANSWER_SECONDS)
        self.send_json({"data": [
            {"index": i, "embedding": [float(len(text) % 7 + 1)] * body["dimensions"]}
            for i, text in enumerate(body["input"])]})


@pytest.fixture
def endpoint() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SlowEmbeddings)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def daemon(tmp_path: Path, endpoint: str) -> Iterator[Daemon]:
    embeddings = {"provider": "openai", "openai": {
        "base_url": endpoint, "dimensions": 8, "batch_size": 4,
        "api_key_env": "EMBED_TEST_KEY"}}
    with quick_daemon(tmp_path, memory={"embeddings": embeddings}) as found:
        found.env["EMBED_TEST_KEY"] = "sk-test-never-shown"
        yield found


def test_status_shows_the_pace_and_the_end_of_the_embedding_backlog(daemon: Daemon) -> None:
    for n in range(40):
        done = daemon.cli("remember", f"fact number {n} about the ledger service")
        assert done.returncode == 0, done.stderr
    daemon.start()
    seen: list[dict[str, Any]] = []

    def pace_shown() -> bool:
        memory = json.loads(daemon.cli("status", "--json").stdout)["memory"]
        seen.append(memory)
        return memory["embedding_per_second"] is not None and memory[
            "chunks_waiting_for_vector"] > 0

    wait_for(pace_shown, timeout=60, what="the embedding pace in status")
    memory = seen[-1]
    assert 0 < memory["embedding_per_second"] < 4 / ANSWER_SECONDS * 2
    assert memory["embedding_done_in_seconds"] == round(
        memory["chunks_waiting_for_vector"] / memory["embedding_per_second"])
    text = daemon.cli("status").stdout
    assert " a second, done in about " in text
    assert "sk-test" not in text
    wait_for(lambda: json.loads(daemon.cli("status", "--json").stdout)["memory"][
        "chunks_waiting_for_vector"] == 0, timeout=90, what="the backlog done")
    final = json.loads(daemon.cli("status", "--json").stdout)["memory"]
    assert final["embedding_done_in_seconds"] is None
    daemon.stop()


def test_the_pace_counts_working_time_only() -> None:
    pace = Throughput()
    assert pace.per_second() is None and eta_seconds(10, pace.snapshot()) is None
    pace.add(10, 2.0, at=100.0)
    pace.add(30, 2.0, at=200.0)  # an idle pause between runs does not lower the rate
    assert pace.per_second() == pytest.approx(10.0)
    assert eta_seconds(50, pace.snapshot()) == pytest.approx(5.0)
    assert eta_seconds(0, pace.snapshot()) is None
    pace.add(4, 4.0, at=400.0)  # runs older than the window no longer count
    assert pace.per_second() == pytest.approx(1.0)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_background_embedding_threads_take_only_idle_cores() -> None:
    """The threads that embed stored texts run under SCHED_IDLE: the kernel gives them a
    core only when nothing else (ingest, recall, the agents) wants it."""
    from concurrent.futures import ThreadPoolExecutor

    from memoryd.memory.embeddings.local import _lower_this_thread

    with ThreadPoolExecutor(1, initializer=_lower_this_thread) as pool:
        policy = pool.submit(os.sched_getscheduler, 0).result()
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the caller's own thread is untouched
