"""A secret is masked before any cut: wherever a cut falls inside a planted secret, no
8-character run of it is in what a digest, a segment's line or a tool's line says."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.lifecycle.agent_tools import COMMAND_CHARS, describe_call, failure_of
from memoryd.lifecycle.digest import (
    COMMAND_PART_CHARS,
    CONCLUSION_CHARS,
    DIGEST_CHARS,
    ERROR_CHARS,
    REQUEST_CHARS,
    DigestMessage,
)
from memoryd.lifecycle.digest_builder import build_digest
from memoryd.lifecycle.segments import MESSAGE_CHARS, TOOL_CALL_CHARS, render_message
from memoryd.memory.privacy import clipping
from memoryd.store.sessions import StoredMessage

#: Secrets of the kinds an audit found cut in two (and a few more), each as written.
SECRETS = {
    "github": "ghp_Zq8RkT2mWvX9pL4nB7cD1eF3gH5jK0sUaYbW",
    "redis": "redis://:d7bboU9Js0nlXq2w@cache.internal:6379/0",
    "square": "sq0atp-ct3SZtYjotNpqTYZL4mQ8w",
    "email": "maria.kowalska@example-corp.com",
    "slack": "xoxb-2187436598-9876543210987-AbCdEfGhIjKlMnOpQrStUvWx",
    "anthropic": "sk-ant-api03-Xq9vB2nM4kL7pR1sT6wY8zA3cD5fG0hJ-aBcDeFgHiJkLmNoPqRsTuV",
}
#: The part of each that must never be seen (the redis URL's password, not its host).
SECRET_PART = {**SECRETS, "redis": "d7bboU9Js0nlXq2w"}
_WORDS = ["the", "deploy", "of", "our", "work", "runs", "on", "staging", "when", "tests",
          "pass", "and", "then", "we", "ship", "it"]


def _pieces(secret: str) -> set[str]:
    return {secret[i:i + 8] for i in range(len(secret) - 7)}


def _leaks(text: str, kind: str) -> list[str]:
    return sorted(p for p in _pieces(SECRET_PART[kind]) if p in text)


def _filler(length: int) -> str:
    words, size = [], 0
    while size < length:
        word = _WORDS[len(words) % len(_WORDS)]
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def _planted(kind: str, at: int, after: int = 200) -> str:
    """A text whose secret starts at character `at` (a space before it)."""
    before = _filler(max(0, at - 1)) + " " if at else ""
    return before + SECRETS[kind] + " " + _filler(after)


def _every_cut(limit: int, kind: str) -> range:
    """Every start of the secret that puts a cut at `limit` inside it, and a few beside."""
    return range(max(0, limit - len(SECRETS[kind]) - 3), limit + 3)


@pytest.mark.parametrize("kind", sorted(SECRETS))
@pytest.mark.parametrize("limit", [60, 120, 160, 300])
def test_clip_never_shows_a_piece_of_a_secret_it_cut(kind: str, limit: int) -> None:
    """`clipping.clip` and `clipping.head` at every position of the secret."""
    for at in _every_cut(limit, kind):
        text = _planted(kind, at)
        assert not _leaks(clipping.clip(text, limit), kind), (at, clipping.clip(text, limit))
        assert not _leaks(clipping.head(text, limit)[0], kind), at


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_segment_line_never_shows_a_piece_of_a_secret_it_cut(kind: str) -> None:
    """A person's message, an agent's thought and a failed tool's output, each cut by
    the segment's line at every position of the secret."""
    for at in _every_cut(MESSAGE_CHARS, kind):
        said = StoredMessage(0, "user", "message", _planted(kind, at), None, "u0", None)
        assert not _leaks(render_message(said), kind), at
    for at in _every_cut(160, kind):
        failed = StoredMessage(1, "tool", "tool_result", "[tool error] " + _planted(kind, at),
                               None, "u1", None)
        assert not _leaks(render_message(failed), kind), at
    for at in _every_cut(TOOL_CALL_CHARS, kind):
        command = _planted(kind, at)
        call = StoredMessage(2, "assistant", "tool_call", f"[tool_use Bash] {command}", "Bash",
                             "u2", None, tool_input=json.dumps({"command": command}))
        assert not _leaks(render_message(call), kind), at


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_tool_line_never_shows_a_piece_of_a_secret_it_cut(kind: str) -> None:
    """A command line and a failure's first line, cut at every position of the secret."""
    for at in _every_cut(COMMAND_CHARS, kind):
        assert not _leaks(describe_call("Bash", {"command": _planted(kind, at)}), kind), at
    for at in _every_cut(160, kind):
        assert not _leaks(failure_of("[tool error] " + _planted(kind, at)) or "", kind), at


