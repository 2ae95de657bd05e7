"""The `openai` provider against a real HTTP server on 127.0.0.1 (port 0)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
from helpers import JsonHandler
from structlog.testing import capture_logs

from memoryd.memory.embeddings import EmbeddingError, EmbeddingUnavailable
from memoryd.memory.embeddings.openai import OpenAIEmbedder, OpenAIOptions

KEY = "sk-test-SECRET-never-shown"


@dataclass
class Script:
    """What the fake endpoint answers: a queue of status codes, then 200s."""

    statuses: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


class Handler(JsonHandler):
    script: Script

    def do_POST(self) -> None:
        body = self.read_json()
        self.script.requests.append(body)
        self.script.headers.append(dict(self.headers))
        status = self.script.statuses.pop(0) if self.script.statuses else 200
        if status != 200:
            self.send_json({"error": {"message": f"echo {KEY}"}}, status)
            return
        dims = body["dimensions"]
        data = [{"index": i, "embedding": [float(len(t))] + [1.0] * (dims - 1)}
                for i, t in enumerate(body["input"])]
        self.send_json({"data": list(reversed(data))})


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    """A ThreadingHTTPServer answering /v1/embeddings as scripted."""
    script = Script()
    handler = type("ScriptedHandler", (Handler,), {"script": script})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def embedder(base_url: str, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> OpenAIEmbedder:
    monkeypatch.setenv("MEMORYD_TEST_EMBED_KEY", KEY)
    options = OpenAIOptions(base_url=base_url, model="m", dimensions=4,
                            api_key_env="MEMORYD_TEST_EMBED_KEY", batch_size=2,
                            timeout=5.0, retry_attempts=3, retry_wait_max=0.05, **kw)
    return OpenAIEmbedder(options)


def test_batches_and_keeps_order(server: tuple[str, Script],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Five texts go as batches of 2, 2, 1; vectors come back in input order, unit length."""
    url, script = server
    e = embedder(url, monkeypatch)
    vectors = e.embed(["a", "bb", "ccc", "dddd", "eeeee"])
    assert [len(r["input"]) for r in script.requests] == [2, 2, 1]
    assert script.requests[0]["model"] == "m" and script.requests[0]["dimensions"] == 4
    assert script.headers[0]["Authorization"] == f"Bearer {KEY}"
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert list(np.argsort(vectors[:, 0])) == [0, 1, 2, 3, 4]
    e.close()


def test_retries_429_and_5xx(server: tuple[str, Script],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429 and a 503 are retried and the batch then succeeds."""
    url, script = server
    script.statuses = [429, 503]
    e = embedder(url, monkeypatch)
    assert e.embed(["one"]).shape == (1, 4)
    assert len(script.requests) == 3
    e.close()


def test_persistent_5xx_is_transient_and_keyless(server: tuple[str, Script],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """After the last attempt a 500 raises EmbeddingUnavailable; no key in text or logs."""
    url, script = server
    script.statuses = [500, 500, 500]
    e = embedder(url, monkeypatch)
    with capture_logs() as logs, pytest.raises(EmbeddingUnavailable) as raised:
        e.embed(["one"])
    assert raised.value.transient and len(script.requests) == 3
    assert KEY not in str(raised.value) and KEY not in repr(logs)
    assert any(event["event"] == "embeddings_retry" for event in logs)
    e.close()


def test_client_errors_are_not_retried(server: tuple[str, Script],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A 401 fails at once, as a permanent EmbeddingError without the key."""
    url, script = server
    script.statuses = [401]
    e = embedder(url, monkeypatch)
    with pytest.raises(EmbeddingError) as raised:
        e.embed(["one"])
    assert not isinstance(raised.value, EmbeddingUnavailable)
    assert len(script.requests) == 1 and KEY not in str(raised.value)
    e.close()


def test_unreachable_endpoint_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused connection is EmbeddingUnavailable (retried later), naming no key."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    e = embedder(f"http://127.0.0.1:{port}/v1", monkeypatch)
    with pytest.raises(EmbeddingUnavailable) as raised:
        e.embed(["one"])
    assert KEY not in str(raised.value)
    e.close()
