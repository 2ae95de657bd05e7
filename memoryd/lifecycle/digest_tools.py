"""Tool calls as a session's digest reads them: the calls a message made and their
results (what each agent's line says of them is read by that agent's parser,
`ingest.parsers.tool_reader_for`), the commands that matter and their outcome, commit
messages, todo lists and tasks (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memoryd.ingest.parsers import ToolReader
from memoryd.lifecycle.agent_tools import EXIT_STATUS, TASK_CREATE, TASK_UPDATE, parse_json
from memoryd.lifecycle.digest import COMMAND_PART_CHARS, ERROR_CHARS, REQUEST_CHARS, Readable
from memoryd.memory.privacy import clipping

#: Text masked, whitespace squeezed, then within a limit (a secret is masked before a cut).
_clip = clipping.clip

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


def command_matters(command: str) -> bool:
    return any(_MATTERS.match(part) for part in _parts(command))


def command_shown(command: str, passed: bool = False, committed: bool = False) -> str:
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
class ToolCall:
    name: str
    args: Any
    call_id: str | None
    result: str | None = None
    failed: bool | None = None


def calls_of(message: Readable, record: Any, reader: ToolReader) -> list[ToolCall]:
    """The tool calls a message made, with their ids and outcomes where its agent's line
    (`record`, parsed) has them (`reader`, the agent's own)."""
    uses = reader.uses(record, message.tool_name, message.tool_input) if isinstance(
        record, dict) else []
    if uses:
        return [ToolCall(u.name, u.args, u.call_id, u.output, u.failed) for u in uses]
    return [ToolCall(message.tool_name or "tool", parse_json(message.tool_input), None)]


def results_of(message: Readable, record: Any,
               reader: ToolReader) -> list[tuple[str | None, str, bool | None]]:
    """(call id, text, failed) for each tool result a message holds, as its agent's line
    (`record`) says where it says more than the message."""
    found = reader.outcomes(record, message.content) if isinstance(record, dict) else []
    if found:
        return [(o.call_id, o.text, o.failed) for o in found]
    failed = True if message.content.startswith("[tool error]") else None
    return [(None, message.content, failed)]


def outcome_of(call: ToolCall) -> str:
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


def commit_message(command: str, result: str | None) -> str | None:
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


def todo_items(args: Any) -> tuple[list[str], bool] | None:
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


class Tasks:
    """Claude Code's tasks as its TaskCreate and TaskUpdate calls leave them."""

    def __init__(self) -> None:
        self.made = False
        self._subjects: dict[str, str] = {}
        self._done: set[str] = set()

    def apply(self, call: ToolCall) -> None:
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
