"""The briefing's text: a project's state as a new session reads it, within a size.

Parts in reading order: how the latest session ended, what is open, the decisions in
force, the files in flight, what is failing, what people stated (facts), what a model
noted, the latest sessions, other recent memory. When the size is short, parts give way
in the reverse of their worth (other memory first, the ending never), each line whole.
Every line is one escaped line inside the `<memory_context>` frame (`recall.context`);
the text it quotes was masked when its digest or memory was written, and is only ever
cut where no mask is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.briefing.state import ProjectState, Said, handle
from memoryd.memory.models import MemoryType, RecallResult
from memoryd.memory.privacy.clipping import cut_masked
from memoryd.memory.recall.context import FRAME, PREAMBLE, escape

#: Lines each part holds at most; files past MAX_FILES are named on one line, within
#: MORE_FILES_CHARS.
MAX_DECISIONS, MAX_OPEN, MAX_FILES, MAX_FAILING = 12, 12, 12, 5
MORE_FILES_CHARS = 2000
MAX_FACTS, MAX_NOTED, MAX_RECENT, MAX_OTHER = 12, 8, 6, 4
#: Characters a quoted line keeps at most.
LINE_CHARS, FAILURE_CHARS, OTHER_CHARS = 300, 160, 300


@dataclass(frozen=True, slots=True)
class Briefing:
    text: str
    #: The memories it says something of (recorded as given to the agent's session).
    memory_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Line:
    text: str
    memory_id: str | None


@dataclass(slots=True)
class _Part:
    title: str | None
    lines: list[_Line]
    rank: int  # lower: kept longer when the size is short


def _source(said: Said) -> str:
    return f"({said.entry.handle})"


def _ending(state: ProjectState) -> _Part | None:
    latest = state.latest
    if latest is None:
        return None
    d = latest.digest
    said: list[str] = []
    if d.interrupted:
        said.append("it ended mid-turn (interrupted or killed)")
    if d.api_error:
        said.append(f"it ended on an error of the model's API: {d.api_error}")
    if d.concluded:
        said.append(f'its last words: "{d.concluded}"')
    if not said and d.asked:
        said.append(f'it last asked: "{d.asked[-1]}"')
    if not said:
        return None
    text = f"How the latest session ended ({latest.handle}): " + "; ".join(said) + "."
    return _Part(None, [_Line(text, latest.memory_id)], 0)


def _open(state: ProjectState) -> _Part | None:
    lines = [_Line(f"- {s.text}", s.entry.memory_id) for s in state.open_items[:MAX_OPEN]]
    if state.unanswered is not None:
        lines.append(_Line(f'- left unanswered: "{state.unanswered.text}" '
                           f"{_source(state.unanswered)}", state.unanswered.entry.memory_id))
    if state.open_items:
        title = f"Open (left by {state.open_items[0].entry.handle}):"
    elif state.todos_done is not None:
        title = f"Open: the last todo list ({state.todos_done.handle}) is all done."
        if not lines:
            return _Part(None, [_Line(title, state.todos_done.memory_id)], 1)
    else:
        title = "Open:"
    return _Part(title, lines, 1) if lines else None


def _decisions(state: ProjectState) -> _Part | None:
    lines = [_Line(f'- "{s.text}" {_source(s)}', s.entry.memory_id)
             for s in state.decisions[:MAX_DECISIONS]]
    if not lines:
        return None
    title = "Decisions in force (latest first):"
    if state.replaced:
        title = (f"Decisions in force (latest first; {state.replaced} earlier ones on the "
                 "same things replaced):")
    return _Part(title, lines, 2)


def _files(state: ProjectState) -> _Part | None:
    lines = []
    for f in state.files[:MAX_FILES]:
        notes = [f"{f.changes} change{'s' if f.changes != 1 else ''}"]
        if f.sessions > 1:
            notes[0] += f" in {f.sessions} sessions"
        if f.created:
            notes.append("new")
        if f.deleted:
            notes.append("deleted")
        lines.append(_Line(f"- {f.path}: {', '.join(notes)}, last ({f.last.handle})",
                           f.last.memory_id))
    if not lines:
        return None
    rest = [f.path for f in state.files[MAX_FILES:]]
    if rest:
        named = cut_masked(", ".join(rest), MORE_FILES_CHARS)
        shown = named.count(", ") + (0 if named.endswith("…") else 1)
        more = len(rest) - shown
        lines.append(_Line(f"- also changed: {named}"
                           + (f" (+{more} more in the sessions' digests)" if more > 0 else ""),
                           None))
    return _Part("Files in flight (most work and latest first):", lines, 3)


def _failing(state: ProjectState) -> _Part | None:
    lines = [_Line(f"- {cut_masked(s.text, FAILURE_CHARS)} {_source(s)}", s.entry.memory_id)
             for s in state.failing[:MAX_FAILING]]
    return _Part("Failing at their last run (no later pass seen):", lines, 4) if lines else None


def _recent(state: ProjectState) -> _Part | None:
    lines = []
    for e in state.entries[:MAX_RECENT]:
        d = e.digest
        said = []
        if d.branch:
            said.append(f"branch {d.branch}")
        if d.title:
            said.append(f'"{d.title}"')
        elif d.asked:
            said.append(f'asked "{d.asked[0]}"' + (f" and {d.turns - 1} more"
                                                   if d.turns > 1 else ""))
        elif d.unanswered:
            said.append(f'asked "{d.unanswered}", left unanswered')
        if d.committed:
            said.append(f'committed "{d.committed[-1]}"' + (
                f" (+{len(d.committed) - 1})" if len(d.committed) > 1 else ""))
        if said:
            lines.append(_Line(f"- ({e.handle}) " + "; ".join(said), e.memory_id))
    title = "Latest sessions that did work" + (
        f" ({state.quiet} more only talked):" if state.quiet else ":")
    return _Part(title, lines, 7) if lines else None


def _memories(title: str, results: Sequence[RecallResult], limit: int, rank: int,
              chars: int = LINE_CHARS) -> _Part | None:
    lines = []
    for r in results[:limit]:
        p = r.provenance
        if p.session_id is None and p.session_external_id is None:
            origin = f"{r.type.value}, {r.created_at.date().isoformat()}"
        else:
            origin = handle(p.source, p.session_external_id, p.ended_at or r.created_at)
        kind = next((t for t in r.tags if t in ("fact", "decision", "preference", "gotcha")),
                    None) if r.type is MemoryType.OBSERVATION else None
        lead = f"[{kind}] " if kind else ""
        lines.append(_Line(f"- {lead}{cut_masked(' '.join(r.content.split()), chars)} "
                           f"({origin})", r.memory_id))
    return _Part(title, lines, rank) if lines else None


def render(state: ProjectState, *, project: str | None, explicit: Sequence[RecallResult] = (),
           noted: Sequence[RecallResult] = (), other: Sequence[RecallResult] = (),
           limit: int = 6000) -> Briefing | None:
    """The briefing for `state` and the memories beside it, within `limit` characters;
    None when there is nothing to say."""
    parts = [p for p in (
        _ending(state), _open(state), _decisions(state),
        _memories("Stated by the person:", explicit, MAX_FACTS, 2),
        _files(state), _failing(state),
        _memories("Noted by a model from earlier sessions (unverified):", noted, MAX_NOTED, 6),
        _recent(state),
        _memories("Other recent memory:", other, MAX_OTHER, 8, OTHER_CHARS),
    ) if p is not None]
    if not parts:
        return None
    name = os.path.basename((project or "").rstrip("/")) or "this project"
    head = escape(f"Project briefing for {name}: the state its earlier sessions left. Each "
                  "line names its session (agent, id, day).")
    opening, closing = f"<{FRAME}>", f"</{FRAME}>"
    fixed = len(opening) + len(PREAMBLE) + len(head) + len(closing) + 4

    def size(chosen: list[_Part]) -> int:
        return fixed + sum(len(escape(p.title)) + 1 if p.title else 0 for p in chosen) + sum(
            len(escape(line.text)) + 1 for p in chosen for line in p.lines)

    # The least worth gives way first: a part's last lines, then its title with its last.
    while size(parts) > limit:
        worst = max(parts, key=lambda p: (p.rank, len(p.lines)))
        if worst.rank == 0 or (len(parts) == 1 and len(worst.lines) == 1):
            line = worst.lines[0]
            room = len(escape(line.text)) - (size(parts) - limit)
            if room < 40:  # no room for a line that says anything
                parts.remove(worst)
                if not parts:
                    return None
                continue
            worst.lines[0] = _Line(cut_masked(escape(line.text), room), line.memory_id)
            break
        worst.lines.pop()
        if not worst.lines:
            parts.remove(worst)
    body = [opening, PREAMBLE, head]
    ids: dict[str, None] = {}
    for part in parts:
        if part.title:
            body.append(escape(part.title))
        for line in part.lines:
            body.append(escape(line.text))
            if line.memory_id is not None:
                ids.setdefault(line.memory_id, None)
    body.append(closing)
    return Briefing("\n".join(body), tuple(ids))

