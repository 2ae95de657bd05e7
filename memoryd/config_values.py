"""What settings are made of: durations (`2s`, `30m`, `1h30m`) and paths (`~`, `$VAR`)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator

MAX_DURATION = 10 * 365 * 86400.0
DAY = 86400.0
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")


def parse_duration(value: object) -> float:
    """Seconds from a number or a string such as `2s`, `30m`, `1h30m`, `250ms`."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '30m'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not parts or _DURATION_PART.sub("", text).strip():
                raise ValueError(
                    f"{value!r} is not a duration (use seconds or e.g. '2s', '30m', '1h')"
                ) from None
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is a number of seconds or a string like '30m'")
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than ten years")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _expand_path(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        # Path("") is the current directory: never what an empty setting means.
        raise ValueError("an empty path is not allowed")
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("a path cannot hold a NUL character")
    if isinstance(value, str):
        return Path(os.path.expandvars(value)).expanduser()
    if isinstance(value, Path):
        return value.expanduser()
    return value


ExpandedPath = Annotated[Path, BeforeValidator(_expand_path)]
