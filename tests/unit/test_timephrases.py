"""`--since`/`--until` phrases become UTC instants, whatever the local time zone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from helpers import local_time_zone

from memoryd.errors import WhenError
from memoryd.timephrases import parse_when

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["UTC", "America/New_York", "Asia/Kolkata"])
def local_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    with local_time_zone(request.param):
        yield request.param


def test_relative_phrases(local_zone: str) -> None:
    """'N units ago' and 'last week' are offsets from now, independent of the zone."""
    assert parse_when("2 weeks ago", NOW) == NOW - timedelta(weeks=2)
    assert parse_when("3d ago", NOW) == NOW - timedelta(days=3)
    assert parse_when("a week ago", NOW) == NOW - timedelta(weeks=1)
    assert parse_when("10 minutes ago", NOW) == NOW - timedelta(minutes=10)
    assert parse_when("last month", NOW) == NOW - timedelta(days=30)
    assert parse_when("now", NOW) == NOW


def test_calendar_words_mean_local_midnight(local_zone: str) -> None:
    """'yesterday' and bare dates start at local midnight, returned in UTC."""
    yesterday = parse_when("yesterday", NOW)
    local = yesterday.astimezone()
    assert (local.hour, local.minute) == (0, 0)
    assert local.date() == NOW.astimezone().date() - timedelta(days=1)
    day = parse_when("2026-11-01", NOW).astimezone()
    assert (day.year, day.month, day.day, day.hour) == (2026, 11, 1, 0)
    assert parse_when("2026-11-01T14:30:00+02:00", NOW) == datetime(2026, 11, 1, 12, 30,
                                                                      tzinfo=UTC)


def test_garbage_is_refused_with_a_clear_message() -> None:
    """Text that is no time raises WhenError naming what is accepted."""
    with pytest.raises(WhenError, match="ISO date"):
        parse_when("whenever", NOW)
    with pytest.raises(WhenError):
        parse_when("", NOW)
