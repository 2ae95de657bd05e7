"""Each agent's tools as memory reads them: which edit files, which run commands, which
keep a todo list, and one short line that says what a call did.

Claude Code (Edit, MultiEdit, Write, NotebookEdit, Read, Bash, Grep, Glob, TodoWrite,
Task), Codex (apply_patch, shell, exec_command, update_plan) and Gemini CLI (write_file,
replace, read_file, run_shell_command, write_todos) name the same acts differently; the
digest (`digest.py`) and the memory text of a segment (`segments.py`) both read them
from here, so a fourth agent's tools are added in one place.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import orjson

from memoryd.memory.privacy import clipping

#: Tools that change one file in place, and the argument that names it.
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path",
              "replace": "file_path", "edit": "file_path"}
#: Tools that write a whole file (a new one, or over an old one).
WRITE_TOOLS = {"Write": "file_path", "write_file": "file_path"}
SHELL_TOOLS = ("Bash", "shell", "exec_command", "run_shell_command", "local_shell",
               "container.exec", "shell_command")
TODO_TOOLS = ("TodoWrite", "update_plan", "write_todos")
#: Claude Code 2.1's task tools: one task each call (`TaskCreate` {subject, description},
#: answered "Task #N created successfully: ..."), changed by id (`TaskUpdate` {taskId,
#: status: pending | in_progress | completed | deleted}).
TASK_CREATE, TASK_UPDATE = "TaskCreate", "TaskUpdate"
#: Arguments that name what a call worked on, in the order they are looked for.
_TARGET_KEYS = ("file_path", "notebook_path", "absolute_path", "path", "file", "dir_path",
                "pattern", "url", "query", "subject", "description", "prompt", "name")
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.M)
#: A tool input cut short by the parser is no longer JSON: its string fields are still
#: found where they stand.
_STRING_FIELD = re.compile(r'"(\w+)"\s*:\s*"((?:[^"\\]|\\.){0,400})')
#: Exit statuses as agents write them into a command's output.
EXIT_STATUS = re.compile(r"(?:exit code|exited with code|exit status)[:\s]+(-?\d+)", re.I)
TARGET_CHARS = 80
COMMAND_CHARS = 80


_JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_JSON_CHARS = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
               "t": "\t"}


def unescape_json(text: str) -> str:
    """JSON string escapes in `text` decoded where they stand (a clipped input is no
    longer JSON, so it cannot be parsed)."""
    if "\\" not in text:
        return text
    return _JSON_ESCAPE.sub(
        lambda m: _JSON_CHARS.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), text)


def parse_json(text: str | bytes | None) -> Any:
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


#: The directories a session's paths are shown relative to: its own working tree (a
#: worktree, when it ran in one) and its project's root, first match wins.
Roots = str | tuple[str | None, ...] | None


def relative(path: str, roots: Roots) -> str:
    for root in (roots,) if not isinstance(roots, tuple) else roots:
        if root and path.startswith(root.rstrip("/") + "/"):
            return path[len(root.rstrip("/")) + 1:]
    return path


#: Where an agent keeps its own files in a home directory (Claude Code's plans, memory,
#: settings), and scratch directories: a file there, outside the project, is the agent's
#: note or a throwaway, not the project's.
_AGENT_HOME_FILE = re.compile(r"^(?:(?:/|~/)(?:.*/)?\.(?:claude|codex|gemini)/|/tmp/|/var/tmp/)")


def agents_own(path: str) -> bool:
    """Whether a changed file (as `relative` left it) is an agent's own, outside the project."""
    return bool(_AGENT_HOME_FILE.match(path))


def relative_in(text: str, roots: Roots) -> str:
    """`text` (a command line) with every path inside one of `roots` relative to it, as
    files are shown; a path that only begins like a root's (`/srv/<root>/`, `<root>-old/`)
    is left as written."""
    for root in (roots,) if not isinstance(roots, tuple) else roots:
        if root and root.rstrip("/"):
            text = re.sub(r"(?<![\w./~-])" + re.escape(root.rstrip("/")) + "/", "", text)
    return text


def shell_command(args: Any) -> str | None:
    """The command line a shell tool ran, as the person would type it."""
    if not isinstance(args, dict):
        return None
    command = args.get("command", args.get("cmd"))
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        if len(command) >= 3 and command[1] in ("-lc", "-c") and command[0].endswith(
                ("sh", "bash", "zsh")):
            return str(command[2])
        return shlex.join(command)
    return command if isinstance(command, str) else None


def _one_line(text: str, limit: int) -> str:
    return clipping.clip(text, limit)  # masked before it is cut


def describe_call(name: str, args: Any, project: Roots = None) -> str:
    """One short line for a call: `Edit lib/x.ex`, `Bash: mix test`, `TodoWrite: 3 items`;
    never the input's JSON or a file's contents."""
    if name == "apply_patch" or (isinstance(args, str) and "*** Begin Patch" in args):
        patch = args if isinstance(args, str) else (
            args.get("input", args.get("patch")) if isinstance(args, dict) else None)
        files = _PATCH_FILE.findall(patch) if isinstance(patch, str) else []
        shown = ", ".join(relative(f.strip(), project) for f in files[:4])
        more = f" (+{len(files) - 4} more)" if len(files) > 4 else ""
        return f"{name} {shown}{more}".rstrip()
    command = shell_command(args)
    if command is not None and (name in SHELL_TOOLS or "command" in args):
        return f"{name}: {_one_line(command, COMMAND_CHARS)}"
    if isinstance(args, dict):
        for key in ("todos", "plan"):
            if isinstance(args.get(key), list):
                return f"{name}: {len(args[key])} items"
        for key in _TARGET_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value.strip():
                value = relative(value, project) if key in _TARGET_KEYS[:6] else value
                return f"{name} {_one_line(value, TARGET_CHARS)}"
    return name


def describe_input(name: str | None, tool_input: str | None, content: str,
                   project: Roots = None) -> list[str]:
    """The lines of one stored tool call message: from its input (JSON text: a Claude or
    Codex call's arguments, or Gemini's list of calls), or, when that is missing or cut
    short, from the string fields left in its text."""
    args = parse_json(tool_input)
    if isinstance(args, list):  # Gemini: every call of one model turn
        lines = [describe_call(str(c.get("name") or "tool"), c.get("args"), project)
                 for c in args if isinstance(c, dict)]
        if lines:
            return lines
    tool = name or "tool"
    if args is None and tool_input and "*** Begin Patch" in tool_input:
        args = tool_input
    if args is None:
        fields = dict(_STRING_FIELD.findall(tool_input or content))
        args = {k: unescape_json(v) for k, v in fields.items()}
    return [describe_call(tool, args, project)]


def failure_of(content: str) -> str | None:
    """The first line of a tool result that failed (an agent's error mark, or a non-zero
    exit status in its output); None when it did not fail, as far as its text says."""
    text = content.strip()
    failed = text.startswith("[tool error]")
    if not failed:
        status = EXIT_STATUS.search(text[:400])
        failed = status is not None and status.group(1) != "0"
    if not failed:
        return None
    for line in text.splitlines():
        line = EXIT_STATUS.sub("", line.strip().removeprefix("[tool error]")).strip(" :")
        if line and not line.lower().startswith(("wall time", "output")):
            return _one_line(line, 160)
    return "failed"

