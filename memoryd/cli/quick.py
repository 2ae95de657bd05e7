"""The quick path of `status`, `sessions`, `recall`, `context`, `remember` and `mcp`.

These commands are typed, or run by scripts, many times a day; with the full
command line a process spends most of its life importing (pydantic settings,
the stores, the embedders) before asking the daemon one question. When the
daemon runs, this module asks it directly, with the standard library only (and
PyYAML when a config file names the state directory), and prints what the full
command prints (`cli.render`).

Anything it does not handle exactly returns None, and the full command line
runs instead: no daemon answering, `--help`, an option or value it does not
know (so click gives its usual message), settings given in the environment,
a config file it cannot read, `--stdin`.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from typing import Any

from memoryd.cli import render
from memoryd.errors import EX_DAMAGED, Unreachable
from memoryd.localhttp import request
from memoryd.locations import (
    config_checked,
    default_config_path,
    default_state_dir,
    expanded,
    read_config_file,
)
from memoryd.names import AGENTS, agent_name, project_path

COMMANDS = frozenset({"status", "sessions", "recall", "context", "remember", "mcp"})
#: Environment variables that change nothing here (the rest may: leave them to the CLI).
_HARMLESS_ENV = {"MEMORYD_CONFIG", "MEMORYD_STATE_DIR", "MEMORYD_POSTGRES_DSN",
                 "MEMORYD_GATEWAY_KEY", "MEMORYD_RERANK_API_KEY"}
TIMEOUT = 30.0
MIN_BUDGET = 100  # `memory.context.MIN_BUDGET` (a test keeps them equal)


class _Fallback(Exception):
    """Let the full command line handle this invocation."""


def run(argv: list[str]) -> int | None:
    """The exit status, or None to run the full command line."""
    try:
        config, command, args = _split(argv)
        state_dir, user = _settings(config)
        if command == "mcp":
            return _mcp(config, args)
        socket_path = os.path.join(state_dir, "memoryd.sock")
        if not os.path.exists(socket_path):
            return None
        return _COMMANDS[command](socket_path, user, args)
    except (_Fallback, Unreachable):
        return None


def _split(argv: list[str]) -> tuple[str | None, str, list[str]]:
    config = None
    rest = list(argv)
    if rest[:1] == ["--config"] and len(rest) >= 2:
        config, rest = rest[1], rest[2:]
    if not rest or rest[0] not in COMMANDS:
        raise _Fallback
    command, args = rest[0], rest[1:]
    if "--config" in args:
        at = args.index("--config")
        if at + 1 >= len(args) or config is not None:
            raise _Fallback
        config = args[at + 1]
        args = args[:at] + args[at + 2:]
    if {"-h", "--help"} & set(args):
        raise _Fallback
    return config, command, args


def _settings(config: str | None) -> tuple[str, str]:
    """The state directory and the memory user, as `load_settings` would find them."""
    if any(name.startswith("MEMORYD_") and name not in _HARMLESS_ENV for name in os.environ):
        raise _Fallback
    path = config or os.environ.get("MEMORYD_CONFIG")
    data: dict[str, Any] = {}
    text: str | None = None
    if path or default_config_path().exists():
        text, data = _read_config(str(expanded(path)) if path else str(default_config_path()))
    # A file's settings win over the environment's, as in `load_settings`.
    state = data.get("state_dir") or os.environ.get("MEMORYD_STATE_DIR")
    memory = data.get("memory") or {}
    if not isinstance(memory, dict) or (state is not None and not isinstance(state, str)):
        raise _Fallback
    user = memory.get("user") or _login()
    if not isinstance(user, str):
        raise _Fallback
    state_dir = str(expanded(state) if state else default_state_dir())
    if text is not None and not config_checked(text, state_dir):
        # Not checked since it changed: the full command line checks every key (and
        # exits 78 naming a bad one), then notes it for the next time.
        raise _Fallback
    return state_dir, user


def _read_config(path: str) -> tuple[str, dict[str, Any]]:
    try:
        import yaml

        text = read_config_file(path)
        loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception as exc:  # the full command line says what is wrong with it
        raise _Fallback from exc
    if loaded is None:
        return text, {}
    if not isinstance(loaded, dict):
        raise _Fallback
    return text, loaded


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


# -- arguments ----------------------------------------------------------------------------

def _options(args: list[str], flags: set[str], values: set[str],
             multi: frozenset[str] = frozenset(),
             positional: int = 0) -> tuple[dict[str, Any], list[str]]:
    """Options the way click reads these commands' (`--name value` or `--name=value`)."""
    found: dict[str, Any] = {}
    loose: list[str] = []
    items = iter(args)
    for item in items:
        if item == "--":
            loose.extend(items)
            break
        if item.startswith("--"):
            name, eq, inline = item.partition("=")
            if name in flags and not eq:
                found[name] = True
            elif name in values or name in multi:
                value = inline if eq else next(items, None)
                if value is None:
                    raise _Fallback
                if name in multi:
                    found.setdefault(name, []).append(value)
                elif name in found:
                    raise _Fallback
                else:
                    found[name] = value
            else:
                raise _Fallback
        elif item.startswith("-") and item != "-":
            raise _Fallback
        else:
            loose.append(item)
    if len(loose) != positional:
        raise _Fallback
    return found, loose


def _number(value: str | None, kind: type, low: float, high: float) -> Any:
    if value is None:
        return None
    try:
        number = kind(value)
    except ValueError:
        raise _Fallback from None
    if not low <= number <= high:
        raise _Fallback
    return number


