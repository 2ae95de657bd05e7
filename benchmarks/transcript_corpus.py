"""Real agent transcripts as projects of sessions, for the continuation benchmark.

Reads the three agents' files as their CLIs write them, independently of memoryd's own
parsers (this is the benchmark's ground truth): Claude Code (`<project>/<id>.jsonl`, its
subagents in `<id>/subagents/agent-*.jsonl`), Codex (`rollout-*.jsonl`; a subagent's
rollout names its parent thread in `session_meta.payload.source.subagent`) and Gemini CLI
(`chats/session-*.json` or `.jsonl`; a subagent's chat has `kind: "subagent"`). Each
session becomes a list of events (the person's and the agent's words, tool calls with
their arguments, tool results), from which the benchmark reads what a session edited,
what it left open and what its tool traffic was; and it is written again into a HOME of
the agent's, its project moved and its times shifted.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: Tools that edit a file, and the argument naming it (Claude Code, Gemini CLI).
EDIT_ARGS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path",
             "NotebookEdit": "notebook_path", "write_file": "file_path",
             "replace": "file_path", "edit": "file_path"}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$",
                         re.M)
_TIME_KEYS = ("timestamp", "startTime", "lastUpdated")
_DONE = ("completed", "done", "cancelled", "deleted")


@dataclass
class Event:
    kind: str  # "user", "assistant", "call", "result"
    text: str = ""
    name: str = ""
    args: Any = None


@dataclass
class Session:
    agent: str
    path: Path
    id: str
    root: str  # the project's root, as the transcript names it
    cwd: str
    started: datetime
    ended: datetime
    events: list[Event]
    #: Where Gemini keeps the project's chats (`tmp/<name>`); a Codex or Gemini subagent's
    #: parent session id.
    project_dir: str = ""
    parent: str | None = None
    subagents: list[Session] = field(default_factory=list)

    def all_events(self) -> Iterator[Event]:
        yield from self.events
        for sub in self.subagents:
            yield from sub.all_events()

    def edited(self) -> list[str]:
        """Files this session (and its subagents) changed, relative to the project root."""
        found: list[str] = []
        for event in self.all_events():
            if event.kind != "call":
                continue
            paths: list[str] = []
            if event.name in EDIT_ARGS and isinstance(event.args, dict):
                path = event.args.get(EDIT_ARGS[event.name])
                if isinstance(path, str):
                    paths.append(path)
            patch = _patch_text(event)
            if patch:
                paths += [a or b for a, b in _PATCH_FILE.findall(patch)]
            for path in paths:
                path = path.strip()
                rel = path.removeprefix(self.root.rstrip("/") + "/")
                if not rel.startswith("/"):
                    rel = os.path.normpath(os.path.join(
                        os.path.relpath(self.cwd, self.root), rel)) if not path.startswith(
                        self.root) and self.cwd != self.root else rel
                if rel and rel not in found and not rel.startswith(("/", "..")):
                    found.append(rel)
        return found

    def open_items(self) -> list[str]:
        """The unfinished items of the session's last todo list or plan, and of its tasks."""
        items: list[str] = []
        tasks: dict[str, str] = {}
        done: set[str] = set()
        for event in self.events:
            if event.kind != "call" or not isinstance(event.args, dict):
                continue
            if event.name in ("TodoWrite", "write_todos", "update_plan"):
                listed = event.args.get("todos", event.args.get("plan")) or []
                items = [str(t.get("content", t.get("step", t.get("description"))))
                         for t in listed if isinstance(t, dict)
                         and str(t.get("status") or "pending").lower() not in _DONE]
            elif event.name == "TaskCreate":
                subject = event.args.get("subject")
                if isinstance(subject, str):
                    tasks[str(len(tasks) + 1)] = subject
            elif event.name == "TaskUpdate":
                status = str(event.args.get("status") or "").lower()
                if status in _DONE:
                    done.add(str(event.args.get("taskId")))
        return items + [s for k, s in tasks.items() if k not in done]

    def own_words(self) -> Iterator[str]:
        for event in self.all_events():
            if event.kind in ("user", "assistant"):
                yield event.text

    def quoted(self) -> Iterator[str]:
        """What a digest is asked to quote from tool traffic: the commands run, their
        results' first lines, the todo items."""
        for event in self.all_events():
            if event.kind == "call" and isinstance(event.args, dict):
                command = event.args.get("command", event.args.get("cmd"))
                if isinstance(command, list):
                    command = " ".join(str(c) for c in command)
                if isinstance(command, str):
                    yield command
                for todo in event.args.get("todos", event.args.get("plan")) or []:
                    if isinstance(todo, dict):
                        yield str(todo.get("content", todo.get("step", "")))
                if isinstance(event.args.get("subject"), str):
                    yield event.args["subject"]
            elif event.kind == "result":
                yield next((line for line in event.text.splitlines() if line.strip()), "")

    def tool_traffic(self) -> Iterator[str]:
        for event in self.all_events():
            if event.kind == "call":
                yield from strings(event.args)
            elif event.kind == "result":
                yield event.text


