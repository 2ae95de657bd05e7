"""What an agent's hook payload asks of the daemon, and what the agent reads back.

Shared by the two hook clients: the Python one (`hooks.fast`, which builds the
`session_event` request itself) and the shell one (`hooks/memoryd-hook.sh`, which
sends the agent's payload as it is to `POST /v1/hook/<agent>/<event>`, where the
daemon builds the same request). Standard library only: `hooks.fast` imports it.
"""

from __future__ import annotations

import json
from typing import Any

from memoryd.names import AGENT_EVENTS

#: Seconds before a hook's cap by which the daemon must have answered (the hook still has
#: to read the answer and print it). A block ready later is not given, nor recorded.
ANSWER_MARGIN = 0.15


def memoryd_event(agent: str, agent_event: str) -> str | None:
    """memoryd's event for an agent's hook event; None for one memoryd does not handle."""
    return AGENT_EVENTS.get(agent, {}).get(agent_event)


def event_request(agent: str, event: str, payload: dict[str, Any],
                  transcript_root: str | None) -> dict[str, Any]:
    """The API's session_event arguments from an agent's hook payload (unknown fields
    ignored); `transcript_root` is where the agent's environment moved its transcripts."""

    def text(name: str) -> str | None:
        value = payload.get(name)
        return value if isinstance(value, str) and value else None

    return {"agent": agent, "event": event, "session_id": text("session_id"),
            "transcript_path": text("transcript_path"), "cwd": text("cwd"),
            "prompt": text("prompt") or "", "trigger": text("trigger"),
            "source": text("source"), "interface": "hook",
            "transcript_root": transcript_root}


def agent_output(agent_event: str, context: str | None) -> str | None:
    """What the agent reads on stdout: its hook JSON with the block, or nothing."""
    if not context:
        return None
    # All three agents read additionalContext; Codex refuses any key it does not know.
    return json.dumps({"hookSpecificOutput": {"hookEventName": agent_event,
                                              "additionalContext": context}},
                      ensure_ascii=False)
