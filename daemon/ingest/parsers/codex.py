"""OpenAI Codex CLI rollouts: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`.

Rows: `response_item` messages of the user and the assistant (not the injected
environment and instruction boilerplate), tool calls and their outputs, and
`compacted` records. `event_msg` lines duplicate these for the UI and are skipped.
"""

from __future__ import annotations

from typing import Any

import orjson

from daemon.ingest.parsers.base import (
    ParsedMessage,
    RecordOutcome,
    as_str,
    clip,
    image_placeholder,
    json_text,
    utc_timestamp,
)

#: How injected context starts; such "user" messages were not typed by a person.
BOILERPLATE_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<permissions instructions>",
    "<INSTRUCTIONS>",
)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("input_image", "image"):
            url = block.get("image_url")
            if isinstance(url, str) and url.startswith("data:"):
                media = url[5:].split(";", 1)[0]
                parts.append(image_placeholder(media, url.split(",", 1)[-1]))
            else:
                parts.append("[image]")
        elif isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(p for p in parts if p)


def _tool_output_text(output: object) -> str:
    if isinstance(output, str):
        # Codex 0.47 wraps outputs as a JSON string {"output": ..., "metadata": ...}.
        if output.startswith("{"):
            try:
                decoded = orjson.loads(output)
            except orjson.JSONDecodeError:
                decoded = None
            if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
                return clip(decoded["output"])
        return clip(output)
    if isinstance(output, list):
        return clip(_content_text(output))
    return clip(json_text(output)) if output is not None else ""


def _arguments_json(arguments: object) -> str:
    if isinstance(arguments, str):
        try:
            return json_text(orjson.loads(arguments))
        except orjson.JSONDecodeError:
            return json_text(arguments)
    return json_text(arguments)


class CodexParser:
    replaces_by_id = False

    def parse(self, record: dict[str, Any]) -> RecordOutcome:
        kind = record.get("type")
        payload = record.get("payload")
        if not isinstance(payload, dict):
            return RecordOutcome()
        timestamp = utc_timestamp(record.get("timestamp"))
        if kind == "session_meta":
            hints = {}
            if as_str(payload.get("id")):
                hints["external_id"] = payload["id"]
            if as_str(payload.get("cwd")):
                hints["project"] = payload["cwd"]
            return RecordOutcome(hints=hints)
        if kind == "turn_context":
            cwd = as_str(payload.get("cwd"))
            return RecordOutcome(hints={"project": cwd} if cwd else {})
        if kind == "compacted":
            text = as_str(payload.get("message")) or ""
            message = ParsedMessage(role="system", content=text, kind="compacted",
                                    timestamp=timestamp)
            return RecordOutcome(message=message, summary=("compacted", text) if text else None)
        if kind == "response_item":
            return RecordOutcome(message=self._response_item(payload, timestamp))
        return RecordOutcome()

    def _response_item(self, item: dict[str, Any], timestamp: str | None) -> ParsedMessage | None:
        item_type = item.get("type")
        if item_type == "message":
            role = item.get("role")
            text = _content_text(item.get("content"))
            if role == "assistant":
                return ParsedMessage(role="assistant", content=text, timestamp=timestamp)
            if role == "user" and not text.lstrip().startswith(BOILERPLATE_PREFIXES):
                return ParsedMessage(role="user", content=text, timestamp=timestamp)
            return None
        if item_type in ("function_call", "custom_tool_call"):
            name = as_str(item.get("name")) or "tool"
            raw_input = item.get("arguments") if item_type == "function_call" else item.get("input")
            tool_input = _arguments_json(raw_input)
            return ParsedMessage(
                role="assistant",
                content=f"[tool_call {name}] {clip(tool_input)}",
                kind="tool_call",
                tool_name=name,
                tool_input=tool_input,
                timestamp=timestamp,
            )
        if item_type in ("function_call_output", "custom_tool_call_output"):
            return ParsedMessage(
                role="tool",
                content=_tool_output_text(item.get("output")),
                kind="tool_result",
                timestamp=timestamp,
            )
        return None
