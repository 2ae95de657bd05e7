"""The time a query speaks of: phrases that point back from the asking time, read in the
local time zone, and the query without them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from helpers import local_time_zone
from hypothesis import given
from hypothesis import strategies as st

from memoryd.memory.models import MemoryType, Provenance, RecallResult
from memoryd.memory.recall.spoken_time import (
    SPOKEN_TIME_WEIGHT,
    asked_of,
    during,
    spoken_first,
    spoken_scores,
    spoken_time,
)

# A Thursday, mid-afternoon in each zone below.
NOW = datetime(2026, 11, 19, 15, 0, tzinfo=UTC)


@pytest.fixture(params=["UTC", "America/New_York", "Asia/Kolkata"])
def local_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    with local_time_zone(request.param):
        yield request.param


def local(day: int, hour: int = 0) -> datetime:
    """Local midnight (or `hour`) of November `day`, 2026, in UTC."""
    return datetime(2026, 11, day, hour).astimezone(UTC)


def span(query: str) -> tuple[datetime, datetime]:
    found = spoken_time(query, NOW)
    assert found is not None, query
    return found.start, found.end


def test_calendar_words_are_local_days(local_zone: str) -> None:
    today = NOW.astimezone().day
    assert span("what did we change yesterday?") == (local(today - 1), local(today))
    assert span("the test that failed last night") == (local(today - 1), local(today))
    assert span("what broke this morning") == (local(today), NOW)
    assert span("what did I do the day before yesterday") == (local(today - 2),
                                                                local(today - 1))


def test_last_week_month_weekend_and_weekday_are_the_calendars(local_zone: str) -> None:
    # The local Thursday 19 (in Kolkata already the evening of the 19th as well).
    assert NOW.astimezone().weekday() == 3
    assert span("the bug we fixed last week") == (local(9), local(16))
    assert span("what did we ship last month") == (
        datetime(2026, 10, 1).astimezone(UTC), local(1))
    assert span("the cocktail I tried last weekend") == (local(13, 12), local(16))
    assert span("where did I go last Tuesday") == (local(17), local(18))
    assert span("who called last thursday") == (local(12), local(13))  # not today
    assert span("the pull requests of this week") == (local(16), NOW)


def test_a_time_ago_is_as_wide_as_a_third_of_its_distance() -> None:
    assert span("the deploy from a week ago") == (NOW - timedelta(days=7 + 7 / 3),
                                                  NOW - timedelta(days=7 - 7 / 3))
    assert span("What gardening did I do two weeks ago?") == (
        NOW - timedelta(days=14 + 14 / 3), NOW - timedelta(days=14 - 14 / 3))
    # Short distances are at least a day (an hour for hours) wide either side.
    assert span("the error 2 days ago") == (NOW - timedelta(days=3), NOW - timedelta(days=1))
    assert span("the crash a couple of hours ago") == (NOW - timedelta(hours=3),
                                                        NOW - timedelta(hours=1))


def test_the_past_n_units_reach_now() -> None:
    assert span("which platform grew most over the past month") == (
        NOW - timedelta(days=30), NOW)
    assert span("videos I watched in the past few weeks") == (NOW - timedelta(weeks=3), NOW)
    assert span("commits in the last 3 days") == (NOW - timedelta(days=3), NOW)


def test_a_date_named_is_its_day_a_day_wider_either_side(local_zone: str) -> None:
    """With or without its year, as people write it; without a year, the latest such day
    that has begun. A month or a year named is the whole of it."""
    day = (local(12), local(15))  # the 13th, from the 12th to the end of the 14th
    for query in ("What did Melanie show on November 13, 2026?", "the 13 November 2026 call",
                  "the deploy on 2026-11-13", "on Nov. 13th, 2026 we", "the 13th of November",
                  "what did we decide on november 13"):
        assert span(query) == day, query
    assert span("what broke on December 24") == (
        datetime(2025, 12, 23).astimezone(UTC), datetime(2025, 12, 26).astimezone(UTC))
    assert span("Where was Calvin in the last week of October 2023?") == (
        datetime(2023, 10, 1).astimezone(UTC), datetime(2023, 11, 1).astimezone(UTC))
    assert span("Sept. 2025 incidents") == (datetime(2025, 9, 1).astimezone(UTC),
                                            datetime(2025, 10, 1).astimezone(UTC))
    assert span("How often did she go to the beach in 2023?") == (
        datetime(2023, 1, 1).astimezone(UTC), datetime(2024, 1, 1).astimezone(UTC))
    # A date names the time even where relative words surround it.
    found = spoken_time("What did Maria do last weekend before April 10, 2023?", NOW)
    assert found is not None
    assert found.phrase == "last weekend before April 10, 2023"
    assert found.rest == "What did Maria do ?"


def test_a_time_before_or_after_a_date_reaches_from_it(local_zone: str) -> None:
    """"The week before August 3" is that week and the 3rd itself (where "last week I ..."
    is told), a third of the distance wider at its far end; "after" reaches forward."""
    date = (datetime(2023, 8, 2).astimezone(UTC), datetime(2023, 8, 5).astimezone(UTC))
    week = timedelta(weeks=1)
    far = week + week / 3
    assert span("What did John do the week before August 3, 2023 with his kids?") == (
        date[0] - far, date[1])
    assert span("the puppy she got two weeks before 3 August 2023") == (
        date[0] - 2 * week - 2 * week / 3, date[1])
    assert span("what did we ship a week after 2023-08-03?") == (date[0], date[1] + far)
    assert span("what happened the day prior to Aug 3, 2023") == (
        date[0] - timedelta(days=2), date[1])
    found = spoken_time("Where was Tim in the week before 16 November 2023?", NOW)
    assert found is not None and found.rest == "Where was Tim in ?"
    assert span("the year before 2025-11-19") == (
        local(18) - timedelta(days=365) - timedelta(days=365) / 3 - timedelta(days=365),
        local(21) - timedelta(days=365))
    # Only a date moves: "a week after" of something else is no time.
    assert spoken_time("a week after the release we cut a patch", NOW) is None
    # A time still to come is none (NOW is the 19th), its words not read again either.
    for query in ("the week before 2026-11-27", "what to prepare the day before Nov 21, 2026",
                  "last week before 2027-01-01", "the week after 2026-11-20"):
        assert spoken_time(query, NOW) is None, query
    # Without a year: this year's date when its time has begun, else the year before's.
    assert span("the week before November 21") == (local(20) - week - week / 3, NOW)
    assert span("the week after November 21") == (
        local(20) - timedelta(days=365), local(23) - timedelta(days=365) + far)


@pytest.mark.parametrize("query", [
    "the 5 may be wrong",  # lower-case "may" is a verb
    "what is on December 25, 2026?",  # to come
    "the release on 31 February 2026",  # not a day, and not read as its month
    "the call on 2026-13-01",
    "bump the version to 2.13 in 24 hours",
    "port 2023 is taken",

    "How many days ago did I buy a smoker?",  # asks for a distance, names no time
    "How many weeks ago did I start using Ibotta?",
    "What should I serve for dinner this weekend?",  # the future
    "what is planned for next week",
    "remind me tomorrow to rotate the keys",
    "rename the logger in utils.py",
    "the last time we touched the parser",
    "recently the build got slower",
])
def test_words_that_name_no_past_time(query: str) -> None:
    assert spoken_time(query, NOW) is None


def test_the_rest_is_the_query_without_the_phrase() -> None:
    found = spoken_time("What was the life event I attended a week ago, with whom?", NOW)
    assert found is not None
    assert found.phrase == "a week ago"
    assert found.rest == "What was the life event I attended , with whom?"


def result(memory_id: str, score: float, started: datetime) -> RecallResult:
    return RecallResult(memory_id=memory_id, type=MemoryType.CONVERSATION, content=memory_id,
                        score=score, created_at=started + timedelta(days=1),
                        provenance=Provenance(started_at=started,
                                              ended_at=started + timedelta(minutes=30)))


def test_memories_of_then_come_first_when_they_match_nearly_as_well() -> None:
    found = spoken_time("what did we change in the parser a week ago", NOW)
    assert found is not None
    week = result("week", 0.5, NOW - timedelta(days=7))
    today = result("today", 0.7, NOW - timedelta(hours=2))
    better = result("better", 0.9, NOW - timedelta(days=60))
    assert [during(r, found) for r in (week, today, better)] == [True, False, False]
    order = spoken_first([better, today, week], found)
    assert [r.memory_id for r in order] == ["better", "week", "today"]
    assert order[1].score == pytest.approx(0.5 * SPOKEN_TIME_WEIGHT)
    # A memory of then answers for the time words; another must mention them.
    assert asked_of(week, "what did we change in the parser a week ago", found) == \
        "what did we change in the parser"
    assert asked_of(today, "what did we change in the parser a week ago", found) == \
        "what did we change in the parser a week ago"
    assert asked_of(today, "the parser", None) == "the parser"


def test_a_rerankers_scores_keep_the_preference_for_then() -> None:
    """A reranker reads texts, not when they were said: its scores are weighed as recall's
    are, after being put on [0, 1] when a server answers raw logits."""
    found = spoken_time("what did we change in the parser a week ago", NOW)
    assert found is not None
    week = result("week", 0.1, NOW - timedelta(days=7))
    today = result("today", 0.9, NOW - timedelta(hours=2))
    assert spoken_scores([week, today], [0.6, 0.8], found) == \
        pytest.approx([0.6 * SPOKEN_TIME_WEIGHT, 0.8])
    # Logits go through the logistic function, each on its own (an outlier among them
    # moves no other), then are weighed; NaN counts as nothing.
    logistic = [1 / (1 + math.exp(-x)) for x in (-2.0, 0.5, 3.0)]
    assert spoken_scores([today, week, today], [-2.0, 0.5, 3.0], found) == pytest.approx(
        [logistic[0], logistic[1] * SPOKEN_TIME_WEIGHT, logistic[2]])
    assert spoken_scores([week, today], [0.5, -1000.0], found) == pytest.approx(
        [logistic[1] * SPOKEN_TIME_WEIGHT, 0.0])
    assert spoken_scores([week, today], [float("nan"), 2.0], found)[0] == pytest.approx(
        0.5 * SPOKEN_TIME_WEIGHT)
    assert spoken_scores([], [], found) == []


_PHRASES = ["yesterday", "last week", "two weeks ago", "3 days ago", "this morning",
            "last friday", "in the past month", "last weekend", "a year ago"]


@given(st.text(max_size=40), st.sampled_from(_PHRASES), st.text(max_size=40),
       st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                    timezones=st.just(UTC)))
def test_any_query_around_a_phrase(before: str, phrase: str, after: str,
                                   now: datetime) -> None:
    """Whatever surrounds it, a phrase gives a span that ends by the asking time, and the
    rest keeps every other word."""
    query = f"{before} {phrase} {after}"
    found = spoken_time(query, now)
    assert found is not None
    assert found.start.tzinfo is UTC and found.end.tzinfo is UTC
    assert found.start <= found.end <= now
    words = query.split()
    kept = found.rest.split()
    assert len(kept) == len(words) - len(found.phrase.split())


def test_today_is_a_time_even_at_its_first_instant() -> None:
    """Asked at exactly 00:00, "this morning" and "today" name today (empty so far), not
    no time at all."""
    midnight = datetime(2026, 11, 19, 0, 0, tzinfo=UTC)
    with local_time_zone("UTC"):
        for query in ("what broke this morning", "what did we do today"):
            found = spoken_time(query, midnight)
            assert found is not None, query
            assert (found.start, found.end) == (midnight, midnight)
