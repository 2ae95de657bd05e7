"""A session's digest built from its messages, in order (`DigestBuilder`, `build_digest`):
the person's own requests, the decisions stated, the files each agent's edit tools
touched, the commands that matter with their outcome, the agent's last words and the last
todo list's unfinished items. Pure: the caller reads the messages (`DigestMessage`, with
each tool row's raw line, where the outcome and the call's id live) and stores the result.

Each agent's tools are mapped here: Claude Code (Edit, MultiEdit, Write, NotebookEdit,
Bash, TodoWrite), Codex (apply_patch, shell, exec_command, update_plan) and Gemini CLI
(write_file, replace, run_shell_command, write_todos).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memoryd.ingest.parsers import tool_reader_for
from memoryd.lifecycle.agent_tools import (
    EDIT_TOOLS,
    SHELL_TOOLS,
    TODO_TOOLS,
    WRITE_TOOLS,
    Roots,
    agents_own,
    parse_json,
    relative,
    relative_in,
    shell_command,
)
from memoryd.lifecycle.digest import (
    CONCLUSION_CHARS,
    DECISION_CHARS,
    ERROR_CHARS,
    MAX_COMMANDS,
    MAX_DECISIONS,
    MAX_OPEN,
    MAX_REQUESTS,
    PATH_CHARS,
    REQUEST_CHARS,
    Command,
    Digest,
    Readable,
    add_path,
)
from memoryd.lifecycle.digest_tools import (
    Tasks,
    ToolCall,
    calls_of,
    command_matters,
    command_shown,
    commit_message,
    outcome_of,
    results_of,
    todo_items,
)
from memoryd.lifecycle.markup import SYNTHETIC_REPLIES, api_error_text, without_injected
from memoryd.memory.privacy import clipping

#: Text masked, whitespace squeezed, then within a limit (a secret is masked before a cut).
_clip = clipping.clip

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

_PATCH = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$", re.M)
_REDIRECT = re.compile(r"(?:^|[;&|]\s*)(?:cat|echo|printf|tee)\b[^>\n|;&]*>{1,2}\s*([\w./@+-]+)")
_REMOVE = re.compile(
    r"(?:^|[;&|]\s*)(?:git\s+)?rm\s+(?:--?[\w-]+\s+)*([\w./@+-]+(?:\s+[\w./@+-]+)*)")


def _changed_by_patch(patch: str, digest: Digest, project: Roots) -> None:
    for match in _PATCH.finditer(patch):
        verb, path, moved = match.group(1), match.group(2), match.group(3)
        if moved:
            add_path(digest.created, _where(moved.strip(), project))
            _touch(digest, _where(moved.strip(), project))
        elif verb == "Add":
            add_path(digest.created, _where(path.strip(), project))
        elif verb == "Delete":
            add_path(digest.deleted, _where(path.strip(), project))
        else:
            add_path(digest.edited, _where(path.strip(), project), digest.created)
        if not moved:
            _touch(digest, _where(path.strip(), project))


def _where(path: str, roots: Roots) -> str:
    """A changed file as a digest names it: relative to the project, one line, masked (a
    path is an agent's text like any other: it may hold a line break or a secret)."""
    return _clip(relative(path, roots), PATH_CHARS)

def _touch(digest: Digest, path: str) -> None:
    """One more change of `path` (see `Digest.work`)."""
    if path and not agents_own(path):
        digest.work[path] = digest.work.get(path, 0) + 1
        digest.last_touched[path] = sum(digest.work.values())


class DigestBuilder:
    """A session's digest built as its messages arrive, in order (`add`), then `finish`ed:
    recovery feeds it the messages it saves, so a session's messages are read once."""

    def __init__(self, *, source: str, session: str, project: str | None,
                 worktree: str | None = None) -> None:
        self._digest = Digest(source=source, session=session, project=project)
        self._tools = tool_reader_for(source)
        self._roots: Roots = (worktree, project)
        self._requests: list[str] = []
        self._calls: dict[str, ToolCall] = {}
        self._ordered: list[ToolCall] = []
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
            digest.branch = self._tools.branch(record) if isinstance(record, dict) else None
        words = _own_words(message)
        if words is not None:
            self._decide(without_injected(message.content), person=True)
            self._requests.append(words)
            self._pending_request = words
            self._last_kind = "request"
            return
        if kind == "tool_call":
            for call in calls_of(message, record, self._tools):
                self._ordered.append(call)
                if call.call_id:
                    self._calls[call.call_id] = call
            self._last_kind = "tool_call"
        elif kind == "tool_result":
            for call_id, text, failed in results_of(message, record, self._tools):
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
        tasks = Tasks()
        for call in self._ordered:
            _apply_call(call, digest, self._roots)
            written = todo_items(call.args) if call.name in TODO_TOOLS else None
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


def _apply_call(call: ToolCall, digest: Digest, project: Roots) -> None:
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
            add_path(digest.edited, _where(path, project), digest.created)
            _touch(digest, _where(path, project))
        return
    if call.name in WRITE_TOOLS and isinstance(args, dict):
        path = args.get(WRITE_TOOLS[call.name])
        if isinstance(path, str):
            where = _where(path, project)
            created = call.result is not None and "created" in call.result.lower()[:200]
            if created:
                add_path(digest.created, where)
            else:
                add_path(digest.edited, where, digest.created)
            _touch(digest, where)
        return
    if call.name not in SHELL_TOOLS:
        return
    command = shell_command(args)
    if not command:
        return
    for match in _REDIRECT.finditer(command):
        if not match.group(1).startswith("/dev/"):
            add_path(digest.edited, _where(match.group(1), project))
    for match in _REMOVE.finditer(command):
        for path in match.group(1).split():
            if not path.startswith("-") and not path.isdigit():
                add_path(digest.deleted, _where(path, project))
    message = commit_message(command, call.result)
    if message:
        digest.committed.append(message)  # `_clip`ped
    if command_matters(command):
        outcome = outcome_of(call)
        # An idle part is said only when it failed: its passing, or no answer, tells nothing.
        shown = command_shown(relative_in(command, project), passed=outcome in ("passed", ""),
                       committed=message is not None)
        if not shown:
            return
        ran = Command(shown, outcome)  # its parts `_clip`ped: masked
        if ran in digest.ran:  # said once, where it last happened
            digest.ran.remove(ran)
        digest.ran.append(ran)
