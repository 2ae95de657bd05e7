"""What each operation is asked, typed: the interfaces (the API's JSON, the CLI, MCP, the
hooks) build these, and the domain reads nothing else.

Values here are checked already (the API's `args` says why one is refused); paths of
projects are a repository's root (`repository.project_root`), not yet followed through
the project links.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from memoryd.memory import MemoryType, RecallOrder


@dataclass(frozen=True)
class Caller:
    """Who asks: the interface, and the agent (with its own session) when one asks."""

    interface: str = "api"
    #: The agent asking (claude, codex, gemini, ...): it sees its own private memories.
    agent: str | None = None
    #: Whether the request came in an agent's name at all (a person, asking without one,
    #: sees every memory of theirs by id).
    as_agent: bool = False
    agent_session_id: str | None = None


@dataclass(frozen=True)
class Scope:
    """Which memories a recall weighs."""

    project: str | None = None
    all_projects: bool = False
    agent: str | None = None
    types: tuple[MemoryType, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: The moment "yesterday" and its kind are counted from (now when None).
    as_of: datetime | None = None


@dataclass(frozen=True)
class RecallRequest:
    query: str
    limit: int
    scope: Scope = field(default_factory=Scope)
    order: RecallOrder = "score"
    #: Record what was given (`injections`): an agent's tool call, or a client asking so.
    record: bool = False
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True)
class ContextRequest:
    query: str
    budget: int
    scope: Scope = field(default_factory=Scope)
    record: bool = False
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True)
class RememberRequest:
    content: str
    type: MemoryType = MemoryType.FACT
    importance: float | None = None
    tags: tuple[str, ...] = ()
    private: bool = False
    project: str | None = None
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True)
class CorrectRequest:
    content: str
    memory_id: str | None = None
    query: str | None = None
    reason: str | None = None
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True)
class ForgetRequest:
    memory_id: str | None = None
    session: str | None = None
    project: str | None = None
    everything: bool = False
    hard: bool = False
    #: The request says in words that it forgets everything (the command line's --yes).
    confirmed: bool = False
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True)
class GetMemoryRequest:
    memory_id: str
    record_use: bool = True
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True)
class ForgetUserRequest:
    user: str
    confirmed: bool = False
    caller: Caller = field(default_factory=Caller)


@dataclass(frozen=True)
class RetentionRequest:
    dry_run: bool | None = None
    trust_clock: bool = False


TranscriptAction = Literal["archive", "mask", "delete_raw"]
TRANSCRIPT_ACTIONS: tuple[TranscriptAction, ...] = ("archive", "mask", "delete_raw")


@dataclass(frozen=True)
class TranscriptsRequest:
    action: TranscriptAction
    session: str | None = None
    project: str | None = None
    older_than: float | None = None


@dataclass(frozen=True)
class HoldRequest:
    project: str | None = None
    session: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LinkRequest:
    old: str
    new: str


@dataclass(frozen=True)
class SearchSessionsRequest:
    query: str
    limit: int = 20
    project: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    agent: str | None = None


@dataclass(frozen=True)
class ListSessionsRequest:
    status: str | None = None
    source: str | None = None
    flat: bool = False


@dataclass(frozen=True)
class SessionEventRequest:
    """A hook's event (`names.EVENTS`) of an agent's session."""

    agent: str
    event: str
    session_id: str | None = None
    transcript_path: str | None = None
    #: The agent's transcript folder as the hook found it in the agent's environment.
    transcript_root: str | None = None
    cwd: str | None = None
    prompt: str = ""
    #: Why the session starts (`resume`, `startup`, `clear`, `compact`; None: unsaid).
    source: str | None = None
    #: What set off a compaction (`manual`, `auto`).
    trigger: str | None = None
    #: A block ready after this is not given: the hook has stopped waiting.
    answer_by: datetime | None = None
    #: Asked before a block is given: false once the hook's connection is gone.
    still_waiting: Callable[[], bool] | None = None


@dataclass(frozen=True)
class BriefingRequest:
    agent: str = "claude"
    cwd: str | None = None