def _patch_text(event: Event) -> str | None:
    for text in strings(event.args):
        if "*** Begin Patch" in text or "*** Update File:" in text or "*** Add File:" in text:
            return text
    return None


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def when(text: Any) -> datetime | None:
    if not isinstance(text, str) or len(text) < 10:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _records(path: Path) -> list[Any]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    if path.name.endswith((".json", ".json.gz")):
        try:
            return [json.loads(data)]
        except ValueError:
            return []
    found = []
    for raw in data.splitlines():
        try:
            found.append(json.loads(raw))
        except ValueError:
            continue
    return [r for r in found if isinstance(r, dict)]


def _json_args(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


# -- each agent's files -----------------------------------------------------------------

def _claude_events(records: list[Any]) -> list[Event]:
    events = []
    for record in records:
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        role = record.get("type")
        if isinstance(content, str) and role in ("user", "assistant"):
            events.append(Event(role, content))
            continue
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and role in ("user", "assistant"):
                events.append(Event(role, str(block.get("text") or "")))
            elif block.get("type") == "tool_use":
                events.append(Event("call", name=str(block.get("name")),
                                    args=block.get("input")))
            elif block.get("type") == "tool_result":
                events.append(Event("result", "\n".join(strings(block.get("content")))))
        if isinstance(record.get("toolUseResult"), (dict, list, str)):
            events.append(Event("result", "\n".join(strings(record["toolUseResult"]))))
    return events


def load_claude(path: Path) -> Session | None:
    records = _records(path)
    stamps = [t for r in records if (t := when(r.get("timestamp"))) is not None]
    cwds = [r["cwd"] for r in records if isinstance(r.get("cwd"), str)
            and r["cwd"].startswith("/")]
    ids = [r["sessionId"] for r in records if isinstance(r.get("sessionId"), str)]
    if not stamps or not cwds or not ids or any(r.get("isSidechain") for r in records[:1]):
        return None
    cwd = min(cwds, key=len)
    session = Session("claude", path, ids[0], cwd, cwd, min(stamps), max(stamps),
                      _claude_events(records))
    stem = path.name.split(".")[0]
    for sub in sorted((path.parent / stem / "subagents").glob("agent-*.jsonl*")):
        if sub.name.startswith("agent-acompact"):
            continue  # the CLI's compaction of this session: not its work
        records = _records(sub)
        stamps = [t for r in records if (t := when(r.get("timestamp"))) is not None]
        if stamps:
            session.subagents.append(Session("claude", sub, sub.name.split(".")[0], cwd, cwd,
                                              min(stamps), max(stamps),
                                              _claude_events(records)))
    return session


def _codex_events(records: list[Any]) -> list[Event]:
    events = []
    for record in records:
        payload = record.get("payload")
        if record.get("type") != "response_item" or not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        if kind == "message" and payload.get("role") in ("user", "assistant"):
            text = "\n".join(str(c.get("text") or "") for c in payload.get("content") or []
                             if isinstance(c, dict))
            events.append(Event(str(payload["role"]), text))
        elif kind in ("function_call", "custom_tool_call"):
            args = _json_args(payload.get("arguments", payload.get("input")))
            events.append(Event("call", name=str(payload.get("name")), args=args))
        elif kind == "local_shell_call":
            events.append(Event("call", name="shell", args=payload.get("action")))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            events.append(Event("result", "\n".join(strings(_json_args(payload.get("output"))))))
    return events


def load_codex(path: Path) -> Session | None:
    records = _records(path)
    meta = next((r.get("payload") for r in records if r.get("type") == "session_meta"), None)
    stamps = [t for r in records if (t := when(r.get("timestamp"))) is not None]
    if not isinstance(meta, dict) or not stamps or not isinstance(meta.get("cwd"), str):
        return None
    source = meta.get("source")
    parent = None
    if isinstance(source, dict):
        spawn = (source.get("subagent") or {}) if isinstance(source.get("subagent"), dict) else {}
        parent = (spawn.get("thread_spawn") or {}).get("parent_thread_id") if isinstance(
            spawn.get("thread_spawn"), dict) else None
        if parent is None:
            return None  # a review or other sub-thread of no session
    cwd = str(meta["cwd"])
    return Session("codex", path, str(meta.get("id")), cwd, cwd, min(stamps), max(stamps),
                   _codex_events(records), parent=parent)


def _gemini_events(messages: list[Any]) -> list[Event]:
    events = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else "\n".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict)) if isinstance(
            content, list) else ""
        if message.get("type") == "user":
            events.append(Event("user", text))
        elif message.get("type") == "gemini":
            if text:
                events.append(Event("assistant", text))
            for call in message.get("toolCalls") or []:
                if isinstance(call, dict):
                    events.append(Event("call", name=str(call.get("name")),
                                        args=call.get("args")))
                    events.append(Event("result", "\n".join(strings(call.get("result")))
                                        or str(call.get("resultDisplay") or "")))
    return events


