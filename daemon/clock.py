"""Clocks are injected: decisions take `now` as an argument, tests use FakeClock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol, runtime_checkable

Precision = Literal["auto", "seconds", "milliseconds", "microseconds"]


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for timers only)."""
        ...


def utc_text(moment: datetime, precision: Precision = "milliseconds", *,
             zulu: bool = True) -> str:
    """A timezone-aware time as ISO-8601 in UTC: the one formatter of times as text.

    The state database stores milliseconds with `Z` (the default) and memory records
    microseconds with `+00:00`; both fixed width, so that text order is time order.
    Shown times use "auto" (no trailing zeros).
    """
    if moment.tzinfo is UTC:  # most times (the clocks' own): no conversion to make
        text = moment.isoformat(timespec=precision)
    elif moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"naive datetime {moment.isoformat()}: pass a timezone-aware one")
    else:
        text = moment.astimezone(UTC).isoformat(timespec=precision)
    return text.replace("+00:00", "Z") if zulu else text


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds
