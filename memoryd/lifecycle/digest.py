"""A session's digest: what it asked, changed, ran, committed, concluded and left open.

Built from the stored records alone, deterministically and offline (no model): the
person's own requests, the files each agent's edit tools touched, the commands that
matter (tests, builds, linters, git, package managers) with their outcome, commit
messages, the agent's last words and the last todo list's unfinished items are facts
in the transcript, not paraphrases. Pure: the caller reads the messages (`DigestMessage`,
with each tool row's raw line, where the outcome and the call's id live) and stores
the result.

Each agent's tools are mapped here: Claude Code (Edit, MultiEdit, Write, NotebookEdit,
Bash, TodoWrite), Codex (apply_patch, shell, exec_command, update_plan) and Gemini CLI
(write_file, replace, run_shell_command, write_todos).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memoryd.lifecycle.agent_tools import (
    EDIT_TOOLS,
    EXIT_STATUS,
    SHELL_TOOLS,
    TASK_CREATE,
    TASK_UPDATE,
    TODO_TOOLS,
    WRITE_TOOLS,
    Roots,
    agents_own,
    parse_json,
    relative,
    relative_in,
    shell_command,
)
from memoryd.lifecycle.markup import SYNTHETIC_REPLIES, api_error_text, without_injected
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
            _add(self.created, path, self.edited, self.deleted)
        for path in subagent.edited:
            _add(self.edited, path, self.created, self.deleted)
        for path in subagent.deleted:
            _add(self.deleted, path, self.created, self.edited)
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


# -- the person's words ----------------------------------------------------------------

#: Escaped blocks of memoryd's own (Gemini records hook output escaped in the prompt).
_NOT_A_REQUEST = ("[request interrupted", "this session is being continued",
                  "caveat: the messages below", "full transcript available at",
                  "[tool call did not complete", "base directory for this skill")


def _own_words(message: Readable) -> str | None:
    """What the person asked, whitespace squeezed: all of it, or (a long message) enough
    of it that clipping it to REQUEST_CHARS gives what clipping all of it would."""
    if message.role != "user" or message.kind != "message" or message.is_sidechain:
        return None
    text = clipping.clip(without_injected(message.content), REQUEST_CHARS)
    if not text or text.startswith("/") or text.lower().startswith(_NOT_A_REQUEST):
        return None
    return text


# -- decisions ---------------------------------------------------------------------------

#: Words by which a person or an agent states a decision (not a plan or a question):
#: "Decision: ...", "we decided ...", "we'll go with ...", "from now on ...".
_DECIDING = re.compile(
    r"(?i)(?:^|[\s*_(\[])(?:decision|decided)\s*:|\b(?:we|you and i)(?:'ve)?\s+(?:have\s+|had\s+)?"
    r"(?:decided|agreed|settled on|chose|opted)\b|\b(?:we(?:'ll| will| are going to|'re going to)|"
    r"let'?s)\s+(?:go with|stick with|switch to|standardi[sz]e on|keep using)\b|"
    r"\b(?:from now on|going forward)\b")
#: What a template holds where a decision goes ("Decision: [what was chosen]").
_PLACEHOLDER = re.compile(r"^\W*(?:decision|decided)\s*:\W*(?:\[[^\]]*\]|<[^>]*>|\.\.\.|…|tbd\b)",
                          re.I)
#: Where a message's sentences end: a full stop and a space, or a line break.
_SENTENCE_END = re.compile(r"(?<=[.!])\s+(?=[A-Z\"'(*])|\n+")
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_LIST_MARK = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+|\*\*|`+")
#: Every statement either pattern finds holds one of these (lower-cased): looked for first,
#: a message without any costs a few substring tests instead of the patterns' search.
_DECIDING_WORDS = ("decision", "decided", "agreed", "settled on", "chose", "opted", "go with",
                   "stick with", "switch to", "standardi", "keep using", "from now on",
                   "going forward")
#: A person (never an agent, which narrates its steps so) saying what they decided.
_PERSON_DECIDING = re.compile(f"{_DECIDING.pattern}|"
                              r"\bI(?:'ve| have)?\s+(?:decided|chose|settled on)\b")


def decisions_in(text: str, *, person: bool = False) -> list[str]:
    """The sentences of `text` that state a decision, in its own words (a "Decision:"
    line whole), code blocks and questions left out; masked and clipped. `person`: the
    person's words, where "I decided" is a decision too."""
    lowered = text.lower()
    if not any(word in lowered for word in _DECIDING_WORDS):
        return []
    deciding = _PERSON_DECIDING if person else _DECIDING
    if not deciding.search(text):
        return []
    found: list[str] = []
    for line in _FENCE.sub("\n", text).splitlines():
        if not deciding.search(line):
            continue
        label = re.search(r"(?i)\b(?:decision|decided)\s*:", line)
        sentences = [line[label.start():]] if label else [
            s for s in _SENTENCE_END.split(line) if deciding.search(s)]
        for sentence in sentences:
            said = _LIST_MARK.sub("", sentence).strip()
            if (len(said) < 12 or said.endswith(("?", ":")) or _PLACEHOLDER.match(said)
                    or len(said.split()) < 3):
                continue
            found.append(_clip(said, DECISION_CHARS))
    return found


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


def _choose_requests(requests: Sequence[str]) -> list[str]:
    """De-duplicated, clipped; the first and the last kept when there are many."""
    seen: set[str] = set()
    unique = []
    for text in requests:
        key = text.lower()
        if key not in seen:
            seen.add(key)
            unique.append(text)  # masked and clipped by `_own_words`
    if len(unique) <= MAX_REQUESTS:
        return unique
    half = MAX_REQUESTS // 2
    return [*unique[:half], f"… {len(unique) - MAX_REQUESTS} more …", *unique[-half:]]


# -- tools -----------------------------------------------------------------------------

_PATCH = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$", re.M)
#: Commands worth a line: tests, builds, linters and formatters, git, package managers.
_MATTERS = re.compile(
    r"^(?:sudo\s+)?(?:[\w./-]*/)?(?:pytest|py\.test|tox|nox|ruff|mypy|pyright|flake8|black|"
    r"isort|pylint|python3?\s+-m\s+(?:pytest|unittest|mypy|ruff|pip|build)|pip3?|uv|poetry|"
    r"npm|npx|yarn|pnpm|bun|node\s+--test|jest|vitest|tsc|eslint|prettier|cargo|rustc|go|"
    r"make|cmake|ctest|ninja|mix|elixir|iex|rebar3|gradlew?|mvn|dotnet|bundle|rake|rspec|"
    r"rails|swift|xcodebuild|git|docker|docker-compose|terraform|kubectl|deno|phpunit|"
    r"composer|\./[\w./-]*test[\w.-]*)(?:\s|$)")
_COMMIT_RESULT = re.compile(r"^\[[^\]\n]+ [0-9a-f]{7,40}\] (.+)$", re.M)
_COMMIT_MESSAGE = re.compile(r"""-m\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|(\S+))""")
_HEREDOC_MESSAGE = re.compile(r"<<\s*'?(\w+)'?\s*\n(.*?)\n\s*\1", re.S)
_REDIRECT = re.compile(r"(?:^|[;&|]\s*)(?:cat|echo|printf|tee)\b[^>\n|;&]*>{1,2}\s*([\w./@+-]+)")
_REMOVE = re.compile(
    r"(?:^|[;&|]\s*)(?:git\s+)?rm\s+(?:--?[\w-]+\s+)*([\w./@+-]+(?:\s+[\w./@+-]+)*)")


_GIT_COMMIT = re.compile(r"^git\s+commit\b")


#: A heredoc's body: text fed to a command, not commands (`python - <<EOF ... EOF`).
_HEREDOC_BODY = re.compile(r"(<<-?\s*['\"]?(\w+)['\"]?)[^\n]*\n.*?\n\s*\2\b", re.S)
#: What a command part carries that says nothing of what was run: leading variable
#: assignments and `timeout N`, stream plumbing, and a trailing pipe into a filter.
_ENV_PREFIX = re.compile(
    r"^(?:(?:export\s+)?\w+=(?:'[^']*'|\"[^\"]*\"|\S*)\s+|timeout\s+\d+\w?\s+)+")
