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
are clipped) and secrets are masked (`memory.privacy.redaction`), while the segment's
index range and uuids still point at every message, so provenance is complete.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from memoryd.lifecycle.agent_tools import Roots, describe_input, failure_of
from memoryd.lifecycle.markup import api_error_text, without_injected
from memoryd.memory.models import Turn
from memoryd.memory.privacy import clipping
from memoryd.memory.privacy.redaction import redact
from memoryd.store.copies import Copies
from memoryd.store.sessions import StoredMessage

BOUNDARY_KINDS = frozenset({"compact_boundary", "compacted"})
_BASE64_MIN = 200
_BASE64_RUN = re.compile(rf"[A-Za-z0-9+/=]{{{_BASE64_MIN},}}")
#: The start of a run of base64 characters long enough to omit, tried only where a run
#: begins (the lookbehind): each run is read once, where a search for _BASE64_RUN starts
#: again at every character of every word. (A possessive pattern read it as fast, but
#: Python 3.11.2, Debian 12's, matches possessive repeats wrongly: runs were kept.)
_LONG_RUN = re.compile(rf"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/=]{{{_BASE64_MIN}}}")
# Three newlines as a literal start, which the regex engine looks for as fast as `in`:
# `\n{3,}` was tried at every character (0.2 s for a 20,000-message session, now 0.01).
_WHITESPACE_RUNS = re.compile(r"\n\n\n+")

TOOL_RESULT_CHARS = 300
TOOL_CALL_CHARS = 200
THINKING_CHARS = 300
MESSAGE_CHARS = 4000


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    messages: tuple[StoredMessage, ...]
    text: str
    closed: bool  # a cut follows it: no later message can join it
    turns: tuple[Turn, ...] = ()  # the person's and the agent's own words (`turns_of`)

    @property
    def first_index(self) -> int:
        return self.messages[0].index

    @property
    def last_index(self) -> int:
        return self.messages[-1].index


def _spaced(text: str) -> bool:
    """Whether every _BASE64_MIN characters of `text` hold a space (so it has no run of
    base64): a window's last space found by `rfind`, a few C scans for prose."""
    end, at = len(text), 0
    while end - at >= _BASE64_MIN:
        space = text.rfind(" ", at, at + _BASE64_MIN)
        if space < 0:
            return False
        at = space + 1
    return True


def _without_base64(text: str) -> str:
    # Most text has no run to omit, which the spaces in prose tell fastest; other text
    # (code, JSON, paths) is read once by _LONG_RUN. Splitting every text into words
    # took twice as long as the second test.
    if len(text) < _BASE64_MIN or _spaced(text) or _LONG_RUN.search(text) is None:
        return text
    return _BASE64_RUN.sub("[base64 omitted]", text)


def _clip(text: str, limit: int) -> str:
    """`text` masked, then within `limit` characters: a secret is never cut before it is
    masked (`privacy.clipping`)."""
    kept, left = clipping.head(text, limit)
    # Only what is kept is searched for base64 (tool output is often ten times the limit).
    return _without_base64(kept) + (f" […{left} more characters]" if left else "")


def render_message(message: StoredMessage, project: Roots = None) -> str:
    """One message as memory text: the words said, one compact line a tool call, a tool
    result only when it failed (its first line); secrets masked. Empty when the message
    gives memory nothing to read (a tool result that succeeded)."""
    prefix, body = _render(message, project)
    # Every body is `_clip`ped, so masked before it was cut.
    return prefix + body if prefix or body else ""


#: How Claude's parser marks each thinking block of a message (`ingest.parsers.claude`).
_THINKING_TAG = re.compile(r"^\[thinking\] ", re.M)
#: Where a tool call's own line starts inside a message's text (Claude, Codex, Gemini).
_CALL_TAG = re.compile(r"^\[tool_(?:use|call) ", re.M)


def _render(message: StoredMessage, project: Roots = None) -> tuple[str, str]:
    """(prefix, body) of a message's text; only the body is masked (the prefix is the
    role and what the line is)."""
    if message.kind in BOUNDARY_KINDS:
        return ("[conversation compacted]", "") if message.kind == "compact_boundary" else (
            "[compacted] ", _clip(message.content, MESSAGE_CHARS))
    if message.role == "tool" or message.kind == "tool_result":
        failure = failure_of(message.content)
        # A result that worked says nothing the call's line and the agent's next words
        # do not; a file's contents or a command's output are not memory.
        return ("tool failed: ", _clip(failure, TOOL_RESULT_CHARS)) if failure else ("", "")
    if message.kind == "api_error":
        # Written in the agent's name by its CLI when the model's API failed: not the
        # agent's words, and its JSON body read rather than quoted.
        return "the model's API failed: ", _clip(api_error_text(message.content),
                                                 TOOL_RESULT_CHARS)
    if message.kind == "thinking":
        # The agent's reasoning: useful context, but most of it is noise for recall. The
        # line says it is a thought: the parser's `[thinking]` tag would say it twice.
        thought = _THINKING_TAG.sub("", message.content).strip()
        return f"{message.role} thought: ", _clip(thought, THINKING_CHARS)
    if message.kind == "tool_call":
        found = _CALL_TAG.search(message.content)
        said = message.content[: found.start()].strip() if found else ""
        # A call's input is JSON text: described by the strings it holds, which are
        # masked as themselves, not as their escaped form (`\nAuthorization: Basic`).
        calls = "; ".join(describe_input(message.tool_name, message.tool_input,
                                         message.content, project))
        if said:
            return f"{message.role}: ", (f"{_clip(said, MESSAGE_CHARS)}\n"
                                         f"{message.role} used {_clip(calls, TOOL_CALL_CHARS)}")
        return f"{message.role} used ", _clip(calls, TOOL_CALL_CHARS)
    content = without_injected(message.content) if message.role == "user" else message.content
    text = _WHITESPACE_RUNS.sub("\n\n", content.strip())
    if not text:
        # Only what a hook or the agent put in the person's name (memoryd's own block,
        # as Gemini records it): memory must never hold its own answers again.
        return "", ""
    return f"{message.role}: ", _clip(text, MESSAGE_CHARS)


