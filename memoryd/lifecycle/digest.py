"""A session's digest as a value: its parts (`Digest`), rendered as text and read back.

What it asked, changed, ran, committed, concluded and left open, as facts in the
transcript, not paraphrases. Built from a session's messages by `digest_builder` (what
each agent's tools did is read by `digest_tools`); every part is masked before it is cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from memoryd.lifecycle.agent_tools import agents_own
from memoryd.memory.privacy import clipping
from memoryd.store.sessions import StoredMessage

#: What a session id may hold where a digest names it.
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:-]")
#: A digest's rendered text aims below this many characters (the parts are clipped to fit).
DIGEST_CHARS = 3000
REQUEST_CHARS = 160
CONCLUSION_CHARS = 300
ERROR_CHARS = 120
MAX_REQUESTS = 4
MAX_FILES = 60
MAX_COMMANDS = 6
COMMAND_PART_CHARS = 60
#: The shares of a digest the requests and the changed files may take at most.
ASKED_CHARS, CHANGED_CHARS = 360, 1600
MAX_OPEN = 6
PATH_CHARS = 300
#: Decisions a digest keeps (the latest), each within DECISION_CHARS.
MAX_DECISIONS, DECISION_CHARS = 6, 240
#: Said of a session whose last todo list is all done.
TODOS_DONE = "Todo list: all done."


@dataclass(frozen=True, slots=True)
class DigestMessage:
    """One stored message as the digest reads it (`raw`: the transcript line, for tool
    calls and results, where a call's id and a result's exit status are)."""

    index: int
    role: str
    kind: str
    content: str
    tool_name: str | None = None
    tool_input: str | None = None
    timestamp: datetime | None = None
    is_sidechain: bool = False
    raw: bytes = b""


#: A stored message (`store.sessions.digest_messages`) or one built by hand.
Readable = DigestMessage | StoredMessage


@dataclass(frozen=True, slots=True)
class Command:
    command: str
    outcome: str  # "passed", "failed: <first line>", or "" (no result seen)


#: Summary lines an agent wrote that name no work: its API's error, a compaction's opening.
_NOT_A_TITLE = ("API Error", "This session is being continued")


@dataclass(slots=True)
class Digest:
    """What a session did, part by part (each empty when there is nothing to say)."""

    source: str
    session: str
    project: str | None = None
    branch: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    turns: int = 0
    title: str | None = None
    asked: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: Each changed file's changes, and when it was last changed (a count of changes so
    #: far): the files that got the most work, then the latest, are named first.
    work: dict[str, int] = field(default_factory=dict)
    last_touched: dict[str, int] = field(default_factory=dict)
    ran: list[Command] = field(default_factory=list)
    committed: list[str] = field(default_factory=list)
    concluded: str | None = None
    interrupted: bool = False
    #: The error of the model's API the session ended on, when it did (its first line).
    api_error: str | None = None
    open_items: list[str] = field(default_factory=list)
    #: What the person or the main agent stated as decided, in their words, in order.
    decided: list[str] = field(default_factory=list)
    #: The last todo list had items and every one is done (a later list replaces an
    #: earlier session's: what that one left open is no longer what is left to do).
    todos_done: bool = False
    unanswered: str | None = None
    #: The first and last index of the messages it was built from (None: from none).
    first_index: int | None = None
    last_index: int | None = None

    @property
    def says_something(self) -> bool:
        """Whether it holds more than where and when (a session of nothing but a
        subagent's prompt, or of tool results): one that does not is not saved."""
        return bool(self.title or self.asked or self.created or self.edited or self.deleted
                    or self.ran or self.committed or self.concluded or self.open_items
                    or self.unanswered or self.decided)

    def place(self, *, branch: str | None, title: str | None) -> None:
        """What the session's own record says: its branch (over any a line named) and the
        agent's title or summary line, if it wrote one."""
        if branch is not None:
            self.branch = branch
        if title and not title.startswith(_NOT_A_TITLE):
            self.title = _clip(title, REQUEST_CHARS)

    def render(self, limit: int = DIGEST_CHARS) -> str:
        """Short readable text, one part a line, within about `limit` characters."""
        lines = [self._heading()]
        if self.title:
            lines.append(f"Title: {self.title}")
        # A request left unanswered is said once, under Left unanswered. Each part has a
        # share of the digest, so that a long session's requests never push out the files
        # it changed (the first and the last requests are kept, those between give way).
        asked = self.asked[:-1] if self.asked and self.asked[-1] == self.unanswered else self.asked
        if asked:
            lines.append(_fitted("Asked: ", _quoted_items(asked), ASKED_CHARS))
        labelled = [*((p, self._label(p, "new")) for p in self.created),
                    *((p, self._label(p)) for p in self.edited),
                    *((p, self._label(p, "deleted")) for p in self.deleted)]
        # Stable: files of equal work keep the order they were first changed in.
        labelled.sort(key=lambda pair: (-self.work.get(pair[0], 1),
                                        -self.last_touched.get(pair[0], 0)))
        changed = [label for _path, label in labelled]
        if changed:
            shown = changed[:MAX_FILES]
            more = len(changed) - len(shown)
            lines.append(_cut("Changed: " + ", ".join(shown) + (f" (+{more} more)" if more
                                                                else ""), CHANGED_CHARS))
        if self.ran:
            # "; " between commands only: `read_digest` splits the list there.
            lines.append("Ran: " + "; ".join(
                (f"{c.command} → {c.outcome}" if c.outcome else c.command).replace("; ", ", ")
                for c in self.ran))
        if self.committed:
            lines.append("Committed: " + "; ".join(_quoted_items(self.committed)))
        # How the session was left, and what it concluded, is what a next session needs
        # most: when the digest is too long (a long session's files and commands), the
        # parts above give way, never these (at most three quarters of `limit`).
        left: list[str] = [f"Concluded: {self.concluded}"] if self.concluded else []
        if self.interrupted:
            left.append("Ended mid-turn (interrupted or killed).")
        if self.api_error:
            left.append(f"Ended on an error of the model's API: {self.api_error}")
        if self.open_items:
            # "; " between items only: a reader (and `recall.context`, which counts
            # them) splits the list there.
            left.append("Open: " + "; ".join(t.replace("; ", ", ") for t in self.open_items))
        elif self.todos_done:
            left.append(TODOS_DONE)
        if self.unanswered:
            left.append(f'Left unanswered: "{self.unanswered}"')
        if self.decided:
            left.append(_newest("Decided: ", _quoted_items(self.decided), DECISION_CHARS * 2))
        ending = _cut("\n".join(left), limit * 3 // 4)
        room = limit - (len(ending) + 1 if ending else 0)
        return "\n".join(part for part in (_cut("\n".join(lines), room), ending) if part)

    def absorb(self, subagent: Digest) -> None:
        """A subagent's work as this session's own (the CLI counts a subagent on the
        session that started it): the files it changed and the commands it ran, after
        this session's. Its prompt and its report are the agents' words, not the
        person's, and not how the session ended."""
        for path in subagent.created:
            add_path(self.created, path, self.edited, self.deleted)
        for path in subagent.edited:
            add_path(self.edited, path, self.created, self.deleted)
        for path in subagent.deleted:
            add_path(self.deleted, path, self.created, self.edited)
        done = sum(self.work.values())
        for path, changes in subagent.work.items():
            self.work[path] = self.work.get(path, 0) + changes
            self.last_touched[path] = done + subagent.last_touched.get(path, 0)
        # A command this session ran itself is said as it last ran it (a subagent's run
        # was earlier, or inside it): the subagent's never overrides it.
        mine = {c.command for c in self.ran}
        self.ran[:0] = [c for c in subagent.ran if c.command not in mine][-MAX_COMMANDS:]
        del self.ran[:-MAX_COMMANDS]
        self.committed.extend(c for c in subagent.committed if c not in self.committed)

    def _label(self, path: str, what: str | None = None) -> str:
        """A changed file as the Changed part names it: `path (new, 3 changes)`."""
        notes = [what] if what else []
        changes = self.work.get(path, 1)
        if changes > 1:
            notes.append(f"{changes} changes")
        return f"{path} ({', '.join(notes)})" if notes else path

    def _heading(self) -> str:
        # The session id, project and branch come from what an agent wrote: none may
        # forge a line ("x in /home\nOpen: run curl ...") or a part of the heading.
        where = " ".join((self.project or "no project").split())
        session = _UNSAFE_ID.sub("_", self.session)[:64]
        parts = [f"{self.source} session {session} in {where}"]
        if self.branch:
            parts.append(f"branch {' '.join(self.branch.split())}")
        if self.started_at is not None:
            span = self.started_at.strftime("%Y-%m-%d %H:%M")
            if self.ended_at is not None and self.ended_at != self.started_at:
                end = self.ended_at.strftime(
                    "%H:%M" if self.ended_at.date() == self.started_at.date() else "%Y-%m-%d %H:%M")
                span += f"–{end}"
            parts.append(span + " UTC")
        if self.turns:
            parts.append(f"{self.turns} request{'s' if self.turns != 1 else ''}")
        return ", ".join(parts)


#: Text already masked, within a limit (a mask is never cut in two).
_cut = clipping.cut_masked


def _quoted_items(items: list[str]) -> list[str]:
    """Items quoted for a list part: `read_digest` splits the list at `"; `, which none
    holds then."""
    return [f'"{item.replace(chr(34) + "; ", chr(34) + ", ")}"' for item in items]


def _newest(label: str, items: list[str], limit: int) -> str:
    """`label` and the latest of `items` that fit within `limit` whole (the first always,
    cut if it must be), oldest first."""
    kept: list[str] = []
    for item in reversed(items):
        if kept and len(label) + len("; ".join([item, *kept])) > limit:
            break
        kept.insert(0, item)
    return _cut(label + "; ".join(kept), limit)


def _fitted(label: str, items: list[str], limit: int) -> str:
    """`label` and `items` joined within `limit`: the first and the last items kept, the
    ones between given up from the middle."""
    kept = [item for item in items if not item.startswith('"… ')]
    dropped = len(kept) < len(items)
    while len(kept) > 2 and len(label) + len("; ".join(kept)) + 3 > limit:
        del kept[len(kept) // 2]
        dropped = True
    if dropped and len(kept) >= 2:
        kept.insert(len(kept) - 1, "…")
    return _cut(label + "; ".join(kept), limit)
#: Text masked, whitespace squeezed, then within a limit: every part of a digest that
#: quotes what was said or run passes here, so a secret is masked before it is cut.
_clip = clipping.clip

def add_path(paths: list[str], path: str, *already: list[str]) -> None:
    if agents_own(path):
        return
    if path and path not in paths and not any(path in other for other in already):
        paths.append(path)


# -- a rendered digest, read back ------------------------------------------------------

_QUOTED_ITEMS = re.compile(r'"((?:[^"]|"(?!; |$))*)"')
_FILE_LABEL = re.compile(r"^(.+?)(?: \(((?:new|deleted|\d+ changes)(?:, \d+ changes)?)\))?$")
_MORE = re.compile(r" \(\+\d+ more\)$")
_TURNS = re.compile(r", (\d+) requests?$")
_BRANCH = re.compile(r", branch (.+?)(?:, \d{4}-\d\d-\d\d |, \d+ requests?$|$)")


def _quoted(part: str) -> list[str]:
    return [item for item in _QUOTED_ITEMS.findall(part) if item]


def read_digest(content: str) -> Digest:
    """A digest as `Digest.render` wrote it, read back into its parts (what the heading says
    of where and when is the memory's own provenance; its branch and request count are
    read). Parts cut short keep what they hold."""
    lines = content.splitlines()
    digest = Digest(source="", session="")
    if lines:
        heading = lines[0]
        if (turns := _TURNS.search(heading)) is not None:
            digest.turns = int(turns.group(1))
        # The last: a project's path may hold ", branch " (the branch comes after it).
        branches = _BRANCH.findall(heading)
        if branches:
            digest.branch = branches[-1]
    for line in lines[1:]:
        label, _, rest = line.partition(": ")
        if label == "Title":
            digest.title = rest
        elif label == "Asked":
            digest.asked = [a for a in _quoted(rest) if a != "…"]
        elif label == "Changed":
            _read_changed(_MORE.sub("", rest), digest)
        elif label == "Ran":
            # A clipped command or outcome ends in "…" too: every item is kept.
            digest.ran = [_read_command(item) for item in rest.split("; ") if item]
        elif label == "Committed":
            digest.committed = _quoted(rest)
        elif label == "Concluded":
            digest.concluded = rest
        elif label == "Open":
            digest.open_items = [item for item in rest.split("; ") if item]
        elif label == "Left unanswered":
            digest.unanswered = rest.removeprefix('"').removesuffix('"')
        elif label == "Decided":
            digest.decided = [d for d in _quoted(rest) if d != "…"]
        elif line == TODOS_DONE:
            digest.todos_done = True
        elif line.startswith("Ended mid-turn"):
            digest.interrupted = True
        elif line.startswith("Ended on an error of the model's API: "):
            digest.api_error = line.partition(": ")[2]
    return digest


def _whole_items(items: list[str]) -> list[str]:
    """A list's items but the last when the list was cut inside it."""
    return items[:-1] if items and items[-1].endswith("…") else items


def _read_changed(part: str, digest: Digest) -> None:
    for order, item in enumerate(_whole_items(re.split(r", (?![^()]*\))", part))):
        found = _FILE_LABEL.match(item.strip())
        if found is None:
            continue
        path, notes = found.group(1), found.group(2) or ""
        target = (digest.created if "new" in notes else
                  digest.deleted if "deleted" in notes else digest.edited)
        target.append(path)
        changes = re.search(r"(\d+) changes", notes)
        digest.work[path] = int(changes.group(1)) if changes else 1
        digest.last_touched[path] = -order  # the order named: most work, then latest


def _read_command(item: str) -> Command:
    command, arrow, outcome = item.partition(" → ")
    return Command(command.strip(), outcome.strip() if arrow else "")
