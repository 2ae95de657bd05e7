"""How the MCP recall tool writes one result for the agent (issue 37.1)."""

from __future__ import annotations

from memoryd.mcp_server import _line


def result(**extra: object) -> dict[str, object]:
    return {"memory_id": "m1", "type": "conversation", "score": 0.5, "excerpt": None,
            "content": "user: the nginx reload needs sudo",
            "provenance": {"source": "claude", "session_external_id": "s-9",
                           "ended_at": "2026-11-20T10:00:00+00:00"}, **extra}


def test_a_session_standing_for_several_matches_says_so() -> None:
    assert "claude session s-9, best of 3 matches in it;" in _line(result(session_matches=3))
    assert "best of" not in _line(result())
