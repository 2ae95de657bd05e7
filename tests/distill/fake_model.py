"""A model server on 127.0.0.1 (port 0) speaking OpenAI's chat completions and
Anthropic's Messages API, answering from a script and recording every request."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: What the server answers a request with: (status, headers, the model's text or a body).
Reply = tuple[int, dict[str, str], Any]


def items_text(*items: dict[str, Any]) -> str:
    """The model's text for these items, as the schema asks."""
    return json.dumps({"items": list(items)})


@dataclass
class FakeModel:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    script: deque[Reply] = field(default_factory=deque)
    #: Answers a request the script does not cover (default: no items).
    default: Callable[[dict[str, Any]], Reply] = lambda _body: (200, {}, items_text())
    #: What a GET (the model list `memoryd doctor` asks for) is answered with.
    list_status: int = 200

    def say(self, text: str, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.script.append((status, headers or {}, text))

    def user_text(self, n: int = -1) -> str:
        """What request `n` sent as the conversation (either API)."""
        body = self.requests[n]["body"]
        return str(body["messages"][-1]["content"])

    def system_text(self, n: int = -1) -> str:
        body = self.requests[n]["body"]
        if "system" in body:
            return str(body["system"])
        return str(body["messages"][0]["content"])


def _body_for(path: str, text: str) -> dict[str, Any]:
    if path.endswith("/messages"):
        return {"id": "msg_1", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "usage": {"input_tokens": 120, "output_tokens": 30}}
    return {"id": "c1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30}}


@contextmanager
def serve() -> Iterator[FakeModel]:
    model = FakeModel()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                model.requests.append({"path": self.path, "body": None,
                                       "headers": dict(self.headers)})
            data = json.dumps({"data": [{"id": "small-model"}]}).encode()
            self.send_response(model.list_status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.loads(raw or b"{}")
            with lock:
                model.requests.append({"path": self.path, "body": body,
                                       "headers": dict(self.headers)})
                reply = model.script.popleft() if model.script else model.default(body)
            status, headers, payload = reply
            data = json.dumps(_body_for(self.path, payload) if status == 200
                              and isinstance(payload, str) else payload).encode()
            self.send_response(status)
            for name, value in {"content-type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    model.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()
