"""A hook's event handled in-process, for when no daemon answers on the socket.

Loads the settings (a config file may move the state directory), tries the
daemon once more at the socket they name, and otherwise runs the API's
`session_event` over stores opened directly. Log lines go to
`<state_dir>/hook.log`, never where the agent reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from typing import Any

import structlog

from memoryd.clock import SystemClock
from memoryd.config import load_settings
from memoryd.errors import MemorydError
from memoryd.files import make_dirs
from memoryd.localhttp import ask_daemon
from memoryd.logging import configure_logging


def handle_directly(request: dict[str, Any], socket_path: str | None,
                    reason: OSError, config: str | None = None) -> dict[str, Any]:
    """The session_event's answer, plus `state_dir` for the hook's own log."""
    settings = load_settings(config)
    state_dir = str(settings.state_dir)
    make_dirs(settings.state_dir)
    fd = os.open(os.path.join(state_dir, "hook.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                 0o600)
    log_stream = _NeverFails(os.fdopen(fd, "a", encoding="utf-8", buffering=1))
    configure_logging(settings.log_level, "json", stream=log_stream,  # type: ignore[arg-type]
                      extra=settings.extra_masks())
    structlog.get_logger("memoryd.hook").info("hook_without_daemon", reason=str(reason))
    named = str(settings.socket_path)
    if socket_path != named and os.path.exists(named):
        try:
            answer = ask_daemon(named, json.dumps(request).encode(), time.monotonic() + 5.0)
            return {**answer, "state_dir": state_dir}
        except (OSError, ValueError):
            pass

    async def direct(readonly: bool = False) -> dict[str, Any]:
        from memoryd.client import direct_ops

        # Keyword recall: loading the model (about a second) would spend the hook's budget.
        async with direct_ops(settings, SystemClock(), vectors=False,
                              readonly=readonly) as ops:
            return await ops.run("session_event", request)

    try:
        answer = asyncio.run(direct())
    except MemorydError as exc:
        # Only what writing could not do now (a full disk): a store that is another
        # user's, or damaged, is refused as it is.
        if not exc.transient or exc.damaged or not settings.database_path.exists():
            raise
        # A full disk (or a store that cannot be written now): the block is read anyway.
        structlog.get_logger("memoryd.hook").warning("hook_reads_only", error=str(exc))
        answer = asyncio.run(direct(readonly=True))
    return {**answer, "state_dir": state_dir}


class _NeverFails:
    """The hook's log: a line that cannot be written (a full disk) is dropped, never the
    agent's block."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except OSError:
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.flush()
