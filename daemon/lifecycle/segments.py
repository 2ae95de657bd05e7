"""Cutting a session's unsynced messages into conversation segments. Pure: no I/O.

A segment is a run of consecutive messages. Cuts come:
- before a compaction boundary (what came before it is the context the agent
  just lost, so it is closed and saved first);
- at an idle gap longer than `idle_gap` between two messages' timestamps;
- when the rendered text would pass `max_chars`.

Only the last run may be open (more messages may still join it); the caller
decides when an open run is saved anyway (quiet for `sync_delay`, session
paused or ended, an explicit `memoryd sync`).

Rendering keeps tool noise out of the memory text (long tool output and base64
are clipped) and secrets are masked (`memory.redaction`), while the segment's
index range and uuids still point at every message, so provenance is complete.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from daemon.memory.models import Turn
from daemon.memory.redaction import redact
from daemon.store.sessions import StoredMessage

BOUNDARY_KINDS = frozenset({"compact_boundary", "compacted"})
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{200,}")
_WHITESPACE_RUNS = re.compile(r"\n{3,}")

TOOL_RESULT_CHARS = 300
TOOL_CALL_CHARS = 200
THINKING_CHARS = 300
MESSAGE_CHARS = 4000


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    messages: tuple[StoredMessage, ...]
    text: str
    closed: bool  # a cut follows it: no later message can join it

    @property
    def first_index(self) -> int:
        return self.messages[0].index

    @property
    def last_index(self) -> int:
        return self.messages[-1].index


def _clip(text: str, limit: int) -> str:
    text = _BASE64_RUN.sub("[base64 omitted]", text)
    if len(text) <= limit:
        return text
    return text[:limit] + f" […{len(text) - limit} more characters]"


def render_message(message: StoredMessage) -> str:
    """One message as a line of memory text: tool noise clipped, secrets masked."""
    return redact(_render(message))


def _render(message: StoredMessage) -> str:
    if message.kind in BOUNDARY_KINDS:
        return "[conversation compacted]" if message.kind == "compact_boundary" else (
            "[compacted] " + _clip(message.content, MESSAGE_CHARS))
    if message.role == "tool" or message.kind == "tool_result":
        return f"tool result: {_clip(message.content.strip(), TOOL_RESULT_CHARS)}"
    if message.kind == "thinking":
        # The agent's reasoning: useful context, but most of it is noise for recall.
        return f"{message.role} thought: {_clip(message.content.strip(), THINKING_CHARS)}"
    if message.kind == "tool_call":
        name = message.tool_name or "tool"
        return f"{message.role} used {name}: {_clip(message.content.strip(), TOOL_CALL_CHARS)}"
    text = _WHITESPACE_RUNS.sub("\n\n", message.content.strip())
    return f"{message.role}: {_clip(text, MESSAGE_CHARS)}"


#: Text that an agent or a hook put into a user's message, never the user's own words.
_INJECTED = re.compile(
    r"<(memory_context|system-reminder|command-[a-z]+|local-command-stdout)\b[^>]*>.*?</\1>",
    re.DOTALL | re.IGNORECASE)
_SPEAKERS = {"user": "user", "assistant": "assistant", "model": "assistant"}


def turns_of(messages: Sequence[StoredMessage]) -> tuple[Turn, ...]:
    """The person's and the agent's own words in `messages` (see `Turn`), secrets masked."""
    turns = []
    for message in messages:
        role = _SPEAKERS.get(message.role)
        if role is None or message.kind != "message" or message.is_sidechain:
            continue
        text = _INJECTED.sub("", message.content).strip()
        if text:
            turns.append(Turn(message.index, role, redact(text), message.timestamp))
    return tuple(turns)


def plan_segments(
    messages: Sequence[StoredMessage], *, max_chars: int, idle_gap: timedelta
) -> list[SegmentPlan]:
    """Cut consecutive messages into segments; every segment but the last is closed."""
    plans: list[SegmentPlan] = []
    current: list[StoredMessage] = []
    lines: list[str] = []
    size = 0

    def close() -> None:
        nonlocal current, lines, size
        if current:
            plans.append(SegmentPlan(tuple(current), "\n".join(lines), closed=True))
        current, lines, size = [], [], 0

    for message in messages:
        line = render_message(message)
        if current:
            previous = current[-1]
            gap = (
                message.timestamp - previous.timestamp
                if message.timestamp and previous.timestamp else timedelta(0)
            )
            if (message.kind in BOUNDARY_KINDS or gap > idle_gap
                    or size + len(line) + 1 > max_chars):
                close()
        current.append(message)
        lines.append(line)
        size += len(line) + 1
    if current:
        plans.append(SegmentPlan(tuple(current), "\n".join(lines), closed=False))
    return plans
