"""Deletions by age trust the wall clock only as far as the boot clock explains it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memoryd.clock import BootReading
from memoryd.lifecycle.clock_trust import MAX_GAP_ACROSS_BOOTS, Mark, ahead

T0 = datetime(2026, 6, 1, tzinfo=UTC)
MARK = Mark(T0, BootReading("boot-1", 1000.0))


def test_a_clock_that_moved_as_the_boot_clock_did_is_trusted() -> None:
    """Ten days later by both clocks (the laptop asleep between counts): trusted."""
    later = 10 * 86400.0
    assert ahead(MARK, T0 + timedelta(days=10), BootReading("boot-1", 1000 + later)) is None


def test_a_step_ahead_within_a_boot_is_not_trusted() -> None:
    """The wall clock set 400 days forward while the machine ran: 400 days ahead."""
    gap = ahead(MARK, T0 + timedelta(days=400, minutes=2), BootReading("boot-1", 1120.0))
    assert gap is not None and timedelta(days=399) < gap < timedelta(days=401)


def test_across_boots_a_long_gap_is_not_trusted_a_short_one_is() -> None:
    """After a reboot the boot clock tells nothing: a month's gap is believed, more is not."""
    reboot = BootReading("boot-2", 30.0)
    assert ahead(MARK, T0 + timedelta(days=12), reboot) is None
    assert ahead(MARK, T0 + MAX_GAP_ACROSS_BOOTS + timedelta(days=1), reboot) is not None
    assert ahead(None, T0 + timedelta(days=4000), reboot) is None
