"""structlog set-up: readable on a terminal, one JSON object per line otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, TextIO

import structlog

if TYPE_CHECKING:
    from memoryd.memory.privacy.redaction import ExtraMasks

_HANDLER_NAME = "memoryd"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "off": logging.CRITICAL}


def redact_secrets(_logger: object, _method: str,
                   event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Mask secrets in every string of a log event (an endpoint's URL with a password in
    it, an error that quotes a token): logs are shared in bug reports."""
    from memoryd.memory.privacy.redaction import redact

    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value)
    return event


def _masking(extra: ExtraMasks) -> structlog.typing.Processor:
    from memoryd.memory.privacy.redaction import mask_extra

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
    the `extra` patterns (`privacy.extra_patterns`) masked.

    Libraries that log through the standard library (APScheduler, httpx, aiosqlite) go
    through the same chain: their records come out rendered like ours (one JSON object
    a line when the log is JSON) and masked alike. Only their warnings and errors, at
    every level: below that they repeat every few seconds (a job run), and aiosqlite's
    debug lines would print every statement's arguments, a backfill's rows included.
    """
    out = stream or sys.stderr
    use_console = fmt == "console" or (fmt == "auto" and out.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if use_console
        else structlog.processors.JSONRenderer()
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_secrets,
        *([_masking(extra)] if extra else []),
    ]
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    _route_standard_logging(out, shared, renderer, max(logging.WARNING, _LEVELS[level]))


def _route_standard_logging(out: TextIO, shared: list[structlog.typing.Processor],
                            renderer: structlog.typing.Processor, level: int) -> None:
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    ))
    root = logging.getLogger()
    for previous in root.handlers[:]:
        if previous.get_name() == _HANDLER_NAME:  # configured again: ours is replaced
            root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(level)
