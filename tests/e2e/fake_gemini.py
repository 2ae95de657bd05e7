"""A model server that speaks the Gemini API (`generateContent`, `streamGenerateContent`
with SSE, `countTokens`) on 127.0.0.1 and records every request it receives, for the tests
to read what the model was sent.

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


def _last_user_text(body: Any) -> str:
    contents = body.get("contents") if isinstance(body, dict) else None
    if not isinstance(contents, list) or not contents:
        return ""
    last = contents[-1]
    if not isinstance(last, dict) or last.get("role", "user") != "user":
        return ""
    # Gemini CLI puts hook context into the user's message: what the person typed is
    # what follows it (earlier sessions' words, HOLD among them, are in that context).
    texts = [str(part.get("text", "")) for part in last.get("parts") or []
             if isinstance(part, dict)]
    return " ".join(text.rsplit("</hook_context>", 1)[-1] for text in texts
                    if not text.lstrip().startswith("<hook_context>")
                    or "</hook_context>" in text)


def _recall_tool(body: dict[str, Any]) -> str | None:
    for group in body.get("tools") or []:
        for declaration in (group.get("functionDeclarations") or []
                            if isinstance(group, dict) else []):
            name = str(declaration.get("name", ""))
            if name.endswith("recall") and "long-term memory" in str(
                    declaration.get("description", "")):
                return name
    return None


def _instance(schema: Any) -> Any:
    """A value that fits a response schema (Gemini CLI asks its router for JSON)."""
    if not isinstance(schema, dict):
        return {}
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        return {name: _instance(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    return {"integer": 1, "number": 1, "boolean": False}.get(kind, "simple")


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
        self._send(200, b'{"models": []}')

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self._record(body)
        if ":countTokens" in self.path:
            self._send(200, b'{"totalTokens": 10}')
            return
        if not isinstance(body, dict) or "generatecontent" not in self.path.lower():
            self._send(404, b"{}")
            return
        said = _last_user_text(body)
        streamed = "streamGenerateContent" in self.path
        if "HOLD" in said and streamed and not asks_to_distill(body):  # the model's turn
            time.sleep(60)
        part: dict[str, Any] = {"text": ANSWER if asks_to_distill(body)
                                else plain_answer() if asks_to_plan(said) else REPLY}
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json":
            part = {"text": json.dumps(_instance(config.get("responseJsonSchema")
                                                 or config.get("responseSchema")))}
        tool = _recall_tool(body)
        if RECALL in said and tool is not None:
            query = said.split(RECALL, 1)[1].split("\n", 1)[0].strip()
            part = {"functionCall": {"name": tool, "args": {"query": query}}}
        answer = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                  "finishReason": "STOP", "index": 0}],
                  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3,
                                    "totalTokenCount": 13},
                  "modelVersion": "gemini-fake"}
        if streamed:
            self._send(200, f"data: {json.dumps(answer)}\n\n".encode(), "text/event-stream")
            return
        self._send(200, json.dumps(answer).encode())

    def log_message(self, *_: object) -> None:
        pass


def serve(log_path: Path) -> tuple[str, ThreadingHTTPServer]:
    """Start the server on a free port of 127.0.0.1; its base URL and the server."""
    handler = type("Handler", (_Handler,), {"log_path": log_path})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server
