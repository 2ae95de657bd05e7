"""memoryd's entries in an agent's JSON settings: recognised, merged in, taken out.

memoryd's hook entries are recognised by their command: `/bin/sh` running the
shell hook client (`memoryd-hook.sh`, which hands anything it cannot do to the
Python hook) with the memoryd executable and `hook --agent ...`; or, as earlier
installs wrote them, the memoryd executable followed by `hook --agent`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.errors import SettingsFileError
from memoryd.hooks.script import parse_command
from memoryd.names import Agent

SERVER_NAME = "memoryd"
#: The record's name for "install created this file".
FILE = "<file>"

#: The agent's own bound on a hook; memoryd's hook caps itself well below it.
AGENT_TIMEOUT_SECONDS = 10


@dataclass(slots=True)
class Record:
    """What install did to one file, so uninstall can undo exactly that: the containers it
    created, and the file's text before (restored when the document is back to it)."""

    created: list[list[str]] = field(default_factory=list)
    present: bool = False  # False: no record (older install, lost state): prune what empties
    original: str | None = None


def hook_argv(command: object) -> list[str] | None:
    """The `hook --agent ...` arguments of a memoryd hook's command; None for a command
    that is not memoryd's hook."""
    run = parse_command(command)
    return None if run is None else run.argv


def is_memoryd_hook(command: object) -> bool:
    return hook_argv(command) is not None


# -- JSON documents ---------------------------------------------------------------------