_SPEAKERS = {"user": "user", "assistant": "assistant", "model": "assistant"}


def turns_of(messages: Sequence[StoredMessage]) -> tuple[Turn, ...]:
    """The person's and the agent's own words in `messages` (see `Turn`), secrets masked."""
    return tuple(turn for message in messages
                 if (turn := _turn(message, _turn_text(message))) is not None)


def _turn_text(message: StoredMessage) -> str | None:
    if _SPEAKERS.get(message.role) is None or message.kind != "message" or message.is_sidechain:
        return None
    return without_injected(message.content).strip() or None


def _turn(message: StoredMessage, text: str | None, masked: str | None = None) -> Turn | None:
    if text is None:
        return None
    return Turn(message.index, _SPEAKERS[message.role],
                redact(text) if masked is None else masked, message.timestamp)


def open_question(messages: Sequence[StoredMessage]) -> int | None:
    """The position of the person's last words in `messages` when nothing the agent said
    or did follows them (a question still waiting for its answer), else None."""
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if message.passed_over:
            continue
        if message.role == "user" and _turn_text(message) is not None:
            return position
        if render_message(message):
            return None
    return None


def quiet_line(messages: Sequence[StoredMessage]) -> str:
    """The text of a segment whose messages give no line: tool results that worked."""
    count = sum(not m.passed_over for m in messages)
    return f"tool results: {count} succeeded"


def plan_segments(
    messages: Sequence[StoredMessage], *, max_chars: int, idle_gap: timedelta,
    project: Roots = None,
) -> list[SegmentPlan]:
    """Cut consecutive messages into segments; every segment but the last is closed."""
    plans: list[SegmentPlan] = []
    current: list[StoredMessage] = []
    lines: list[str] = []
    turns: list[Turn] = []
    size = 0

    def close(closed: bool = True) -> None:
        nonlocal current, lines, turns, size
        if current and not lines and not all(m.passed_over for m in current):
            # Every message lies in one segment, even a run of tool results that worked
            # (which give no line of their own): the segment says what they were.
            lines = [quiet_line(current)]
        if current:
            plans.append(SegmentPlan(tuple(current), "\n".join(lines), closed=closed,
                                     turns=tuple(turns)))
        current, lines, turns, size = [], [], [], 0

    for message in messages:
        if message.passed_over:
            # Kept in the run, so the index range stays whole, but it gives memory nothing
            # (forgotten, or a copy of an earlier message: `store.sessions.Copies`).
            current.append(message)
            continue
        prefix, body = _render(message, project)  # masked, then cut
        line = prefix + body
        text = _turn_text(message)
        # Most turns are their line's body (nothing in it was masked or cut): masked once.
        turn = _turn(message, text, body if text == body else None)
        if current:
            # The time since the last message memory keeps: a copy's is an earlier one's.
            previous = current[-1]
            if previous.passed_over:
                previous = next((m for m in reversed(current) if not m.passed_over), previous)
            gap = (
                message.timestamp - previous.timestamp
                if message.timestamp and previous.timestamp else timedelta(0)
            )
            if message.kind in BOUNDARY_KINDS or (lines and (
                    gap > idle_gap or size + len(line) + 1 > max_chars)):
                close()
        current.append(message)
        if line:
            lines.append(line)
        if turn is not None:
            turns.append(turn)
        size += len(line) + 1 if line else 0
    close(closed=False)
    return plans


def new_copies() -> Copies:
    """How a session's copies are told (`store.sessions.Copies`): a person's words
    compared without what the agent's tooling added around them."""
    return Copies(words=lambda text: without_injected(text).strip())


def render_range(messages: Sequence[StoredMessage], project: Roots = None) -> str:
    """The text recovery gives a segment of exactly `messages` (as `plan_segments` renders
    it, without its size and idle cuts): what an older memory of them now reads as."""
    plans = plan_segments(messages, max_chars=2**62, idle_gap=timedelta.max, project=project)
    return "\n".join(plan.text for plan in plans if plan.text)