_PLUMBING = re.compile(r"\s*(?:\d?>&\d|&?\d?>>?\s*[^\s|&;]+)|\s+#(?:\s.*)?$")
_FILTER_PIPE = re.compile(r"\s*\|\s*(?:tail|head|grep|egrep|rg|less|more|cat|wc|sort|uniq|"
                          r"cut|sed|awk|jq|tee|column|tr)\b.*$")
#: Commands that change nothing and check nothing: their passing is not worth a line
#: (a failure still is). `git add` is a commit's step: the commit says it.
_IDLE = re.compile(
    r"^(?:sudo\s+)?(?:git\s+(?:status|diff|log|show|add|branch\s*$|remote(?:\s+-v)?\s*$|"
    r"rev-parse|ls-files|stash\s+list|config\s+--get)|"
    r"(?:docker|docker-compose|docker\s+compose)\s+(?:ps|images|logs|inspect|version|config)|"
    r"(?:pip3?|uv\s+pip|poetry|npm|pnpm|yarn)\s+(?:list|ls|show|freeze|view|outdated)|"
    r"kubectl\s+(?:get|describe|logs)|go\s+(?:version|env)|cargo\s+--version|"
    r"[\w./-]+\s+(?:--version|-V|version|--help|-h)\s*$)")


def _parts(command: str) -> list[str]:
    command = _HEREDOC_BODY.sub(r"\1", command)
    bare = (_bare(p) for p in re.split(r"&&|\|\||;|\n|(?<![>&|])&(?![>&])", command))
    return [part for part in bare if part]


def _bare(part: str) -> str:
    """A command part as its program, subcommand and meaningful arguments."""
    part = _ENV_PREFIX.sub("", part.strip())
    part = _PLUMBING.sub("", part)
    return _FILTER_PIPE.sub("", part).strip()


def _matters(command: str) -> bool:
    return any(_MATTERS.match(part) for part in _parts(command))


def _shown(command: str, passed: bool = False, committed: bool = False) -> str:
    """The parts of a command line that matter (`cd x && FOO=1 mix test 2>&1 | tail`
    reads `mix test`), each clipped: what was run, not the whole script. When it passed,
    the parts that change and check nothing are left out (`git status`, `docker ps`,
    `x --version`), and so is a commit whose message is said under Committed: "" when
    nothing is left."""
    parts = [p for p in _parts(command) if _MATTERS.match(p)] or _parts(command)[:1]
    if passed:
        parts = [p for p in parts if not _IDLE.match(p)
                 and not (committed and _GIT_COMMIT.match(p))]
    parts = ["git commit" if _GIT_COMMIT.match(p) else p for p in parts]
    return " && ".join(_clip(p, COMMAND_PART_CHARS) for p in parts[:3]) + (
        " && …" if len(parts) > 3 else "")


#: What the agent's harness answers instead of the command's output: the outcome's kind.
_HARNESS = ((re.compile(r"^Command timed out after (\S+)"), "timed out after {0}"),
            (re.compile(r"^\[Request interrupted by user"), "interrupted by the person"),
            (re.compile(r"^The user doesn't want to (?:proceed|take)"), "refused by the person"),
            (re.compile(r"^Command was cancelled by user"), "cancelled by the person"),
            (re.compile(r"^\[Operation Cancelled\]"), "cancelled by the person"),
            (re.compile(r"^ERROR: .* was blocked\b"), "blocked by the agent's sandbox"))
#: A line that says what went wrong (a traceback's last line, an `error:`), found before
#: banners, warnings and a traceback's frames.
_ERROR_LINE = re.compile(
    r"^(?:\w*(?:Error|Exception|Exit)\b|(?:\S+:?\s+)?(?:error|ERR!|fatal|FAILED|FAIL)\b|"
    r"(?i:.*\b(?:not found|no such file|permission denied|cannot|can't|unable to|"
    r"nothing to commit|syntax error)\b))")
_WARNING_LINE = re.compile(r"^(?:\S+\s+)?warn(?:ing)?\b|\blevel=warn", re.I)


