"""What every transcript parser returns, and the helpers they share."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

# What a parser returns is the value the store keeps (defined there: store is the lower room).
from memoryd.store.batches import ParsedMessage as ParsedMessage

#: How much of a tool's input or output goes into a message's readable `content`.
CONTENT_TOOL_LIMIT = 4000
CLIP_BACKTRACK = 200  # how far back `clip` looks for a whitespace to cut at


@dataclass(slots=True)
class RecordOutcome:
    """What one transcript record contributes."""

    message: ParsedMessage | None = None
    summary: tuple[str, str] | None = None  # (kind, text)
    hints: dict[str, str] = field(default_factory=dict)  # external_id, project, parent_external_id
    #: The message a rewind goes back to (Gemini's `$rewindTo`): it and every message
    #: written before this line after it are discarded.
    rewind_to: str | None = None

    @property
    def skipped(self) -> bool:
        return self.message is None


class RecordParser(Protocol):
    """Turns one decoded JSON object of a line-oriented transcript into an outcome."""

    #: a record that repeats an earlier id replaces it (Gemini JSONL: the last copy wins)
    replaces_by_id: bool

    def parse(self, record: dict[str, Any]) -> RecordOutcome: ...


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call as its agent's line records it: its name, arguments and id, and, where
    the agent writes the outcome beside the call (Gemini CLI), its output and whether it
    failed."""

    name: str
    args: Any
    call_id: str | None
    output: str | None = None
    failed: bool | None = None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's result as its agent's line records it: the call it answers, its text and
    whether it failed (None: the line does not say)."""

    call_id: str | None
    text: str
    failed: bool | None


@dataclass(frozen=True, slots=True)
class ToolReader:
    """What an agent's lines say of its tools beyond the stored message: `uses(record,
    tool_name, tool_input)` and `outcomes(record, content)` ([] when the line says nothing
    more than the message), and the git branch a line names (`branch`)."""

    uses: Callable[[dict[str, Any], str | None, str | None], list[ToolUse]]
    outcomes: Callable[[dict[str, Any], str], list[ToolOutcome]]
    branch: Callable[[dict[str, Any]], str | None]


def no_uses(record: dict[str, Any], tool_name: str | None,
            tool_input: str | None) -> list[ToolUse]:
    return []


def no_outcomes(record: dict[str, Any], content: str) -> list[ToolOutcome]:
    return []


def no_branch(record: dict[str, Any]) -> str | None:
    return None


def input_args(tool_input: str | None) -> Any:
    """A stored tool input (JSON text) as its value; None when it is not JSON."""
    if not tool_input:
        return None
    try:
        return orjson.loads(tool_input)
    except orjson.JSONDecodeError:
        return None


_CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", re.ASCII)


def utc_timestamp(value: object) -> str | None:
    """An ISO-8601 UTC string (`...Z`, milliseconds) from what transcripts write, else None."""
    try:
        if isinstance(value, str) and value:
            parsed = datetime.fromisoformat(value)
            if _CANONICAL.fullmatch(value):
                return value  # valid, and already in the form stored (most transcripts)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            seconds = value / 1000 if value > 1e11 else value
            parsed = datetime.fromtimestamp(seconds, UTC)
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_text(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return orjson.dumps(str(value)).decode()


def clip(text: str, limit: int = CONTENT_TOOL_LIMIT) -> str:
    """`text` cut to about `limit` characters, at a whitespace: cutting inside a word
    could leave the start of a key (`sk-ant-api03-Ab`) too short for any mask to know."""
    if len(text) <= limit:
        return text
    cut = limit
    while cut > limit - CLIP_BACKTRACK and cut > 0 and not text[cut - 1].isspace():
        cut -= 1
    if cut <= limit - CLIP_BACKTRACK or cut == 0:
        cut = limit  # one very long token: dropped whole below rather than cut
        head = text[:cut].rsplit(None, 1)[0] if " " in text[:cut] else ""
        return f"{head}… [{len(text) - len(head)} more characters]"
    return f"{text[:cut]}… [{len(text) - cut} more characters]"


def human_size(n_bytes: int) -> str:
    if n_bytes >= 1 << 20:
        return f"{n_bytes / (1 << 20):.1f} MB"
    if n_bytes >= 1 << 10:
        return f"{round(n_bytes / 1024)} KB"
    return f"{n_bytes} B"


def image_placeholder(media_type: object, data: object) -> str:
    """`[image/png 84 KB]` for an inline base64 image, without keeping its bytes."""
    kind = media_type if isinstance(media_type, str) and media_type else "image"
    if isinstance(data, str) and data:
        return f"[{kind} {human_size(len(data) * 3 // 4)}]"
    return f"[{kind}]"


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
