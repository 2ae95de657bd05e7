"""The time a query speaks of: "what did we change yesterday", "the bug from two weeks ago".

A person asking about "last week" means the conversations of last week, yet the
words "last week" name no subject: matched as keywords they find whatever
mentions a week. `spoken_time` reads such a phrase into a span of time, relative
to when the query is asked, and gives the query without it. Recall then looks
for the query's subject among that span's memories as well as everywhere, and
prefers what was said then (`daemon/api/base.py`).

Only phrases that point back from the asking time are read, because memory holds
the past: "yesterday", "today", "this morning", "last night", "N days / weeks /
months / years ago" (digits, "a", "one" to "twelve", "a couple of", "a few"),
"last week / month / year / weekend / <weekday>", "this week / month", "the past
N days" and "in the last few weeks". A phrase about the future ("this weekend",
"next week", "tomorrow") or without a number ("how many days ago did I...") is not
a time. People round: "a week ago" means five to nine days ago, so a span from
"N units ago" is as wide as a third of the distance either side (at least a
day, or an hour for hours). Calendar words are read in the local time zone of
`now`, as `daemon/timephrases.py` reads `--since`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta

from daemon.memory.models import RecallResult

#: How much a memory of the time the query speaks of is preferred: its score is
#: multiplied by this, so it comes first when it matches the subject at least two
#: thirds as well. Not more: people misplace times ("last weekend" for the one before),
#: and a memory that matches decidedly better still leads. On LongMemEval-dev's
#: questions asked at their own dates, 1.5 and 2 gave the same recall@5 (0.98, against
#: 0.97 without), 1.25 one question fewer at 1 (benchmarks/README.md).
SPOKEN_TIME_WEIGHT = 1.5
#: How many results are weighed when a query speaks of a time: a memory of then may
#: rank below the first few before it is weighed up.
SPOKEN_TIME_POOL = 50

_NUMBERS = {
    "a": 1.0, "an": 1.0, "one": 1.0, "two": 2.0, "three": 3.0, "four": 4.0, "five": 5.0,
    "six": 6.0, "seven": 7.0, "eight": 8.0, "nine": 9.0, "ten": 10.0, "eleven": 11.0,
    "twelve": 12.0, "a couple of": 2.0, "couple of": 2.0, "a few": 3.0, "few": 3.0,
}
_UNITS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1),
          "day": timedelta(days=1), "week": timedelta(weeks=1),
          "month": timedelta(days=30), "year": timedelta(days=365)}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_COUNT = r"(?P<count>\d{1,3}|a couple of|couple of|a few|few|an?|one|two|three|four|five|six" \
         r"|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<unit>minute|hour|day|week|month|year)s?"
#: In order: the first that matches is read (the longer phrases first).
_PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("ago", rf"\b{_COUNT}\s+{_UNIT}\s+ago\b"),
        ("past", rf"\b(?:in|over|during|within)?\s*the\s+(?:past|last)\s+(?:{_COUNT}\s+)?{_UNIT}"
                 r"\b"),
        ("before_yesterday", r"\bthe\s+day\s+before\s+yesterday\b"),
        ("yesterday", r"\b(?:yesterday|last\s+night)\b"),
        ("today", r"\b(?:earlier\s+)?(?:today|this\s+(?:morning|afternoon))\b"),
        ("last_weekend", r"\blast\s+weekend\b"),
        ("last_weekday", r"\blast\s+(?P<weekday>" + "|".join(_WEEKDAYS) + r")\b"),
        ("last", r"\blast\s+(?P<unit>week|month|year)\b"),
        ("this", r"\bthis\s+(?P<unit>week|month|year)\b"),
    ))


@dataclass(frozen=True, slots=True)
class SpokenTime:
    """A span of time a query speaks of, and the query without the words that said it."""

    start: datetime  # inclusive, UTC
    end: datetime  # exclusive, UTC
    phrase: str
    rest: str


def spoken_time(query: str, now: datetime) -> SpokenTime | None:
    """The span the query's first time phrase names, relative to `now` (timezone-aware);
    None when it names none."""
    for name, pattern in _PHRASES:
        match = pattern.search(query)
        if match is None:
            continue
        span = _span(name, match, now)
        if span is None:
            continue
        start, end = span
        rest = " ".join((query[:match.start()] + " " + query[match.end():]).split())
        return SpokenTime(start.astimezone(UTC), min(end, now).astimezone(UTC),
                          match.group(0).strip(), rest)
    return None


def _span(name: str, match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    today = now.astimezone().date()
    if name == "ago":
        unit = _UNITS[match.group("unit").lower()]
        count = _count(match.group("count"))
        ago = unit * count
        floor = timedelta(hours=1) if unit <= timedelta(hours=1) else timedelta(days=1)
        spread = max(ago / 3, floor)
        return now - ago - spread, now - ago + spread
    if name == "past":
        unit = _UNITS[match.group("unit").lower()]
        count = _count(match.group("count")) if match.group("count") else 1.0
        return now - unit * count, now
    if name == "before_yesterday":
        return _midnight(today - timedelta(days=2)), _midnight(today - timedelta(days=1))
    if name == "yesterday":
        return _midnight(today - timedelta(days=1)), _midnight(today)
    if name == "today":
        return _midnight(today), now
    if name == "last_weekend":
        # The weekend before this week's (on a Sunday, "last weekend" is not today).
        saturday = today - timedelta(days=today.weekday() + 2)
        return _midnight(saturday) - timedelta(hours=12), _midnight(saturday + timedelta(days=2))
    if name == "last_weekday":
        weekday = _WEEKDAYS.index(match.group("weekday").lower())
        back = (today.weekday() - weekday) % 7 or 7
        day = today - timedelta(days=back)
        return _midnight(day), _midnight(day + timedelta(days=1))
    unit_name = match.group("unit").lower()
    start = _start_of(unit_name, today)
    if name == "this":
        return _midnight(start), now
    before = _start_of(unit_name, start - timedelta(days=1))
    return _midnight(before), _midnight(start)


def _count(text: str) -> float:
    words = " ".join(text.lower().split())
    return float(words) if words.isdigit() else _NUMBERS[words]


def _start_of(unit: str, day: date) -> date:
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    return day.replace(month=1, day=1)


def _midnight(day: date) -> datetime:
    # A naive datetime's astimezone() applies the local zone's rules for that date (DST).
    return datetime.combine(day, time(0)).astimezone(UTC)


def spoken_first(results: Sequence[RecallResult], spoken: SpokenTime) -> list[RecallResult]:
    """`results` with those of the spoken time weighed up by SPOKEN_TIME_WEIGHT, best first
    (the same query's scores, so a memory of then that matches as well comes first)."""
    weighed = [replace(r, score=r.score * SPOKEN_TIME_WEIGHT) if during(r, spoken) else r
               for r in results]
    return sorted(weighed, key=lambda r: -r.score)


def during(result: RecallResult, spoken: SpokenTime) -> bool:
    """Whether the memory's conversation (else its creation) overlaps the spoken time."""
    began = result.provenance.started_at or result.created_at
    ended = result.provenance.ended_at or began
    return began < spoken.end and ended >= spoken.start