def _verdict(text: str) -> str | None:
    """The harness's answer in place of the output, in a few words, or None."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = first.removeprefix("[tool error]").strip()
    for pattern, said in _HARNESS:
        found = pattern.match(first)
        if found:
            return said.format(*found.groups())
    return None


#: The lines Codex writes above a command's output (`exec_command`, `shell`): not what it said.
_RUN_HEADER = re.compile(r"^(?:Chunk ID|Wall time|Process exited with code|Exit code|"
                         r"Process running with session ID|Original token count|Output):")


def _first_line(text: str) -> str:
    """What a failure says (the harness's own verdicts are read before, by `_verdict`):
    the line that names the error (a traceback's exception, not its first frame), else
    the first line that is not a warning."""
    lines = [line.strip().removeprefix("[tool error]").strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not _RUN_HEADER.match(line)]
    if not lines:
        return ""
    telling = [line for line in lines if _ERROR_LINE.match(line)
               and not _WARNING_LINE.match(line)]
    if lines[0].startswith("Traceback") and telling:
        return _clip(telling[-1], ERROR_CHARS)
    said = [line for line in lines if not _WARNING_LINE.match(line)] or lines
    return _clip(telling[0] if telling else said[0], ERROR_CHARS)


@dataclass(slots=True)
class _Call:
    name: str
    args: Any
    call_id: str | None
    result: str | None = None
    failed: bool | None = None


def _calls_of(message: Readable, record: Any) -> list[_Call]:
    """The tool calls a message made (`record`: its line, parsed), with their ids where the
    line has them."""
    if isinstance(record, dict) and isinstance(record.get("toolCalls"), list):  # Gemini
        calls = []
        for call in record["toolCalls"]:
            if not isinstance(call, dict):
                continue
            status = call.get("status")
            output = _gemini_output(call)
            calls.append(_Call(str(call.get("name") or "tool"), call.get("args"),
                               call.get("id") if isinstance(call.get("id"), str) else None,
                               output, None if status is None else status != "success"))
        return calls
    call_id = None
    if isinstance(record, dict):
        payload = record.get("payload") if isinstance(record.get("payload"), dict) else None
        if payload is not None:  # Codex
            call_id = payload.get("call_id")
            if payload.get("type") == "custom_tool_call":
                return [_Call(message.tool_name or "tool", payload.get("input"), call_id)]
        content = (record.get("message") or {}).get("content") if isinstance(
            record.get("message"), dict) else None
        if isinstance(content, list):  # Claude: one tool_use block a line
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    return [_Call(str(block.get("name") or "tool"), block.get("input"),
                                  block.get("id") if isinstance(block.get("id"), str) else None)]
    return [_Call(message.tool_name or "tool", parse_json(message.tool_input), call_id)]


def _gemini_output(call: dict[str, Any]) -> str | None:
    for item in call.get("result") or []:
        if isinstance(item, dict):
            response = (item.get("functionResponse") or {}).get("response")
            if isinstance(response, dict):
                output = response.get("output", response.get("error"))
                if isinstance(output, str):
                    return output
    display = call.get("resultDisplay")
    return display if isinstance(display, str) else None


def _results_of(message: Readable,
                record: Any) -> list[tuple[str | None, str, bool | None]]:
    """(call id, text, failed) for each tool result a message holds (`record`: its line)."""
    if isinstance(record, dict):
        payload = record.get("payload") if isinstance(record.get("payload"), dict) else None
        if payload is not None:  # Codex
            output = payload.get("output")
            failed = None
            text = message.content
            decoded = (parse_json(output)
                       if isinstance(output, str) and output.startswith("{") else None)
            if isinstance(decoded, dict) and isinstance(decoded.get("metadata"), dict):
                code = decoded["metadata"].get("exit_code")
                failed = code != 0 if isinstance(code, int) else None
            return [(payload.get("call_id"), text, failed)]
        content = (record.get("message") or {}).get("content") if isinstance(
            record.get("message"), dict) else None
        if isinstance(content, list):  # Claude: tool_result blocks
            found = []
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    body = block.get("content")
                    if isinstance(body, list):
                        body = "\n".join(b.get("text", "") for b in body if isinstance(b, dict))
                    text = body if isinstance(body, str) else ""
                    error = block.get("is_error")
                    found.append((block.get("tool_use_id"), text,
                                  True if error is True else None))
            if found:
                return found
    failed = True if message.content.startswith("[tool error]") else None
    return [(None, message.content, failed)]


def _outcome(call: _Call) -> str:
    if call.result is None and call.failed is None:
        return ""
    text = call.result or ""
    failed = call.failed
    if failed is None:
        code = EXIT_STATUS.search(text)
        failed = code is not None and code.group(1) != "0"
    if not failed:
        return "passed"
    verdict = _verdict(text)
    if verdict:
        return verdict
    detail = _first_line(EXIT_STATUS.sub("", text) if text.lstrip().lower().startswith("exit")
                         else text)
    return f"failed: {detail}" if detail else "failed"


def _commit_message(command: str, result: str | None) -> str | None:
    if result:
        found = _COMMIT_RESULT.search(result)
        if found:
            return _clip(found.group(1), REQUEST_CHARS)
    if not re.search(r"\bgit\b[^\n;&|]*\bcommit\b", command):
        return None
    heredoc = _HEREDOC_MESSAGE.search(command)
    if heredoc:
        return _clip(heredoc.group(2).strip().splitlines()[0], REQUEST_CHARS)
    found = _COMMIT_MESSAGE.search(command)
    if found:
        message = next(g for g in found.groups() if g is not None)
        return _clip(message.replace('\\"', '"'), REQUEST_CHARS)
    return None


def _todo_items(args: Any) -> tuple[list[str], bool] | None:
    """The unfinished items of a todo list or plan a call wrote, and whether the list had
    any item at all; None if it wrote none."""
    if not isinstance(args, dict):
        return None
    items = args.get("todos", args.get("plan"))
    if not isinstance(items, list):
        return None
    left = []
    for item in items:
        if not isinstance(item, dict):
            continue
        status = str(item.get("status") or "pending").lower()
        text = item.get("content", item.get("step", item.get("description")))
        if isinstance(text, str) and status not in ("completed", "done", "cancelled"):
            left.append(_clip(text, REQUEST_CHARS))
    return left, bool(items)


#: How Claude Code answers a TaskCreate: "Task #3 created successfully: ...".
_TASK_MADE = re.compile(r"\bTask #(\w+) created")


class _Tasks:
    """Claude Code's tasks as its TaskCreate and TaskUpdate calls leave them."""

    def __init__(self) -> None:
        self.made = False
        self._subjects: dict[str, str] = {}
        self._done: set[str] = set()

    def apply(self, call: _Call) -> None:
        args = call.args if isinstance(call.args, dict) else {}
        if call.name == TASK_CREATE:
            subject = args.get("subject") or args.get("description") or args.get("title")
            if not isinstance(subject, str) or not subject.strip() or call.failed:
                return
            self.made = True
            found = _TASK_MADE.search(call.result or "")
            key = found.group(1) if found else f"#{len(self._subjects) + 1}"
            self._subjects[key] = _clip(subject, REQUEST_CHARS)
        elif call.name == TASK_UPDATE and not call.failed:
            key = str(args.get("taskId") or "")
            status = str(args.get("status") or "").lower()
            if key not in self._subjects:
                return
            if isinstance(args.get("subject"), str) and args["subject"].strip():
                self._subjects[key] = _clip(args["subject"], REQUEST_CHARS)
            if status in ("completed", "deleted"):
                self._done.add(key)
            elif status:
                self._done.discard(key)

    def open(self) -> list[str]:
        return [text for key, text in self._subjects.items() if key not in self._done]


def _changed_by_patch(patch: str, digest: Digest, project: Roots) -> None:
    for match in _PATCH.finditer(patch):
        verb, path, moved = match.group(1), match.group(2), match.group(3)
        if moved:
            _add(digest.created, _where(moved.strip(), project))
            _touch(digest, _where(moved.strip(), project))
        elif verb == "Add":
            _add(digest.created, _where(path.strip(), project))
        elif verb == "Delete":
            _add(digest.deleted, _where(path.strip(), project))
        else:
            _add(digest.edited, _where(path.strip(), project), digest.created)
        if not moved:
            _touch(digest, _where(path.strip(), project))


def _where(path: str, roots: Roots) -> str:
    """A changed file as a digest names it: relative to the project, one line, masked (a
    path is an agent's text like any other: it may hold a line break or a secret)."""
    return _clip(relative(path, roots), PATH_CHARS)


def _add(paths: list[str], path: str, *already: list[str]) -> None:
    if agents_own(path):
        return
    if path and path not in paths and not any(path in other for other in already):
        paths.append(path)


def _touch(digest: Digest, path: str) -> None:
    """One more change of `path` (see `Digest.work`)."""
    if path and not agents_own(path):
        digest.work[path] = digest.work.get(path, 0) + 1
        digest.last_touched[path] = sum(digest.work.values())


def _branch(record: Any) -> str | None:
    if isinstance(record, dict):
        branch = record.get("gitBranch")
        if isinstance(branch, str) and branch not in ("", "HEAD") and not branch.startswith("["):
            return branch
    return None


class DigestBuilder:
    """A session's digest built as its messages arrive, in order (`add`), then `finish`ed:
    recovery feeds it the messages it saves, so a session's messages are read once."""

    def __init__(self, *, source: str, session: str, project: str | None,
                 worktree: str | None = None) -> None:
        self._digest = Digest(source=source, session=session, project=project)
        self._roots: Roots = (worktree, project)
        self._requests: list[str] = []
        self._calls: dict[str, _Call] = {}
        self._ordered: list[_Call] = []
        self._last_assistant_text: str | None = None
        self._api_error = ""
        self._pending_request: str | None = None
        self._last_kind = ""
        #: The main agent has answered (not only a subagent inside the session).
        self._main_spoke = False

    def add(self, message: Readable) -> None:
        digest = self._digest
        if digest.first_index is None:
            digest.first_index = message.index
        digest.last_index = message.index
        if message.timestamp is not None:
            digest.started_at = digest.started_at or message.timestamp
            digest.ended_at = message.timestamp
        # A subagent's messages (inline, or its own session) are its work: its edits,
        # commands and answer count; its prompts are the agent's words (`_own_words`).
        kind = message.kind
        tool_row = kind in ("tool_call", "tool_result")
        # One parse of a line serves both what it says of the branch and of its tools.
        record = parse_json(message.raw) if message.raw and (
            tool_row or digest.branch is None) else None
        if digest.branch is None and record is not None:
            digest.branch = _branch(record)
        words = _own_words(message)
        if words is not None:
            self._decide(without_injected(message.content), person=True)
            self._requests.append(words)
            self._pending_request = words
            self._last_kind = "request"
            return
        if kind == "tool_call":
            for call in _calls_of(message, record):
                self._ordered.append(call)
                if call.call_id:
                    self._calls[call.call_id] = call
            self._last_kind = "tool_call"
        elif kind == "tool_result":
            for call_id, text, failed in _results_of(message, record):
                found = self._calls.get(call_id) if call_id else next(
                    (c for c in reversed(self._ordered) if c.result is None), None)
                if found is not None:
                    found.result = text
                    found.failed = failed if failed is not None else found.failed
            self._last_kind = "tool_result"
        elif kind == "api_error":
            # The agent never answered: the request stays pending, the conclusion is what
            # the agent last said, and the error is how the session was left if nothing
            # came after it.
            self._api_error = message.content
            self._last_kind = "api_error"
        elif (message.role == "assistant" and kind == "message" and message.content.strip()
              and message.content.strip() not in SYNTHETIC_REPLIES):
            if message.is_sidechain and self._main_spoke:
                return  # a subagent's report inside a session: the main agent concludes
            self._last_assistant_text = message.content
            if not message.is_sidechain:
                self._decide(message.content)
                self._main_spoke = True
                self._pending_request = None
            self._last_kind = "answer"

    def _decide(self, text: str, *, person: bool = False) -> None:
        decided = self._digest.decided
        for said in decisions_in(text, person=person):
            if said in decided:
                decided.remove(said)  # said again: where it was said last
            decided.append(said)
        del decided[:-MAX_DECISIONS]

    def build(self, messages: Iterable[Readable]) -> Digest:
        """`add` each of `messages`, then `finish`."""
        for message in messages:
            self.add(message)
        return self.finish()

    def finish(self) -> Digest:
        """The digest of the messages added, secrets masked in every part (what the
        session's own record says is `Digest.place`d on it). Once: the builder is spent."""
        digest = self._digest
        digest.turns = len(self._requests)
        digest.asked = _choose_requests(self._requests)
        todos: list[str] | None = None
        had_todo_items = False
        tasks = _Tasks()
        for call in self._ordered:
            _apply_call(call, digest, self._roots)
            written = _todo_items(call.args) if call.name in TODO_TOOLS else None
            if written is not None:
                todos, had_todo_items = written
            tasks.apply(call)
        if tasks.made:
            todos = [*(todos or []), *tasks.open()]
            had_todo_items = True
        digest.ran = digest.ran[-MAX_COMMANDS:]
        if self._last_assistant_text:
            digest.concluded = _clip(self._last_assistant_text, CONCLUSION_CHARS)
        digest.interrupted = self._last_kind in ("tool_call", "tool_result")
        if self._last_kind == "api_error":
            digest.api_error = _clip(api_error_text(self._api_error), ERROR_CHARS)
        digest.open_items = (todos or [])[:MAX_OPEN]  # each `_clip`ped
        digest.todos_done = todos == [] and had_todo_items
        if self._pending_request is not None:
            digest.unanswered = self._pending_request  # masked and clipped by `_own_words`
        self._ordered, self._calls = [], {}
        return digest


def build_digest(messages: Iterable[Readable], *, source: str, session: str,
                 project: str | None, title: str | None = None, worktree: str | None = None,
                 branch: str | None = None) -> Digest:
    """The digest of a session's messages, in order. Secrets are masked in every part."""
    digest = DigestBuilder(source=source, session=session, project=project,
                           worktree=worktree).build(messages)
    digest.place(branch=branch, title=title)
    return digest


def _apply_call(call: _Call, digest: Digest, project: Roots) -> None:
    args = call.args
    if call.name == "apply_patch":
        patch = args if isinstance(args, str) else (
            args.get("input", args.get("patch")) if isinstance(args, dict) else None)
        if isinstance(patch, str):
            _changed_by_patch(patch, digest, project)
        return
    if call.name in EDIT_TOOLS and isinstance(args, dict):
        path = args.get(EDIT_TOOLS[call.name])
        if isinstance(path, str):
            _add(digest.edited, _where(path, project), digest.created)
            _touch(digest, _where(path, project))
        return
    if call.name in WRITE_TOOLS and isinstance(args, dict):
        path = args.get(WRITE_TOOLS[call.name])
        if isinstance(path, str):
            where = _where(path, project)
            created = call.result is not None and "created" in call.result.lower()[:200]
            if created:
                _add(digest.created, where)
            else:
                _add(digest.edited, where, digest.created)
            _touch(digest, where)
        return
    if call.name not in SHELL_TOOLS:
        return
    command = shell_command(args)
    if not command:
        return
    for match in _REDIRECT.finditer(command):
        if not match.group(1).startswith("/dev/"):
            _add(digest.edited, _where(match.group(1), project))
    for match in _REMOVE.finditer(command):
        for path in match.group(1).split():
            if not path.startswith("-") and not path.isdigit():
                _add(digest.deleted, _where(path, project))
    message = _commit_message(command, call.result)
    if message:
        digest.committed.append(message)  # `_clip`ped
    if _matters(command):
        outcome = _outcome(call)
        # An idle part is said only when it failed: its passing, or no answer, tells nothing.
        shown = _shown(relative_in(command, project), passed=outcome in ("passed", ""),
                       committed=message is not None)
        if not shown:
            return
        ran = Command(shown, outcome)  # its parts `_clip`ped: masked
        if ran in digest.ran:  # said once, where it last happened
            digest.ran.remove(ran)
        digest.ran.append(ran)


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
