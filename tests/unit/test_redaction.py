"""Secrets are masked in memory text; ordinary text and hashes are left alone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from daemon.lifecycle.segments import render_message
from daemon.memory.redaction import redact
from daemon.store.sessions import StoredMessage

SECRETS = [
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz123456", "sk-proj-abcdef"),
    ("key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123", "sk-ant-api03"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdef"),
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnop"),
    ("postgres://admin:hunter2secret@db:5432/app", "hunter2secret"),
    ('db_password = "correct-horse-battery"', "correct-horse"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
     "MIIEowIBAAKCAQEA"),
    ("xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secrets_are_masked(text: str, secret: str) -> None:
    """Each known kind of credential is replaced by a REDACTED marker."""
    masked = redact(text)
    assert secret not in masked
    assert "[REDACTED:" in masked


@pytest.mark.parametrize("text", [
    "commit a3f5e9c1b2d4f6a8c0e2 and sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c",
    "tokens: 42 used, the password policy says 12 chars",
    "see https://example.org/docs/path?q=1",
])
def test_ordinary_text_survives(text: str) -> None:
    """Hashes, counts and URLs without credentials are not touched."""
    assert redact(text) == text


def test_segment_text_is_redacted() -> None:
    """What recovery saves as memory never carries a tool output's key."""
    message = StoredMessage(index=0, role="tool", kind="tool_result", uuid="u", tool_name=None,
                            content="OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz0123",
                            timestamp=datetime(2026, 1, 1, tzinfo=UTC))
    assert "sk-abcdefghij" not in render_message(message)


def test_token_counts_are_not_secrets() -> None:
    """Numbers assigned to token-ish names (usage counters) are kept."""
    assert redact("total_tokens: 1234567, max_tokens=4096") == (
        "total_tokens: 1234567, max_tokens=4096")