def load_gemini(path: Path, root: str) -> Session | None:
    records = _records(path)
    if not records:
        return None
    if path.name.endswith((".json", ".json.gz")):
        document = records[0]
        messages = document.get("messages") or []
    else:  # one record a line: the session's header, then messages (and `$set` updates)
        document = records[0]
        messages = [r for r in records[1:] if isinstance(r, dict) and "type" in r]
    if document.get("kind") == "subagent":
        return None
    stamps = [t for m in messages if isinstance(m, dict)
              and (t := when(m.get("timestamp"))) is not None]
    stamps += [t for key in ("startTime", "lastUpdated") if (t := when(document.get(key)))]
    if not stamps or not document.get("sessionId"):
        return None
    return Session("gemini", path, str(document["sessionId"]), root, root, min(stamps),
                   max(stamps), _gemini_events(messages), project_dir=path.parent.parent.name)


def _gemini_root(project_dir: Path, sessions_paths: list[Path]) -> str | None:
    """A Gemini project's root: its `.project_root`, else the deepest directory holding
    every absolute file path the sessions' edit tools name."""
    pointer = project_dir / ".project_root"
    if pointer.is_file():
        return pointer.read_text().strip()
    paths: list[str] = []
    for path in sessions_paths:
        for record in _records(path):
            for value in strings(record):
                if value.startswith("/") and value.count("/") > 2 and "\n" not in value:
                    paths.append(value)
    edited = [p for p in paths if re.match(r"^/(?:home|Users|root)/[^/]+/", p)]
    if not edited:
        return None
    common = os.path.commonpath([os.path.dirname(p) for p in edited[:2000]])
    return common if common.count("/") >= 2 else None


def _files(directory: Path) -> list[Path]:
    """Every file under `directory`, through symbolic links, in a stable order."""
    found = []
    for folder, _dirs, names in os.walk(directory, followlinks=True):
        found += [Path(folder) / name for name in names]
    return sorted(found)


