"""OpenAI Codex CLI rollouts: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`.

Rows: `response_item` messages of the user and the assistant (not the injected
environment and instruction boilerplate), tool calls and their outputs, and
`compacted` records. `event_msg` lines duplicate these for the UI and are skipped;
`developer` messages and reasoning items are not the user's or the assistant's words.
Rollouts older than 0.44 wrote the same response items without an envelope.
"""

from __future__ import annotations

from typing import Any

import orjson

from memoryd.ingest.parsers.common import (
    ParsedMessage,
    RecordOutcome,
    ToolOutcome,
    ToolReader,
    ToolUse,
    as_str,
    clip,
    image_placeholder,
    input_args,
    json_text,
    no_branch,
    utc_timestamp,
)

#: How injected context starts; such "user" messages were not typed by a person.
BOILERPLATE_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<permissions instructions>",
    "<INSTRUCTIONS>",
    # 0.16x: a skill's expansion, a `!` shell command's record, an interrupted turn's
    # notice and a spawned agent's report, all in the user's role (codex-rs `protocol`).
    "<skill>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<subagent_notification>",
    # What `/review` leaves in the thread it was asked in (0.16x labels it `unknown`).
    "<user_action>",
)


def _spawned_by(meta: dict[str, Any]) -> str | None:
    """The thread that spawned a subagent's thread (0.10x+: `source: {"subagent":
    {"thread_spawn": {"parent_thread_id": ...}}}`; a review's thread, 0.16x: `source:
    {"subagent": "review"}` with the parent's id beside it); None for a session of its own."""
    source = meta.get("source")
    sub = source.get("subagent") if isinstance(source, dict) else None
    spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
    if isinstance(spawn, dict):
        return as_str(spawn.get("parent_thread_id"))
    return as_str(meta.get("parent_thread_id")) if sub is not None else None


def _persons_parts(item: dict[str, Any]) -> list[Any] | None:
    """The parts of a user message the person wrote, by the label 0.16x gives each part
    (`content_item_kinds`, with a provenance each): a `user.*` part whose provenance is
    the user's. None when the item has no such labels (older rollouts: the prefixes say)."""
    meta = item.get("internal_chat_message_metadata_passthrough")
    kinds = meta.get("content_item_kinds") if isinstance(meta, dict) else None
    content = item.get("content")
    if not isinstance(kinds, list) or not isinstance(content, list) or len(kinds) != len(content):
        return None
    labels = meta.get("content_item_metadata") if isinstance(meta, dict) else None
    labels = labels if isinstance(labels, list) else []
    kept = []
    for at, (block, kind) in enumerate(zip(content, kinds, strict=True)):
        label = labels[at] if at < len(labels) and isinstance(labels[at], dict) else {}
        provenance = label.get("provenance")
        origin = provenance.get("type") if isinstance(provenance, dict) else None
        if isinstance(kind, str) and kind.startswith("user.") and origin in (None, "user"):
            kept.append(block)
    return kept


