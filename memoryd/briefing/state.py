"""A project's state, read from its sessions' digests: what is decided, open, in flight,
failing, and how the latest session ended.

Pure and deterministic: the same digests give the same state. Each digest is a
session's record as `lifecycle.digest` wrote it (masked already), read back with
`read_digest`; nothing here re-reads a transcript or asks a model.

- A session that changed nothing, ran nothing that matters, decided nothing, left
  nothing open and was told nothing (a one-question chat) adds nothing but its count.
- A decision stands until a later one on the same thing (most of its content words
  in common) replaces it; the replaced one stays in its session's digest.
- What is open is the latest todo list or task list a session left (a later list
  replaces an earlier one, as the agents' own lists do), and a request the latest
  session left unanswered.
- Files are ranked by the work they got, the latest sessions' counting most, across
  every session and worktree of the project.
- A command whose latest run failed is failing still; a later pass of the same
  command, in any session, fixed it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memoryd.lifecycle.digest import Digest, read_digest
from memoryd.memory.models import RecallResult
from memoryd.memory.recall.gate import STEM, content_words

#: How much a session's file work counts against the next newer one's.
RECENCY_WEIGHT = 0.7
#: A later decision replaces an earlier one sharing this share (and at least two) of the
#: smaller's content words, less the words that say it is a decision.
SAME_SUBJECT = 0.5
_DECIDING_WORDS = frozenset({"decision", "decided", "decide", "agreed", "settled", "chose",
                             "opted", "going", "forward", "let", "lets", "go", "stick",
                             "switch", "now"})
#: The outcomes of a command that failed (`lifecycle.digest`): its own failure, or the
#: harness's time limit or sandbox.
_FAILED = ("failed", "timed out", "blocked")
#: A request that asks rather than tells: it ends on a question mark, or opens as a
#: question does.
_QUESTION = re.compile(
    r"\?\W*$|^\W*(?:how|what|why|when|where|who|which|can|could|should|is|are|do|does|"
    r"did|will|would|explain|tell me|show me)\b", re.I)
#: Content words a request needs to tell something ("hello there" tells nothing).
TELLING_WORDS = 3


def _tells(request: str) -> bool:
    """Whether the person told something (a fact, an instruction), not only asked or
    greeted."""
    return not _QUESTION.search(request) and len(content_words(request)) >= TELLING_WORDS


_UUID_HEAD = re.compile(r"^[0-9a-f]{8}(?=-[0-9a-f]{4}-)")
_ALNUM = re.compile(r"[^A-Za-z0-9]")


def handle(source: str | None, external_id: str | None, ended: datetime | None) -> str:
    """A session as a briefing names it: its agent, eight characters of its id (enough for
    `memoryd show`) and its day."""
    ident = str(external_id or "")
    found = _UUID_HEAD.match(ident)
    short = found.group(0) if found else _ALNUM.sub("", ident)[-8:]
    day = f", {ended.date().isoformat()}" if ended is not None else ""
    return f"{source or 'agent'} {short or '?'}{day}"


@dataclass(frozen=True, slots=True)
class Entry:
    """One session of the project, as its digest tells it."""

    memory_id: str
    handle: str
    ended_at: datetime | None
    digest: Digest

    @property
    def did_something(self) -> bool:
        """Whether the session adds to the project's state: it changed, ran, decided or
        left something, or the person told it something (not only asked)."""
        d = self.digest
        return bool(d.created or d.edited or d.deleted or d.committed or d.decided
                    or d.open_items or d.todos_done
                    or any(c.outcome for c in d.ran)
                    or any(_tells(asked) for asked in d.asked))


def entry(result: RecallResult) -> Entry:
    p = result.provenance
    ended = p.ended_at or result.created_at
    return Entry(result.memory_id, handle(p.source, p.session_external_id, ended), ended,
                 read_digest(result.content))


@dataclass(frozen=True, slots=True)
class Said:
    """A line of the state and the session it comes from."""

    text: str
    entry: Entry


@dataclass(slots=True)
class FileWork:
    """A file's work across the project's sessions."""

    path: str
    last: Entry  # the latest session that changed it
    changes: int = 0
    sessions: int = 0
    created: bool = False
    deleted: bool = False
    score: float = 0.0


@dataclass(slots=True)
class ProjectState:
    """What a project's sessions leave a new one (each list best first)."""

    entries: list[Entry]
    latest: Entry | None = None
    decisions: list[Said] = field(default_factory=list)
    replaced: int = 0
    open_items: list[Said] = field(default_factory=list)
    todos_done: Entry | None = None
    unanswered: Said | None = None
    files: list[FileWork] = field(default_factory=list)
    failing: list[Said] = field(default_factory=list)
    quiet: int = 0  # sessions that added nothing


