"""The optional `/rerank` provider through the real CLI, against a real HTTP server on
127.0.0.1 (port 0) speaking the common rerank shape: it reorders recall's candidates; a
reranker that fails or answers nonsense leaves recall as it was; the key never shows."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import JsonHandler, daemon_env, memoryd_command, write_config

KEY = "rr-secret-key-9876543210"


class FakeReranker:
    """Scores each document by how often it says "banana" (a stand-in cross-encoder)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[str] = []
        self.status = 200
        self.shape = "cohere"
        reranker = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.read_json()
                reranker.requests.append(body)
                reranker.headers.append(self.headers.get("Authorization", ""))
                scores = [doc.lower().count("banana") for doc in body["documents"]]
                ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
                if reranker.shape == "tei":
                    answer: Any = [{"index": i, "score": scores[i]} for i in ranked]
                elif reranker.shape == "nonsense":
                    answer = {"results": [{"index": 99, "relevance_score": 1}]}
                else:
                    answer = {"results": [{"index": i, "relevance_score": scores[i]}
                                          for i in ranked]}
                self.send_json(answer, reranker.status)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def reranker() -> Iterator[FakeReranker]:
    fake = FakeReranker()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _cli(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          capture_output=True, text=True, timeout=120)


def test_recall_is_reordered_by_the_reranker_and_survives_its_failures(
        tmp_path: Path, reranker: FakeReranker) -> None:
    env = daemon_env(tmp_path)
    env["MEMORYD_RERANK_API_KEY"] = KEY
    state = tmp_path / "state"
    plain = write_config(tmp_path / "plain.yaml", state, {})
    reranked = write_config(tmp_path / "rerank.yaml", state, {}, log_level="debug",
                            memory={"rerank": {"provider": "http", "base_url": reranker.url,
                                               "model": "bge-reranker-v2-m3"}})
    for text in ("the fruit order: apples, pears and plums for the fruit stand",
                 "the fruit order: one banana", "fruit order notes"):
        assert _cli(plain, env, "remember", text).returncode == 0

    def first(config: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
        done = _cli(config, env, "--log-format", "json", "recall", "fruit order", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)[0]["content"], done

    assert "banana" not in first(plain)[0]
    top, done = first(reranked)
    assert "banana" in top
    (request,) = reranker.requests
    assert request["query"] == "fruit order" and request["model"] == "bge-reranker-v2-m3"
    assert len(request["documents"]) == 3 and reranker.headers == [f"Bearer {KEY}"]

    reranker.shape = "tei"
    assert "banana" in first(reranked)[0]
    for trouble in ("status", "nonsense"):
        if trouble == "status":
            reranker.status = 503
        else:
            reranker.status, reranker.shape = 200, "nonsense"
        top, done = first(reranked)
        assert "banana" not in top  # recall as it was
        assert "rerank_failed" in done.stderr and KEY not in done.stderr + done.stdout


def test_a_reranker_without_a_url_is_a_configuration_error(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {},
                          memory={"rerank": {"provider": "http"}})
    done = _cli(config, daemon_env(tmp_path), "recall", "x")
    assert done.returncode == 78 and "memory.rerank" in done.stderr
