"""A model server that speaks the OpenAI Responses API (streaming) on 127.0.0.1 and
records every request it receives, for the tests to read what the model was sent.

Scripted as `fake_anthropic` is: a request whose last user text holds `HOLD` is answered
only after a minute (the test kills the agent while it waits); one whose last user text
holds `RECALL <words>` is answered with a call of memoryd's `recall` tool for those words,
and the request that brings the tool's answer back gets a plain reply.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from distill_answer import ANSWER, asks_to_distill
from plan_answer import asks_to_plan, plain_answer

REPLY = "OK, noted."
RECALL = "RECALL "


def _last_item(body: Any) -> dict[str, Any]:
    items = body.get("input") if isinstance(body, dict) else None
    return items[-1] if isinstance(items, list) and items and isinstance(items[-1], dict) else {}


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _recall_tool(body: dict[str, Any]) -> tuple[str | None, str] | None:
    """memoryd's recall tool as this request offers it: (namespace, name)."""
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace" and "memoryd" in str(tool.get("name")):
            for inner in tool.get("tools") or []:
                if inner.get("name") == "recall":
                    return str(tool["name"]), "recall"
        if tool.get("type") == "function" and str(tool.get("name", "")).endswith("recall") \
                and "memoryd" in str(tool.get("name")):
            return None, str(tool["name"])
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path: Path

    def _record(self, body: Any) -> None:
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(json.dumps({"path": self.path, "body": body, "at": time.time()}) + "\n")

    def _send(self, status: int, data: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._record(None)
        self._send(200, b'{"data": [], "models": []}')

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self._record(body)
        if not isinstance(body, dict) or not self.path.endswith("/responses"):
            self._send(404, b"{}")
            return
        last = _last_item(body)
        said = _text(last) if last.get("role") == "user" else ""
        if "HOLD" in said and not asks_to_distill(body):
            time.sleep(60)
        item: dict[str, Any] = {"type": "message", "role": "assistant", "id": "msg_1",
                                "content": [{"type": "output_text",
                                             "text": ANSWER if asks_to_distill(body)
                                             else plain_answer() if asks_to_plan(said)
                                             else REPLY}]}
        tool = _recall_tool(body)
        if RECALL in said and tool is not None:
            namespace, name = tool
            query = said.split(RECALL, 1)[1].strip()
            item = {"type": "function_call", "id": "fc_1", "call_id": "call_recall_1",
                    "name": name, "arguments": json.dumps({"query": query})}
            if namespace:
                item["namespace"] = namespace
        usage = {"input_tokens": 10, "input_tokens_details": None, "output_tokens": 3,
                 "output_tokens_details": None, "total_tokens": 13}
        self._send(200, _sse([
            {"type": "response.created", "response": {"id": "resp_1"}},
            {"type": "response.output_item.done", "item": item},
            {"type": "response.completed", "response": {"id": "resp_1", "usage": usage}}]),
            "text/event-stream")

    def log_message(self, *_: object) -> None:
        pass


def serve(log_path: Path) -> tuple[str, ThreadingHTTPServer]:
    """Start the server on a free port of 127.0.0.1; its base URL and the server."""
    handler = type("Handler", (_Handler,), {"log_path": log_path})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server