def _agent(options: dict[str, Any]) -> dict[str, str]:
    try:
        name = agent_name(options.get("--agent"))
    except ValueError:
        raise _Fallback from None
    return {} if name is None else {"agent": name}


def _project(options: dict[str, Any]) -> str | None:
    value = options.get("--project")
    if value is None:
        return None
    if not value.strip():
        raise _Fallback
    return project_path(value)


# -- talking to the daemon ------------------------------------------------------------------

def _call(socket_path: str, user: str, operation: str, args: dict[str, Any]) -> Any:
    body = json.dumps({"interface": "cli", "client_user": user, **args}).encode()
    status, answer = request(socket_path, "POST", f"/v1/{operation}", body,
                             time.monotonic() + TIMEOUT)
    if status != 200 or not isinstance(answer, dict) or not answer.get("ok"):
        message = answer.get("error") if isinstance(answer, dict) else None
        print(f"memoryd: {message or f'the daemon answered {status}'}", file=sys.stderr)
        damaged = isinstance(answer, dict) and answer.get("damaged") is True
        raise SystemExit(EX_DAMAGED if damaged else render.EXIT_FOR_STATUS.get(status, 1))
    return answer


def _print(lines: list[str]) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))


# -- the commands -----------------------------------------------------------------------------

def _status(socket_path: str, user: str, args: list[str]) -> int:
    options, _ = _options(args, {"--json"}, set())
    status, answer = request(socket_path, "GET", "/v1/status", None,
                             time.monotonic() + TIMEOUT)
    if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get("status"),
                                                                        dict):
        raise _Fallback
    report = answer["status"]
    _print([render.json_text(report)] if options.get("--json") else render.status_lines(
        report, render.terminal_width(sys.stdout, os.environ)))
    return 0


def _sessions(socket_path: str, user: str, args: list[str]) -> int:
    options, _ = _options(args, {"--json", "--all"}, {"--status", "--source"})
    if options.get("--status") not in (None, "active", "paused", "ended"):
        raise _Fallback
    if options.get("--source") not in (None, *AGENTS):
        raise _Fallback
    rows = _call(socket_path, user, "list_sessions", {
        "status": options.get("--status"), "source": options.get("--source"),
        "all": bool(options.get("--all"))})["sessions"]
    _print([render.json_text(rows)] if options.get("--json") else render.session_lines(
        rows, render.terminal_width(sys.stdout, os.environ)))
    return 0


def _recall(socket_path: str, user: str, args: list[str]) -> int:
    options, (query,) = _options(args, {"--json", "--all-projects"},
                                 {"--project", "--limit", "--agent"}, positional=1)
    if not query.strip():
        raise _Fallback  # the full command says what is wrong
    limit = _number(options.get("--limit"), int, 1, 1000) or 10
    found = _call(socket_path, user, "recall", {
        "query": query, "project": _project(options), "limit": limit,
        "all_projects": bool(options.get("--all-projects")), **_agent(options)})["results"]
    _print([render.json_text(found)] if options.get("--json") else render.result_lines(
        found, render.terminal_width(sys.stdout, os.environ), query))
    return 0


def _context(socket_path: str, user: str, args: list[str]) -> int:
    options, _ = _options(args, {"--json"}, {"--query", "--project", "--budget", "--agent"})
    budget = _number(options.get("--budget"), int, MIN_BUDGET, 100_000)
    block = _call(socket_path, user, "context", {
        "query": options.get("--query", ""), "project": _project(options),
        **({"budget": budget} if budget is not None else {}), **_agent(options)})
    if options.get("--json"):
        _print([render.json_text({key: block[key] for key in (
            "text", "tokens", "budget", "dropped_duplicates", "dropped_for_budget", "items")})])
    else:
        _print([block["text"]])
    return 0


def _remember(socket_path: str, user: str, args: list[str]) -> int:
    options, (text,) = _options(args, {"--json", "--private"},
                                {"--project", "--importance", "--type", "--agent"},
                                frozenset({"--tag"}), positional=1)
    kind = options.get("--type", "fact")
    if not text.strip() or kind not in ("fact", "project_context"):
        raise _Fallback
    if options.get("--private") and "--agent" not in options:
        raise _Fallback
    memory = _call(socket_path, user, "remember", {
        "content": text.strip(), "type": kind,
        "importance": _number(options.get("--importance"), float, 0.0, 1.0),
        "project": _project(options), "tags": options.get("--tag", []),
        "private": bool(options.get("--private")), **_agent(options)})["memory"]
    _print([render.json_text(memory)] if options.get("--json")
           else [f"remembered {memory['id']}"])
    return 0


def _mcp(config: str | None, args: list[str]) -> int:
    """The MCP server, started before the rest of memoryd is imported: Codex and Claude
    Code send a session's first request without waiting long for it (issue 32.4). The
    settings are loaded, checked, on the first tool call; the handshake needs none."""
    options, _ = _options(args, set(), {"--agent"})
    try:
        agent = agent_name(options.get("--agent"))
    except ValueError as exc:
        raise _Fallback from exc

    def settings() -> Any:
        from memoryd.config import load_settings
        from memoryd.logging import configure_logging

        loaded = load_settings(config)
        configure_logging("off", loaded.log_format, extra=loaded.extra_masks())
        return loaded

    from memoryd.mcp_server import serve

    serve(settings, agent=agent)
    return 0


_COMMANDS = {"status": _status, "sessions": _sessions, "recall": _recall,
             "context": _context, "remember": _remember}
