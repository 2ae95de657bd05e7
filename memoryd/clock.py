"""Clocks are injected: decisions take `now` as an argument, tests use FakeClock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

Precision = Literal["auto", "seconds", "milliseconds", "microseconds"]


#: This boot's id on Linux; elsewhere none is known.
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True, slots=True)
class BootReading:
    """Which boot this is, and the seconds since it on a clock that counts suspended time
    and that no one sets: how far the wall clock may honestly have moved since a reading
    of the same boot."""

    boot_id: str | None
    seconds: float | None


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for timers only)."""
        ...

    def boot(self) -> BootReading:
        """This boot, and the seconds since it (suspended time counted)."""
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

    def boot(self) -> BootReading:
        try:
            boot_id: str | None = _BOOT_ID.read_text().strip() or None
        except OSError:
            boot_id = None
        boottime = getattr(time, "CLOCK_BOOTTIME", None)
        seconds = time.clock_gettime(boottime) if boottime is not None else None
        return BootReading(boot_id, seconds)


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

    def step(self, seconds: float) -> None:
        """The wall clock set forward (or back) by `seconds`: no time passed."""
        self._now += timedelta(seconds=seconds)

    def boot(self) -> BootReading:
        return BootReading("fake-boot", self._mono)