def load_json(path: Path) -> tuple[str | None, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsFileError(f"{path}: cannot be read ({exc})") from None
    if not text.strip():
        return text, {}
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise SettingsFileError(
            f"{path}: not valid JSON ({exc}); fix it or add memoryd by hand,"
            " memoryd will not rewrite a file it cannot parse") from None
    if not isinstance(document, dict):
        raise SettingsFileError(f"{path}: the settings must be a JSON object")
    return text, document


def dump_json(document: dict[str, Any], like: str | None = None) -> str:
    """The document as text, indented like `like` (the file's old text) where it can tell."""
    indent: int | str = 2
    if like:
        for line in like.splitlines()[1:]:
            stripped = line.lstrip(" \t")
            if stripped and len(stripped) < len(line):
                indent = line[:len(line) - len(stripped)]
                indent = len(indent) if set(indent) == {" "} else indent
                break
    text = json.dumps(document, indent=indent, ensure_ascii=False)
    return text + "\n" if like is None or like.endswith("\n") else text


def same_json(text: str, document: dict[str, Any]) -> bool:
    try:
        return bool(json.loads(text) == document) if text.strip() else document == {}
    except ValueError:
        return False


def _hook_entry(agent: Agent, event: str, command: str) -> dict[str, Any]:
    handler: dict[str, Any] = {"type": "command", "command": command}
    if agent == "gemini":
        handler = {"name": f"memoryd-{event}", **handler,
                   "timeout": AGENT_TIMEOUT_SECONDS * 1000}
    else:
        handler["timeout"] = AGENT_TIMEOUT_SECONDS
    return {"hooks": [handler]}


def _strip_hooks(document: dict[str, Any]) -> list[str]:
    """Remove memoryd's hook entries; the events whose lists it emptied."""
    emptied: list[str] = []
    hooks = document.get("hooks")
    if not isinstance(hooks, dict):
        return emptied
    for event, groups in list(hooks.items()):
        if not isinstance(groups, list):
            continue
        kept = []
        removed = False
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(handlers, list) and handlers and all(
                    isinstance(h, dict) and is_memoryd_hook(h.get("command"))
                    for h in handlers):
                removed = True
                continue
            kept.append(group)
        if removed:
            hooks[event] = kept
            if not kept:
                emptied.append(event)
    return emptied


def merge_hooks(document: dict[str, Any], agent: Agent, commands: dict[str, str],
                record: Record) -> dict[str, Any]:
    """The document with memoryd's hooks (replacing any earlier ones of memoryd's)."""
    document = json.loads(json.dumps(document))
    _strip_hooks(document)
    hooks = document.get("hooks")
    if hooks is None:
        hooks = document["hooks"] = {}
        note_created(record, ["hooks"])
    if not isinstance(hooks, dict):
        raise SettingsFileError("its `hooks` is not an object; memoryd will not rewrite it")
    for event, command in commands.items():
        groups = hooks.get(event)
        if groups is None:
            groups = hooks[event] = []
            note_created(record, ["hooks", event])
        if not isinstance(groups, list):
            raise SettingsFileError(f"its `hooks.{event}` is not a list")
        groups.append(_hook_entry(agent, event, command))
    return document


def unmerge_hooks(document: dict[str, Any], record: Record) -> dict[str, Any]:
    document = json.loads(json.dumps(document))
    emptied = _strip_hooks(document)
    hooks = document.get("hooks")
    if isinstance(hooks, dict):
        for event in emptied:
            if ["hooks", event] in record.created or not record.present:
                hooks.pop(event, None)
        if not hooks and (["hooks"] in record.created or not record.present):
            document.pop("hooks")
    return document


def merge_server(document: dict[str, Any], entry: dict[str, Any],
                 record: Record) -> dict[str, Any]:
    document = json.loads(json.dumps(document))
    servers = document.get("mcpServers")
    if servers is None:
        servers = document["mcpServers"] = {}
        note_created(record, ["mcpServers"])
    if not isinstance(servers, dict):
        raise SettingsFileError("its `mcpServers` is not an object")
    servers[SERVER_NAME] = entry
    return document


def unmerge_server(document: dict[str, Any], record: Record) -> dict[str, Any]:
    document = json.loads(json.dumps(document))
    servers = document.get("mcpServers")
    if isinstance(servers, dict) and SERVER_NAME in servers:
        servers.pop(SERVER_NAME)
        if not servers and (["mcpServers"] in record.created or not record.present):
            document.pop("mcpServers")
    return document


#: memoryd's MCP tools that only read memory: `mcp install` lets Claude Code run them without
#: asking (its `permissions.allow`), so `claude -p` can use them at all. Those that write
#: or forget still ask.
READ_ONLY_TOOLS = ("recall", "recall_temporal", "get_memory", "memory_context",
                   "search_sessions")
ALLOW_RULES = tuple(f"mcp__{SERVER_NAME}__{tool}" for tool in READ_ONLY_TOOLS)


def merge_allow(document: dict[str, Any], record: Record) -> dict[str, Any]:
    """The document with an allow rule for each of memoryd's read-only tools."""
    document = json.loads(json.dumps(document))
    permissions = document.get("permissions")
    if permissions is None:
        permissions = document["permissions"] = {}
        note_created(record, ["permissions"])
    if not isinstance(permissions, dict):
        raise SettingsFileError("its `permissions` is not an object")
    allow = permissions.get("allow")
    if allow is None:
        allow = permissions["allow"] = []
        note_created(record, ["permissions", "allow"])
    if not isinstance(allow, list):
        raise SettingsFileError("its `permissions.allow` is not a list")
    for rule in ALLOW_RULES:
        if rule not in allow:
            allow.append(rule)
            note_created(record, ["permissions", "allow", rule])
    return document


def unmerge_allow(document: dict[str, Any], record: Record) -> dict[str, Any]:
    """The document without the allow rules install added (a person's own stay)."""
    document = json.loads(json.dumps(document))
    permissions = document.get("permissions")
    allow = permissions.get("allow") if isinstance(permissions, dict) else None
    if not isinstance(allow, list):
        return document
    assert isinstance(permissions, dict)
    permissions["allow"] = [rule for rule in allow if not (
        rule in ALLOW_RULES and (["permissions", "allow", rule] in record.created
                                 or not record.present))]
    if not permissions["allow"] and ["permissions", "allow"] in record.created:
        del permissions["allow"]
    if not permissions and ["permissions"] in record.created:
        del document["permissions"]
    return document


def note_created(record: Record, container: list[str]) -> None:
    if container not in record.created:
        record.created.append(container)
