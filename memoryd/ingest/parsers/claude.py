"""Claude Code transcripts: `~/.claude/projects/<project>/<session>.jsonl`.

One row per `user` and `assistant` line and per `system` compact_boundary;
`summary` lines and compaction summaries feed the session's summary; progress,
snapshots, queue operations and other bookkeeping are skipped.
"""

from __future__ import annotations

from typing import Any

from memoryd.ingest.parsers.common import (
    ParsedMessage,
    RecordOutcome,
    ToolOutcome,
    ToolReader,
    ToolUse,
    as_str,
    clip,
    image_placeholder,
    json_text,
    utc_timestamp,
)

_THINKING_BLOCKS = ("thinking", "redacted_thinking")



#: Who wrote a user-role line, as Claude Code 2.1 records it (`origin.kind`): a person
#: ("human"), or the harness (a task's notification, a peer's or a channel's message, an
#: automatic continuation), which is never what the person asked.
_TYPED_ORIGINS = ("human",)


def _not_typed(record: dict[str, Any]) -> bool:
    origin = record.get("origin")
    kind = origin.get("kind") if isinstance(origin, dict) else None
    return isinstance(kind, str) and kind not in _TYPED_ORIGINS

def _block_text(block: object) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "thinking":
        thinking = block.get("thinking")
        return f"[thinking] {thinking}" if thinking else ""
    if kind == "redacted_thinking":
        return "[redacted thinking]"
    if kind == "tool_use":
        name = block.get("name") or "tool"
        return f"[tool_use {name}] {clip(json_text(block.get('input')))}"
    if kind == "tool_result":
        return _tool_result_text(block)
    if kind == "image":
        source = block.get("source")
        if isinstance(source, dict):
            return image_placeholder(source.get("media_type"), source.get("data"))
        return "[image]"
    if kind == "document":
        return "[document]"
    return f"[{kind}]" if isinstance(kind, str) else ""


def _tool_result_text(block: dict[str, Any]) -> str:
    inner = block.get("content")
    if isinstance(inner, list):
        text = "\n".join([text for part in inner if (text := _block_text(part))])
    elif inner is None:
        text = ""
    else:
        text = str(inner)
    prefix = "[tool error] " if block.get("is_error") is True else ""
    return prefix + clip(text)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if len(content) == 1:  # most messages are one block
            return _block_text(content[0])
        return "\n".join([text for block in content if (text := _block_text(block))])
    return ""


def _is_tool_results(content: object) -> bool:
    if not isinstance(content, list) or not content:
        return False
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            return False
    return True


def _is_thinking(content: object) -> bool:
    """Reasoning only: kept (marked `[thinking]`) but told apart from what the model said."""
    if not isinstance(content, list) or not content:
        return False
    for block in content:
        if not isinstance(block, dict) or block.get("type") not in _THINKING_BLOCKS:
            return False
    return True


def _first_tool_use(content: object) -> dict[str, Any] | None:
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                return block
    return None


class ClaudeParser:
    replaces_by_id = False

    def parse(self, record: dict[str, Any]) -> RecordOutcome:
        kind = record.get("type")
        cwd = as_str(record.get("cwd"))
        hints = {"project": cwd} if cwd else {}
        branch = as_str(record.get("gitBranch"))
        if branch and branch != "HEAD":
            hints["git_branch"] = branch
        if kind == "user" or kind == "assistant":
            summary = (self._compact_summary(record)
                       if record.get("isCompactSummary") is True else None)
            return RecordOutcome(self._message(kind, record), summary, hints)
        if kind == "summary":
            text = as_str(record.get("summary"))
            return RecordOutcome(summary=("summary", text) if text else None, hints=hints)
        if kind == "system" and record.get("subtype") == "compact_boundary":
            message = ParsedMessage(
                role="system",
                content=as_str(record.get("content")) or "Conversation compacted",
                kind="compact_boundary",
                tool_input=json_text(record.get("compactMetadata"))
                if record.get("compactMetadata") is not None else None,
                uuid=as_str(record.get("uuid")),
                timestamp=utc_timestamp(record.get("timestamp")),
                is_sidechain=record.get("isSidechain") is True,
            )
            return RecordOutcome(message=message, hints=hints)
        return RecordOutcome(hints=hints)

    def _message(self, kind: str, record: dict[str, Any]) -> ParsedMessage:
        envelope = record.get("message")
        content = envelope.get("content") if isinstance(envelope, dict) else envelope
        role = kind
        message_kind = "message"
        tool_name = tool_input = None
        if kind == "user" and _is_tool_results(content):
            role, message_kind = "tool", "tool_result"
        elif kind == "user" and record.get("isCompactSummary") is True:
            message_kind = "compact_summary"
        elif kind == "user" and (record.get("isMeta") is True or _not_typed(record)):
            # Written in the user's name by Claude Code (a slash command's expanded prompt,
            # a caveat), not typed by them: rendered alike, but never taken as a request.
            message_kind = "injected"
        elif kind == "assistant" and record.get("isApiErrorMessage") is True:
            # Written in the agent's name by Claude Code when a request to the model's API
            # failed ("API Error: 400 ..."): not what the agent said.
            message_kind = "api_error"
        elif kind == "assistant":
            tool_use = _first_tool_use(content)
            if tool_use is not None:
                message_kind = "tool_call"
                tool_name = as_str(tool_use.get("name"))
                tool_input = json_text(tool_use.get("input"))
            elif _is_thinking(content):
                message_kind = "thinking"
        return ParsedMessage(
            role=role,
            content=_content_text(content),
            kind=message_kind,
            tool_name=tool_name,
            tool_input=tool_input,
            uuid=as_str(record.get("uuid")),
            timestamp=utc_timestamp(record.get("timestamp")),
            is_sidechain=record.get("isSidechain") is True,
        )

    @staticmethod
    def _compact_summary(record: dict[str, Any]) -> tuple[str, str] | None:
        if record.get("isCompactSummary") is not True:
            return None
        envelope = record.get("message")
        content = envelope.get("content") if isinstance(envelope, dict) else None
        text = _content_text(content)
        return ("compact_summary", text) if text else None


def tool_uses(record: dict[str, Any], tool_name: str | None,
              tool_input: str | None) -> list[ToolUse]:
    """The tool call a line made (one `tool_use` block a line), with its id."""
    envelope = record.get("message")
    content = envelope.get("content") if isinstance(envelope, dict) else None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                call_id = block.get("id")
                return [ToolUse(str(block.get("name") or "tool"), block.get("input"),
                                call_id if isinstance(call_id, str) else None)]
    return []


def tool_outcomes(record: dict[str, Any], content: str) -> list[ToolOutcome]:
    """Each `tool_result` block of a line: the call it answers, its text, `is_error`."""
    envelope = record.get("message")
    blocks = envelope.get("content") if isinstance(envelope, dict) else None
    found = []
    for block in blocks if isinstance(blocks, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            body = block.get("content")
            if isinstance(body, list):
                body = "\n".join(b.get("text", "") for b in body if isinstance(b, dict))
            found.append(ToolOutcome(block.get("tool_use_id"),
                                     body if isinstance(body, str) else "",
                                     True if block.get("is_error") is True else None))
    return found


def git_branch(record: dict[str, Any]) -> str | None:
    """The branch a line was written on (`gitBranch`), unless detached or unknown."""
    branch = record.get("gitBranch")
    if isinstance(branch, str) and branch not in ("", "HEAD") and not branch.startswith("["):
        return branch
    return None


#: What Claude Code's lines say of its tools.
TOOLS = ToolReader(uses=tool_uses, outcomes=tool_outcomes, branch=git_branch)
