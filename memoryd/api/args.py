"""Checking the API's arguments: each arrives as a JSON value, and a bad one is an
`ApiError` with status 400 and one clear line."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memoryd.clock import utc_text
from memoryd.domain.core import CONFIRM_EVERYTHING
from memoryd.errors import ApiError, WhenError
from memoryd.memory import MemoryType
from memoryd.names import agent_name
from memoryd.repository import project_root
from memoryd.timephrases import parse_when


def text(args: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = args.get(name, default)
    if value is None:
        raise ApiError(400, f"{name} is required")
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string")
    if default is None and not value.strip():
        raise ApiError(400, f"{name} is empty")
    return value


def opt_text(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string")
    return value


def integer(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be a whole number")
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be from {low} to {high}")
    return value


def flag(args: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = args.get(name, default)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false")
    return value


def when(args: Mapping[str, Any], name: str, now: datetime) -> datetime | None:
    value = opt_text(args, name)
    if value is None:
        return None
    try:
        return parse_when(value, now)
    except (WhenError, OverflowError, ValueError) as exc:
        raise ApiError(400, f"{name}: {exc}") from None


def types(args: Mapping[str, Any]) -> list[MemoryType] | None:
    value = args.get("types")
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError(400, "types must be a list")
    try:
        return [MemoryType(v) for v in value]
    except ValueError:
        raise ApiError(400, "types: one of " + ", ".join(t.value for t in MemoryType)) from None


def agent(args: Mapping[str, Any]) -> str | None:
    """The agent asking (claude, codex, gemini, ...), whose private memories it may see;
    None: no agent (shared memories only in recall)."""
    try:
        return agent_name(opt_text(args, "agent"))
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


def project(args: Mapping[str, Any]) -> str | None:
    """The project a request names: its repository when the path is inside one (any
    sub-directory or worktree of it, see `repository.project_root`)."""
    value = opt_text(args, "project")
    return project_root(value) if value is not None else None


def iso(moment: datetime) -> str:
    """A time as the API writes it (UTC, `+00:00`)."""
    return utc_text(moment, "auto", zulu=False)


def confirmed_everything(args: Mapping[str, Any]) -> bool:
    """Whether a request that forgets everything says so in words (`CONFIRM_EVERYTHING`)."""
    return args.get("confirm") == CONFIRM_EVERYTHING
