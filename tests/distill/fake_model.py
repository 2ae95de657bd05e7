"""A model server on 127.0.0.1 (port 0) speaking OpenAI's chat completions and
Anthropic's Messages API, answering from a script and recording every request.

A request that asks to stream (`"stream": true`) is answered as each provider streams:
server-sent events, the text in pieces (OpenAI's `chat.completion.chunk`s and
`data: [DONE]`; Anthropic's `message_start` ... `message_stop`), unless `stream` is off
(a server that ignores the flag). `pause` is slept before each piece; `cut` ends the
stream after that many pieces without its end."""

from __future__ import annotations

import json
import threading
import time
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
    #: Answer a request that asks to stream as a stream.
    stream: bool = True
    #: Characters in each streamed piece, seconds slept before each.
    piece: int = 16
    pause: float = 0.0
    #: End the stream (connection closed) after this many pieces, without its end.
    cut: int | None = None
    #: With `cut`: end the stream with an error event of this type instead.
    cut_with: str | None = None
    #: Say what each answer cost (`usage`); a server that does not leaves it out.
    usage: bool = True

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


def _without_usage(data: Any) -> Any:
    """`data` with every `usage` it holds left out (a server that never says)."""
    if isinstance(data, dict):
        return {k: _without_usage(v) for k, v in data.items() if k != "usage"}
    return data


def _events_for(path: str, text: str, piece: int) -> Iterator[tuple[str | None, Any]]:
    """(event name, data) of `text` streamed as the provider at `path` streams it."""
    pieces = [text[i:i + piece] for i in range(0, len(text), piece)] or [""]
    if path.endswith("/messages"):
        yield "message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [],
            "usage": {"input_tokens": 120, "output_tokens": 1}}}
        yield "content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}}
        yield "ping", {"type": "ping"}
        for part in pieces:
            yield "content_block_delta", {"type": "content_block_delta", "index": 0,
                                          "delta": {"type": "text_delta", "text": part}}
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                "usage": {"output_tokens": 30}}
        yield "message_stop", {"type": "message_stop"}
        return
    chunk = {"id": "c1", "object": "chat.completion.chunk"}
    yield None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    for part in pieces:
        yield None, {**chunk, "choices": [{"index": 0, "delta": {"content": part},
                                           "finish_reason": None}]}
    yield None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield None, {**chunk, "choices": [],
                 "usage": {"prompt_tokens": 120, "completion_tokens": 30}}
    yield None, "[DONE]"


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
            if status == 200 and isinstance(payload, str) and body.get("stream") \
                    and model.stream:
                self._stream(payload, headers)
                return
            data = json.dumps((_body_for(self.path, payload) if model.usage else
                               _without_usage(_body_for(self.path, payload))) if status == 200
                              and isinstance(payload, str) else payload).encode()
            self.send_response(status)
            for name, value in {"content-type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, text: str, headers: dict[str, str]) -> None:
            self.send_response(200)
            for name, value in {"content-type": "text/event-stream; charset=utf-8",
                                **headers}.items():
                self.send_header(name, value)
            self.send_header("connection", "close")  # the body ends where the stream does
            self.end_headers()
            self.close_connection = True
            # Proxies and local servers keep a slow stream open with comments and empty
            # events: neither is part of the answer.
            self.wfile.write(b": keep-alive\n\ndata:\n\n")
            pieces = 0
            for event, data in _events_for(self.path, text, model.piece):
                data = data if model.usage else _without_usage(data)
                is_piece = event == "content_block_delta" or (
                    isinstance(data, dict) and any("content" in c.get("delta", {})
                                                   for c in data.get("choices", [])))
                if is_piece:
                    if model.cut is not None and pieces >= model.cut:
                        if model.cut_with:
                            error = {"type": "error", "error": {"type": model.cut_with,
                                                                "message": "busy"}}
                            name = "event: error\n" if self.path.endswith("/messages") else ""
                            self.wfile.write(f"{name}data: {json.dumps(error)}\n\n".encode())
                        return
                    pieces += 1
                    time.sleep(model.pause)
                line = data if isinstance(data, str) else json.dumps(data)
                frame = (f"event: {event}\n" if event else "") + f"data: {line}\n\n"
                try:
                    self.wfile.write(frame.encode())
                    self.wfile.flush()
                except OSError:  # the client stopped reading
                    return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    model.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()