def project_state(digests: Sequence[RecallResult]) -> ProjectState:
    """The state `digests` (any order; one per session) leave."""
    entries = sorted((entry(r) for r in digests),
                     key=lambda e: (e.ended_at is not None, e.ended_at, e.memory_id),
                     reverse=True)  # newest first
    working = [e for e in entries if e.did_something]
    state = ProjectState(entries=working, quiet=len(entries) - len(working))
    if not entries:
        return state
    # How a session that only talked ended is no news (a greeting's "Hello!").
    state.latest = working[0] if working else None
    # A request the newest session left unanswered is open, whether or not it did work.
    newest = entries[0]
    if newest.digest.unanswered:
        state.unanswered = Said(newest.digest.unanswered, newest)
    _decisions(state, working)
    _open(state, working)
    _files(state, working)
    _failing(state, working)
    return state


def _subject(text: str) -> set[str]:
    """A decision's words as compared: content words but the deciding ones, stemmed."""
    return {word[:STEM] for word in content_words(text) if word not in _DECIDING_WORDS}


def _same_subject(a: set[str], b: set[str]) -> bool:
    shared = len(a & b)
    return shared >= 2 and shared / min(len(a), len(b)) >= SAME_SUBJECT


def _decisions(state: ProjectState, newest_first: list[Entry]) -> None:
    kept: list[tuple[Said, set[str]]] = []
    for e in newest_first:
        for text in reversed(e.digest.decided):  # a session's latest first
            words = _subject(text)
            if any(_same_subject(words, other) for _said, other in kept):
                state.replaced += 1
                continue
            kept.append((Said(text, e), words))
    state.decisions = [said for said, _words in kept]


def _open(state: ProjectState, newest_first: list[Entry]) -> None:
    for e in newest_first:
        if e.digest.open_items:
            state.open_items = [Said(item, e) for item in e.digest.open_items]
            return
        if e.digest.todos_done:
            state.todos_done = e
            return


def _files(state: ProjectState, newest_first: list[Entry]) -> None:
    work: dict[str, FileWork] = {}
    for rank, e in enumerate(newest_first):
        weight = RECENCY_WEIGHT ** rank
        d = e.digest
        for path in (*d.created, *d.edited, *d.deleted):
            changes = d.work.get(path, 1)
            found = work.setdefault(path, FileWork(path, e, deleted=path in d.deleted))
            found.changes += changes
            found.sessions += 1
            found.score += weight * (1 + changes) ** 0.5
            found.created = found.created or path in d.created
    state.files = sorted(work.values(), key=lambda f: (-f.score, f.path))


def _failing(state: ProjectState, newest_first: list[Entry]) -> None:
    settled: set[str] = set()
    for e in newest_first:
        for command in reversed(e.digest.ran):  # a session's latest run first
            if command.command in settled or not command.outcome:
                continue
            settled.add(command.command)
            # Stopped by the person (interrupted, refused, cancelled) is not a failure.
            if command.outcome.startswith(_FAILED):
                state.failing.append(Said(f"{command.command} → {command.outcome}", e))
