"""Gemini CLI chats: `~/.gemini/tmp/<project hash>/chats/session-*.json` (and `.jsonl`).

The classic `.json` file is one document rewritten whole on every update, so
its messages are recognised by `id` and stored once. The newer JSONL form
appends a message again when its tool calls finish: the last copy wins.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from memoryd.ingest.parsers.common import (
    ParsedMessage,
    RecordOutcome,
    ToolReader,
    ToolUse,
    as_str,
    clip,
    image_placeholder,
    json_text,
    no_branch,
    no_outcomes,
    utc_timestamp,
)

_ROLES = {"user": "user", "gemini": "assistant", "model": "assistant", "assistant": "assistant"}


def _parts_text(parts: object) -> str:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                texts.append(f"[tool_call {call.get('name')}] {clip(json_text(call.get('args')))}")
            elif isinstance(part.get("functionResponse"), dict):
                texts.append(clip(json_text(part["functionResponse"].get("response"))))
            elif isinstance(part.get("inlineData"), dict):
                inline = part["inlineData"]
                texts.append(image_placeholder(inline.get("mimeType"), inline.get("data")))
    return "\n".join(t for t in texts if t)


def _tool_call_text(call: dict[str, Any]) -> str:
    name = call.get("name") or "tool"
    line = f"[tool_call {name}] {clip(json_text(call.get('args')), 1000)}"
    outputs: list[str] = []
    for result in call.get("result") or []:
        if isinstance(result, dict) and isinstance(result.get("functionResponse"), dict):
            response = result["functionResponse"].get("response")
            output = response.get("output") if isinstance(response, dict) else response
            if output is not None:
                outputs.append(output if isinstance(output, str) else json_text(output))
    if outputs:
        line += "\n" + clip("\n".join(outputs))
    return line


def _function_responses(content: object) -> list[dict[str, Any]] | None:
    """The tool answers a "user" entry brings back to the model, when that is all it holds
    (Gemini CLI 0.61 records them so): they are tool results, not the person's words."""
    if not isinstance(content, list) or not content:
        return None
    answers = [part.get("functionResponse") for part in content if isinstance(part, dict)]
    if len(answers) != len(content) or not all(isinstance(a, dict) for a in answers):
        return None
    return answers  # type: ignore[return-value]


def message_from_entry(entry: dict[str, Any]) -> ParsedMessage:
    """One entry of `messages[]` (or `history[]`) as a row."""
    kind = entry.get("type", entry.get("role"))
    role = _ROLES.get(kind, "system") if isinstance(kind, str) else "system"
    content = entry.get("content", entry.get("parts"))
    answers = _function_responses(content) if role == "user" else None
    if answers is not None:
        return ParsedMessage(
            role="tool", content=_parts_text(content), kind="tool_result",
            tool_name=as_str(answers[0].get("name")), uuid=as_str(entry.get("id")),
            timestamp=utc_timestamp(entry.get("timestamp", entry.get("ts"))))
    text = content if isinstance(content, str) else _parts_text(content)
    tool_calls = [c for c in entry.get("toolCalls") or [] if isinstance(c, dict)]
    if tool_calls:
        text = "\n".join(filter(None, [text, *(_tool_call_text(c) for c in tool_calls)]))
    first_call = tool_calls[0] if tool_calls else None
    return ParsedMessage(
        role=role,
        content=text,
        kind="tool_call" if tool_calls else "message",
        tool_name=as_str(first_call.get("name")) if first_call else None,
        tool_input=json_text([{"name": c.get("name"), "args": c.get("args")} for c in tool_calls])
        if tool_calls else None,
        uuid=as_str(entry.get("id")),
        timestamp=utc_timestamp(entry.get("timestamp", entry.get("ts"))),
    )


def _is_header(record: dict[str, Any]) -> bool:
    return "sessionId" in record and "type" not in record and "messages" not in record


class GeminiRecordParser:
    """The JSONL form: a header line, message lines, `{"$set": ...}` patch lines, and
    `{"$rewindTo": id}` lines."""

    replaces_by_id = True

    def parse(self, record: dict[str, Any]) -> RecordOutcome:
        if "$set" in record:
            # A patch of the header: the session's summary is written so, once it is made
            # (`lastUpdated`, `directories` and checkpoints of `messages` say nothing new).
            patch = record["$set"]
            summary = as_str(patch.get("summary")) if isinstance(patch, dict) else None
            return RecordOutcome(summary=("summary", summary) if summary else None)
        if "$rewindTo" in record:
            # `/rewind` (an earlier prompt edited and sent again): that prompt and what came
            # after it are no longer the conversation (chatRecordingService's loader).
            return RecordOutcome(rewind_to=as_str(record["$rewindTo"]))
        if _is_header(record):
            hints = {"external_id": record["sessionId"]} if as_str(record.get("sessionId")) else {}
            summary = as_str(record.get("summary"))
            return RecordOutcome(hints=hints, summary=("summary", summary) if summary else None)
        if "type" not in record and "role" not in record:
            return RecordOutcome()
        return RecordOutcome(message=message_from_entry(record))


@dataclass(slots=True)
class DocumentEntry:
    message: ParsedMessage
    raw: bytes


@dataclass(slots=True)
class GeminiDocument:
    external_id: str | None
    summary: str | None
    entries: list[DocumentEntry]


def parse_document(data: bytes) -> GeminiDocument:
    """The classic whole-file chat; raises ValueError when it is not one."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    items = document.get("messages")
    if not isinstance(items, list):
        items = document.get("history")
    entries = [
        DocumentEntry(message_from_entry(item), orjson.dumps(item))
        for item in _dicts(items)
    ]
    return GeminiDocument(
        external_id=as_str(document.get("sessionId")),
        summary=as_str(document.get("summary")),
        entries=entries,
    )


def _dicts(items: object) -> Iterator[dict[str, Any]]:
    if isinstance(items, list):
        yield from (item for item in items if isinstance(item, dict))


def tool_uses(record: dict[str, Any], tool_name: str | None,
              tool_input: str | None) -> list[ToolUse]:
    """The calls a message made (`toolCalls`), each with its output and status."""
    calls = record.get("toolCalls")
    if not isinstance(calls, list):
        return []
    found = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        status = call.get("status")
        call_id = call.get("id")
        found.append(ToolUse(str(call.get("name") or "tool"), call.get("args"),
                             call_id if isinstance(call_id, str) else None,
                             _call_output(call), None if status is None else status != "success"))
    return found


def _call_output(call: dict[str, Any]) -> str | None:
    for item in call.get("result") or []:
        if isinstance(item, dict):
            response = (item.get("functionResponse") or {}).get("response")
            if isinstance(response, dict):
                output = response.get("output", response.get("error"))
                if isinstance(output, str):
                    return output
    display = call.get("resultDisplay")
    return display if isinstance(display, str) else None


#: What Gemini CLI's lines say of its tools (outcomes are written beside the calls).
TOOLS = ToolReader(uses=tool_uses, outcomes=no_outcomes, branch=no_branch)
