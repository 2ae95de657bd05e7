"""structlog set-up: readable on a terminal, one JSON object per line otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, TextIO

import structlog

if TYPE_CHECKING:
    from daemon.memory.redaction import ExtraMasks

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


def _masking(extra: ExtraMasks) -> structlog.typing.Processor:
    from daemon.memory.redaction import mask_extra

    def mask(_logger: object, _method: str,
             event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if isinstance(value, str):
                event[key] = mask_extra(value, extra)
        return event

    return mask


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None,
                      extra: ExtraMasks = ()) -> None:
    """Route every log event through structlog to `stream` (stderr by default), secrets and
    the `extra` patterns (`privacy.extra_patterns`) masked."""
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
            *([_masking(extra)] if extra else []),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
