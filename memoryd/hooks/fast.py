"""`memoryd hook [--agent A] [--socket PATH] [--timeout S] EVENT`: an agent's hook.

A hook is a process the agent starts on every prompt, so this module imports
only the standard library's smallest parts (os, sys, json, socket, signal,
time) and never the rest of memoryd, unless the daemon is not running and the
stores must be opened directly (`hooks.fallback`). It reads the agent's JSON
payload on stdin, asks the daemon's API (`POST /v1/session_event`) and prints
the agent's JSON answer on stdout, or nothing.

It speaks HTTP/1.1 on the socket through `localhttp`: one request, `Connection: close`,
read to the end. That is the whole protocol it needs, and importing
http.client (email, ssl) or httpx would cost a third of the time budget of a
process started on every prompt. Everything else talks to the API with httpx.

A hook never hurts the agent: on any error, a missing daemon that cannot be
replaced by direct reads, or its time cap spent (`--timeout`, default 2 s), it
prints nothing and exits 0. Errors go to `<state_dir>/hook.log`, never to the
agent's stdout or stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from typing import Any

from memoryd.clock import utc_text
from memoryd.errors import Unreachable
from memoryd.hook_protocol import ANSWER_MARGIN, agent_output, event_request, memoryd_event
from memoryd.localhttp import ask_daemon
from memoryd.locations import default_config_path, default_state_dir
from memoryd.names import AGENT_EVENTS, agent_transcript_root, briefing_off

DEFAULT_TIMEOUT = 2.0
MAX_PAYLOAD_BYTES = 8 << 20


class _Usage(Exception):
    pass


class Arguments:
    """The parsed command line (a plain class: `dataclasses` imports `inspect`, ~5 ms)."""

    def __init__(self) -> None:
        self.agent = "claude"
        self.event: str | None = None
        self.socket_path: str | None = None
        self.timeout: float | None = None
        self.config: str | None = None


def _parse(argv: list[str]) -> Arguments:
    args = Arguments()
    items = iter(argv)
    for item in items:
        if item in ("--agent", "--socket", "--timeout", "--config"):
            value = next(items, None)
            if value is None:
                raise _Usage(f"{item} needs a value")
            if item == "--agent":
                args.agent = value
            elif item == "--socket":
                args.socket_path = value
            elif item == "--config":
                args.config = value
            else:
                args.timeout = _seconds(value)
                if args.timeout is None:
                    raise _Usage("--timeout takes seconds, more than 0 and at most 600")
        elif item.startswith("-"):
            raise _Usage(f"unknown option {item}")
        elif args.event is None:
            args.event = item
        else:
            raise _Usage("one EVENT only")
    if args.agent not in AGENT_EVENTS:
        raise _Usage(f"--agent is one of {', '.join(AGENT_EVENTS)}")
    return args


def _seconds(value: str | None) -> float | None:
    """Seconds from `2`, `2.5` or `2s`; None unless within (0, 600]."""
    if not value:
        return None
    try:
        seconds = float(value.strip().removesuffix("s"))
    except ValueError:
        return None
    return seconds if 0 < seconds <= 600 else None


def _state_dir() -> str:
    explicit = os.environ.get("MEMORYD_STATE_DIR")
    return os.path.expanduser(explicit) if explicit else str(default_state_dir())


def _has_config_file() -> bool:
    return bool(os.environ.get("MEMORYD_CONFIG")) or default_config_path().exists()


def _log(state_dir: str | None, event: str, **fields: Any) -> None:
    """One JSON line in <state_dir>/hook.log; never raises, never prints."""
    if not state_dir or not os.path.isdir(state_dir):
        return
    try:
        fd = os.open(os.path.join(state_dir, "hook.log"),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"timestamp": utc_text(datetime.now(UTC), "seconds"),
                                     "event": event, **fields}) + "\n")
    except (OSError, TypeError, ValueError):
        pass


def run(argv: list[str]) -> int:
    """The hook; returns the exit status (always 0 once the arguments parse)."""
    state_dir: str | None = None
    if os.environ.get("MEMORYD_DISTILLING"):
        # An agent CLI memoryd itself runs as the distillation model: it gets no memory,
        # and what it is sent is not a session of the user's to save again.
        return 0
    try:
        args = _parse(argv)
    except _Usage as exc:
        if sys.stdin.isatty():
            print(f"memoryd hook: {exc}\nusage: memoryd hook [--agent claude|codex|gemini]"
                  " [--socket PATH] [--timeout S] EVENT  (the agent's JSON on stdin)",
                  file=sys.stderr)
            return 2
        return 0
    agent, agent_event, socket_path = args.agent, args.event, args.socket_path
    cap = args.timeout or _seconds(os.environ.get("MEMORYD_AGENTS__HOOK_TIMEOUT")) or (
        DEFAULT_TIMEOUT)
    deadline = time.monotonic() + cap

    def out_of_time(_signum: int, _frame: object) -> None:
        _log(state_dir, "hook_timed_out", agent=agent, seconds=cap)
        os._exit(0)

    signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, cap)
    try:
        state_dir = os.path.dirname(socket_path) if socket_path else _state_dir()
        raw = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        if len(raw) > MAX_PAYLOAD_BYTES:
            raise ValueError("payload too large")
        payload = json.loads(raw or b"{}")
        if not isinstance(payload, dict):
            raise ValueError("the payload is not a JSON object")
        agent_event = agent_event or str(payload.get("hook_event_name") or "")
        event = memoryd_event(agent, agent_event)
        if event is None:
            _log(state_dir, "hook_event_ignored", agent=agent, agent_event=agent_event)
            return 0
        if event in ("start", "prompt") and briefing_off(os.environ):
            return 0  # the person started this session without a briefing
        request = event_request(agent, event, payload, agent_transcript_root(agent))
        # The daemon gives (and records as given) a block only while this hook still
        # waits for it: a daemon that was stopped or slow must not record what the agent
        # never received.
        left = deadline - time.monotonic() - ANSWER_MARGIN
        request["answer_by"] = datetime.fromtimestamp(time.time() + left, UTC).isoformat()
        try:
            if socket_path is None and (args.config or _has_config_file()):
                raise Unreachable("settings from a config file: let them name the socket")
            answer = ask_daemon(socket_path or os.path.join(state_dir, "memoryd.sock"),
                                json.dumps(request).encode(), deadline)
        except Unreachable as exc:
            # No daemon (or another socket named by the config): the stores directly.
            from memoryd.hooks.fallback import handle_directly

            answer = handle_directly(request, socket_path, exc, args.config)
            state_dir = answer.pop("state_dir", state_dir)
        output = agent_output(agent_event, answer.get("context"))
        if output is not None:
            sys.stdout.write(output)
            sys.stdout.flush()
    except BaseException as exc:  # a hook never hurts the agent
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            return 0
        _log(state_dir, "hook_failed", agent=agent, error=f"{type(exc).__name__}: {exc}"[:500])
    # The timer stays armed: the caller leaves with os._exit, and until then the cap holds.
    return 0


def main(argv: list[str]) -> None:
    """Run the hook and leave at once: a thread a failed store left behind must not keep
    the agent waiting at interpreter exit."""
    code = run(argv)
    try:
        sys.stdout.flush()
    finally:
        os._exit(code)