def load_corpus(directories: list[Path]) -> list[Session]:
    """Every session under `directories` whose agent is recognised."""
    sessions: list[Session] = []
    for directory in directories:
        if not directory.is_dir():
            continue
        files = _files(directory)
        for path in files:
            name = path.name
            if name.startswith("rollout-") and ".jsonl" in name:
                found = load_codex(path)
            elif path.parent.name == "chats" and name.startswith("session-"):
                continue  # read with its project below
            elif (".jsonl" in name and "subagents" not in path.parts
                  and not name.startswith(("agent-", "history"))):
                found = load_claude(path)
            else:
                continue
            if found is not None:
                sessions.append(found)
        for chats in sorted({p.parent for p in files if p.parent.name == "chats"}):
            chat_files = [p for p in files if p.parent == chats
                          and p.name.startswith("session-")]
            root = _gemini_root(chats.parent, chat_files)
            if root is None:
                continue
            sessions += [s for p in chat_files if (s := load_gemini(p, root)) is not None]
    # A Codex subagent's rollout is its parent's work.
    by_id = {s.id: s for s in sessions if s.agent == "codex"}
    for session in [s for s in sessions if s.parent is not None]:
        if session.parent in by_id:
            by_id[session.parent].subagents.append(session)
    return [s for s in sessions if s.parent is None]


def projects(sessions: list[Session]) -> dict[str, list[Session]]:
    """Multi-session projects: an agent's sessions grouped by the shortest working
    directory among them (a sub-directory's sessions join their project), oldest first."""
    sessions = [s for s in sessions if s.root not in ("/tmp", "/tmp/project", "/")]
    grouped: dict[str, list[Session]] = {}
    for agent in ("claude", "codex", "gemini"):
        mine = [s for s in sessions if s.agent == agent]
        roots = sorted({s.root for s in mine}, key=len)
        for session in mine:
            root = next(r for r in roots if session.root == r or session.root.startswith(r + "/"))
            session.root = root
            grouped.setdefault(f"{agent}:{root}", []).append(session)
    return {key: sorted(found, key=lambda s: s.started) for key, found in grouped.items()
            if len(found) > 1}


# -- written again, elsewhere and later ---------------------------------------------------

def _shifted(value: Any, shift: timedelta) -> Any:
    if isinstance(value, dict):
        return {k: (_shift_text(v, shift) if k in _TIME_KEYS and isinstance(v, str)
                    else _shifted(v, shift)) for k, v in value.items()}
    if isinstance(value, list):
        return [_shifted(v, shift) for v in value]
    return value


def _shift_text(text: str, shift: timedelta) -> str:
    moment = when(text)
    if moment is None:
        return text
    return (moment + shift).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rewritten(path: Path, root: str, new_root: Path, shift: timedelta) -> str:
    """`path`'s text with the project moved to `new_root` and every time shifted."""
    records = _records(path)
    if path.name.endswith((".json", ".json.gz")):
        return json.dumps(_shifted(records[0], shift)).replace(root, str(new_root))
    return "\n".join(json.dumps(_shifted(r, shift)).replace(root, str(new_root))
                     for r in records) + "\n"


def _encode(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def transcript_path(home: Path, session: Session, cwd: str) -> Path:
    """Where the session's agent writes its transcript for a session in `cwd`."""
    if session.agent == "claude":
        return home / ".claude" / "projects" / _encode(cwd) / f"{session.id}.jsonl"
    if session.agent == "codex":
        day = session.started
        return (home / ".codex" / "sessions" / f"{day:%Y}" / f"{day:%m}" / f"{day:%d}"
                / session.path.name.removesuffix(".gz"))
    return (home / ".gemini" / "tmp" / (session.project_dir or "project") / "chats"
            / session.path.name.removesuffix(".gz"))


def place(home: Path, session: Session, new_root: Path, shift: timedelta) -> None:
    """Write `session` (and its subagents) into `home` as its agent would have, in
    `new_root` and `shift` later."""
    cwd = session.cwd.replace(session.root, str(new_root))
    Path(cwd).mkdir(parents=True, exist_ok=True)
    target = transcript_path(home, session, cwd)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(rewritten(session.path, session.root, new_root, shift))
    if session.agent == "gemini":
        (target.parent.parent / ".project_root").write_text(str(new_root))
    for sub in session.subagents:
        if session.agent == "claude":
            where = target.parent / session.id / "subagents" / sub.path.name.removesuffix(".gz")
        else:
            where = transcript_path(home, sub, cwd)
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(rewritten(sub.path, session.root, new_root, shift))