_CALL_TYPES = ("function_call", "custom_tool_call")
#: `function_result` is how a pre-envelope item wrote a tool's output.
_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "function_result")
_ITEM_TYPES = ("message", *_CALL_TYPES, *_OUTPUT_TYPES)
_ROLES = ("user", "assistant", "developer", "system")


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
            return self._unwrapped(record)
        timestamp = utc_timestamp(record.get("timestamp"))
        if kind == "session_meta":
            hints = {}
            if as_str(payload.get("id")):
                hints["external_id"] = payload["id"]
            if as_str(payload.get("cwd")):
                hints["project"] = payload["cwd"]
            git = payload.get("git")
            branch = as_str(git.get("branch")) if isinstance(git, dict) else None
            if branch and branch != "HEAD":
                hints["git_branch"] = branch
            parent = _spawned_by(payload)
            if parent:
                hints["parent_external_id"] = parent
            return RecordOutcome(hints=hints)
        if kind == "turn_context":
            cwd = as_str(payload.get("cwd"))
            return RecordOutcome(hints={"project": cwd} if cwd else {})
        if kind == "compacted":
            text = as_str(payload.get("message")) or ""
            content = text
            if not content:
                history = payload.get("replacement_history")
                content = f"[compacted: {len(history) if isinstance(history, list) else 0} items]"
            message = ParsedMessage(role="system", content=content, kind="compacted",
                                    timestamp=timestamp)
            return RecordOutcome(message=message, summary=("compacted", text) if text else None)
        if kind == "response_item":
            return RecordOutcome(message=self._response_item(payload, timestamp))
        return RecordOutcome()

    def _unwrapped(self, record: dict[str, Any]) -> RecordOutcome:
        """Rollouts before 0.44: a bare `{id, timestamp, instructions}` header, then response
        items written without the `{timestamp, type, payload}` envelope, and state lines."""
        kind = record.get("type")
        if kind in _ITEM_TYPES or (kind is None and record.get("role") in _ROLES):
            timestamp = utc_timestamp(record.get("timestamp", record.get("created_at")))
            return RecordOutcome(message=self._response_item(record, timestamp))
        if kind is None and "record_type" not in record and as_str(record.get("id")):
            return RecordOutcome(hints={"external_id": record["id"]})
        return RecordOutcome()

    def _response_item(self, item: dict[str, Any], timestamp: str | None) -> ParsedMessage | None:
        item_type = item.get("type", "message")
        if item_type == "message":
            role = item.get("role")
            text = _content_text(item.get("content", item.get("message")))
            if role == "assistant":
                return ParsedMessage(role="assistant", content=text, timestamp=timestamp)
            if role != "user":
                return None
            persons = _persons_parts(item)
            if persons is not None:  # labelled: only what the person wrote
                text = _content_text(persons)
                return ParsedMessage(role="user", content=text, timestamp=timestamp) if (
                    text.strip()) else None
            if not text.lstrip().startswith(BOILERPLATE_PREFIXES):
                return ParsedMessage(role="user", content=text, timestamp=timestamp)
            return None
        if item_type in _CALL_TYPES:
            function = item.get("function")
            name = as_str(item.get("name")) or (
                as_str(function.get("name")) if isinstance(function, dict) else None
            ) or "tool"
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
        if item_type in _OUTPUT_TYPES:
            return ParsedMessage(
                role="tool",
                content=_tool_output_text(item.get("output", item.get("result"))),
                kind="tool_result",
                tool_name=as_str(item.get("name")),
                timestamp=timestamp,
            )
        return None


def tool_uses(record: dict[str, Any], tool_name: str | None,
              tool_input: str | None) -> list[ToolUse]:
    """The call a rollout line made, with its `call_id` (a custom tool's input as written)."""
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return []
    call_id = payload.get("call_id")
    if payload.get("type") == "custom_tool_call":
        return [ToolUse(tool_name or "tool", payload.get("input"), call_id)]
    return [ToolUse(tool_name or "tool", input_args(tool_input), call_id)]


def tool_outcomes(record: dict[str, Any], content: str) -> list[ToolOutcome]:
    """A call's output, with its `call_id` and, where the output's metadata says, whether
    the command exited non-zero."""
    payload = record.get("payload")
    if not isinstance(payload, dict):
        return []
    output = payload.get("output")
    failed = None
    decoded = (input_args(output)
               if isinstance(output, str) and output.startswith("{") else None)
    if isinstance(decoded, dict) and isinstance(decoded.get("metadata"), dict):
        code = decoded["metadata"].get("exit_code")
        failed = code != 0 if isinstance(code, int) else None
    return [ToolOutcome(payload.get("call_id"), content, failed)]


#: What Codex's rollout lines say of its tools.
TOOLS = ToolReader(uses=tool_uses, outcomes=tool_outcomes, branch=no_branch)
