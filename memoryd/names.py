"""Names memoryd takes from people and agents: the agents it knows, an agent's, a project's.

The one list of agents and their hook events: adding an agent starts here (its
parser in `ingest/parsers/`, its settings files in `hooks/install.py`).
Standard library only: the hook (`hooks.fast`) and the quick command path
(`cli.quick`) import it.
"""

from __future__ import annotations

import os
from typing import Literal

#: The agents memoryd follows.
AGENTS: tuple[Agent, ...] = ("claude", "codex", "gemini")
#: The same, as a type (kept equal to AGENTS; a test checks).
Agent = Literal["claude", "codex", "gemini"]
#: memoryd's own session events (`domain.session_events.SessionEvents.event`).
EVENTS = ("start", "prompt", "pre_compact", "end", "stop")
#: Each agent's hook events, in the order `hooks install` writes them -> memoryd's event.
AGENT_EVENTS: dict[str, dict[str, str]] = {
    "claude": {"SessionStart": "start", "UserPromptSubmit": "prompt",
               "PreCompact": "pre_compact", "SessionEnd": "end", "Stop": "stop"},
    # PostCompact saves as PreCompact does: Codex uses nothing a hook answers there, but
    # the rollout then holds the compaction's own summary, saved with what came before.
    "codex": {"SessionStart": "start", "UserPromptSubmit": "prompt",
              "PreCompact": "pre_compact", "PostCompact": "pre_compact",
              "SessionEnd": "end", "Stop": "stop"},
    "gemini": {"SessionStart": "start", "BeforeAgent": "prompt",
               "PreCompress": "pre_compact", "SessionEnd": "end", "AfterAgent": "stop"},
}
#: Claude Code runs the agent that summarises a conversation it compacts as a subagent of
#: it (`<session>/subagents/agent-acompact-<id>.jsonl`): it re-reads the conversation, and
#: its summary is written into the parent's own transcript too. A derived view of its
#: parent, never a session of its own.
COMPACTION_AGENT_PREFIX = "agent-acompact-"


def is_compaction_agent(source: str, external_id: str | None) -> bool:
    """Whether a session is an agent's compaction of another session (see above)."""
    return source == "claude" and bool(external_id) and str(external_id).startswith(
        COMPACTION_AGENT_PREFIX)


#: Set to `off` in an agent's environment (`MEMORYD_BRIEFING=off claude`), its sessions
#: are given no block, at their start or at a prompt; what they say is still saved.
BRIEFING_ENV = "MEMORYD_BRIEFING"
BRIEFING_OFF = ("off", "no", "0", "false")


def briefing_off(environ: dict[str, str] | os._Environ[str]) -> bool:
    return environ.get(BRIEFING_ENV, "").strip().lower() in BRIEFING_OFF


#: Where each agent writes its transcripts unless its environment says otherwise.
DEFAULT_ROOTS: dict[str, str] = {
    "claude": "~/.claude/projects",
    "codex": "~/.codex/sessions",
    "gemini": "~/.gemini/tmp",
}
#: The environment variable that moves an agent's home, and its transcripts' folder in it.
AGENT_HOME_ENV: dict[str, tuple[str, str]] = {
    "claude": ("CLAUDE_CONFIG_DIR", "projects"),
    "codex": ("CODEX_HOME", "sessions"),
    "gemini": ("GEMINI_CLI_HOME", os.path.join(".gemini", "tmp")),
}


def agent_transcript_root(agent: str, environ: dict[str, str] | None = None) -> str | None:
    """Where this agent writes its transcripts when its environment moves its home; None
    when it does not (the default root then)."""
    name, folder = AGENT_HOME_ENV.get(agent, ("", ""))
    home = (os.environ if environ is None else environ).get(name) if name else None
    return os.path.join(os.path.expanduser(home), folder) if home else None


def agent_name(value: str | None) -> str | None:
    """An agent's name as stored in `private_to`, or ValueError for one that cannot be."""
    if value is None:
        return None
    name = value.strip().lower()
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"agent {value!r} is not an agent's name (letters, digits, - _ .)")
    return name


def project_path(value: str) -> str:
    """A project as memoryd names it: the directory's absolute path."""
    return os.path.abspath(os.path.expanduser(value)).rstrip("/") or "/"
