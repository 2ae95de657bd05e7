"""A model server that speaks the Anthropic Messages API (streaming or not) on 127.0.0.1
and records every request it receives, for the tests to read what the model was sent.

A request whose last user text holds `HOLD` is answered only after a minute: the test
kills the agent while it waits, as a person closing a terminal mid-turn would. One whose
last user text holds `RECALL <words>` is answered with a call of memoryd's `recall` tool
for those words (fetched first through Claude Code's ToolSearch when the tool is deferred);
the request that brings the tool's answer back gets a plain reply.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from distill_answer import ANSWER, asks_to_distill
from plan_answer import DECIDED, DONE, asks_to_plan, first_of_plan, next_task, plain_answer

REPLY = "OK, noted."
RECALL = "RECALL "
RECALL_TOOL = "mcp__memoryd__recall"


def _last_user_text(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content or [] if isinstance(b, dict))
    return ""


def _user_texts(body: Any) -> list[str]:
    texts: list[str] = []
    for message in body.get("messages") or [] if isinstance(body, dict) else []:
        content = message.get("content") if message.get("role") == "user" else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [b.get("text", "") for b in content if isinstance(b, dict)]
    return texts


def _answered(body: Any) -> set[str]:
    """The tool calls whose results the last user message brings back."""
    messages = body.get("messages") or [] if isinstance(body, dict) else []
    content = messages[-1].get("content") if messages else None
    return {b.get("tool_use_id", "") for b in content or [] if isinstance(b, dict)
            and b.get("type") == "tool_result"} if isinstance(content, list) else set()


def _all_answered(body: Any) -> set[str]:
    """Every tool call whose result any user message brought back."""
    found: set[str] = set()
    for message in body.get("messages") or [] if isinstance(body, dict) else []:
        content = message.get("content") if message.get("role") == "user" else None
        if isinstance(content, list):
            found |= {str(b.get("tool_use_id", "")) for b in content
                      if isinstance(b, dict) and b.get("type") == "tool_result"}
    return found


def _next_call(body: Any) -> tuple[str, str, dict[str, Any]] | None:
    """(id, tool, input) of the call a RECALL prompt makes next; None once answered."""
    said = next((text for text in _user_texts(body) if text.startswith(RECALL)), None)
    if said is None or "toolu_recall_1" in _answered(body):
        return None
    query = said.removeprefix(RECALL).strip()
    names = {str(t.get("name", "")) for t in body.get("tools") or []}
    if RECALL_TOOL in names:
        return "toolu_recall_1", RECALL_TOOL, {"query": query}
    if "ToolSearch" in names and RECALL_TOOL in json.dumps(body) and not _answered(body):
        return ("toolu_search_1", "ToolSearch",
                {"query": f"select:{RECALL_TOOL}", "max_results": 1})
    return None


def _sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


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
        self._send(404, b"{}")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self._record(body)
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self._send(200, json.dumps({"input_tokens": 10}).encode())
            return
        if "HOLD" in _last_user_text(body) and not asks_to_distill(body):
            time.sleep(60)
        message = {"id": "msg_1", "type": "message", "role": "assistant",
                   "model": body.get("model", "m") if isinstance(body, dict) else "m",
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 10, "output_tokens": 1}}
        reply = ANSWER if asks_to_distill(body) else REPLY
        call = _next_call(body)
        if call is not None:
            self._tool_call(message, *call, bool(body.get("stream")))
            return
        if any(asks_to_plan(text) for text in _user_texts(body)):
            # A plan: the decision with the first task, a task a turn, then last words.
            answered = _all_answered(body)
            task = next_task(body, answered)
            if task is not None:
                self._tool_call(message, *task, bool(body.get("stream")),
                                DECIDED if first_of_plan(answered) else None)
                return
            reply = DONE if _all_answered(body) else plain_answer()
        if isinstance(body, dict) and body.get("stream"):
            self._send(200, _sse([
                {"type": "message_start", "message": message},
                {"type": "content_block_start", "index": 0,
                 "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": reply}},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                    "stop_sequence": None},
                 "usage": {"output_tokens": 3}},
                {"type": "message_stop"}]), "text/event-stream")
            return
        self._send(200, json.dumps({**message, "content": [{"type": "text", "text": reply}],
                                    "stop_reason": "end_turn"}).encode())

    def _tool_call(self, message: dict[str, Any], ident: str, tool: str,
                   arguments: dict[str, Any], stream: bool, said: str | None = None) -> None:
        block = {"type": "tool_use", "id": ident, "name": tool, "input": arguments}
        text = [{"type": "text", "text": said}] if said else []
        if not stream:
            self._send(200, json.dumps({**message, "content": [*text, block],
                                        "stop_reason": "tool_use"}).encode())
            return
        first = len(text)
        self._send(200, _sse([
            {"type": "message_start", "message": message},
            *([{"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}},
               {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": said}},
               {"type": "content_block_stop", "index": 0}] if said else []),
            {"type": "content_block_start", "index": first,
             "content_block": {**block, "input": {}}},
            {"type": "content_block_delta", "index": first,
             "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}},
            {"type": "content_block_stop", "index": first},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                "stop_sequence": None},
             "usage": {"output_tokens": 3}},
            {"type": "message_stop"}]), "text/event-stream")

    def log_message(self, *_: object) -> None:
        pass


def serve(log_path: Path) -> tuple[str, ThreadingHTTPServer]:
    """Start the server on a free port of 127.0.0.1; its base URL and the server."""
    handler = type("Handler", (_Handler,), {"log_path": log_path})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server