def _claude_call(index: int, name: str, args: dict[str, object]) -> DigestMessage:
    raw = json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": f"t{index}", "name": name, "input": args}]}})
    return DigestMessage(index, "assistant", "tool_call", f"[tool_use {name}]", name,
                         json.dumps(args), raw=raw.encode())


def _claude_result(index: int, text: str) -> DigestMessage:
    raw = json.dumps({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"t{index - 1}", "content": text,
         "is_error": True}]}})
    return DigestMessage(index, "tool", "tool_result", f"[tool error] {text}", raw=raw.encode())


def _digest_of(text: str) -> str:
    """A session where `text` is each thing a digest quotes: a request, a command and its
    failure, a commit message, a todo item, the agent's last words, one left unanswered."""
    messages = [
        DigestMessage(0, "user", "message", text),
        _claude_call(1, "Bash", {"command": f"make deploy {text}"}),
        _claude_result(2, f"Error: {text}"),
        _claude_call(3, "Bash", {"command": f'git commit -m "{text}"'}),
        _claude_call(4, "TodoWrite", {"todos": [{"content": text, "status": "pending"}]}),
        DigestMessage(5, "assistant", "message", text),
        DigestMessage(6, "user", "message", "and then " + text),
    ]
    return build_digest(messages, source="claude", session="s", project="/p",
                        title=text).render(DIGEST_CHARS)


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_digest_never_shows_a_piece_of_a_secret_it_cut(kind: str) -> None:
    """Every limit a digest cuts at, at every position of the secret."""
    for limit in sorted({REQUEST_CHARS, CONCLUSION_CHARS, ERROR_CHARS, COMMAND_PART_CHARS}):
        for at in _every_cut(limit, kind):
            rendered = _digest_of(_planted(kind, at))
            assert not _leaks(rendered, kind), (limit, at, rendered)


_NOISE = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "Zs", "Cc")),
                 max_size=60)


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(sorted(SECRETS)), before=_NOISE, after=_NOISE,
       limit=st.integers(min_value=8, max_value=400),
       gap=st.sampled_from(["", " ", "\n", "\t", "  "]))
def test_any_text_around_a_secret_cut_anywhere_shows_no_piece(
        kind: str, before: str, after: str, limit: int, gap: str) -> None:
    """Random text, blanks and unicode around the secret, any limit."""
    text = before + gap + " " + SECRETS[kind] + " " + gap + after
    baseline = set(_leaks(before + after, kind))  # a piece the noise itself spells
    assert set(_leaks(clipping.clip(text, limit), kind)) <= baseline
    assert set(_leaks(clipping.head(text, limit)[0], kind)) <= baseline


def test_a_mask_is_never_cut_in_two() -> None:
    """A cut that would fall inside `[REDACTED:...]` falls before it."""
    text = "x" * 50 + " " + SECRETS["github"] + " tail"
    for limit in range(50, 80):
        clipped = clipping.clip(text, limit)
        assert "[REDACTED:" not in clipped or "[REDACTED:github_token]" in clipped, clipped


def test_a_long_text_is_masked_past_the_window_only_when_it_must_be() -> None:
    """A secret that starts before the cut is masked whole even in a text far longer than
    the masker's window."""
    text = _planted("github", 150, after=clipping.LOOKAHEAD * 3)
    assert not _leaks(clipping.clip(text, 160), "github")
    kept, left = clipping.head(text, 160)
    assert not _leaks(kept, "github") and left > clipping.LOOKAHEAD
