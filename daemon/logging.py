"""structlog set-up: readable on a terminal, one JSON object per line otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def redact_secrets(_logger: object, _method: str,
                   event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Mask secrets in every string of a log event (an endpoint's URL with a password in
    it, an error that quotes a token): logs are shared in bug reports."""
    from daemon.memory.redaction import redact

    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value)
    return event


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route every log event through structlog to `stream` (stderr by default)."""
    out = stream or sys.stderr
    use_console = fmt == "console" or (fmt == "auto" and out.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if use_console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
