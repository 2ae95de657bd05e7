"""The time a query speaks of: "what did we change yesterday", "the bug from two weeks ago".

A person asking about "last week" means the conversations of last week, yet the
words "last week" name no subject: matched as keywords they find whatever
mentions a week. `spoken_time` reads such a phrase into a span of time, relative
to when the query is asked, and gives the query without it. Recall then weighs
more of its results than it returns and prefers those of that span (scores of the
one query, so comparable); a query that is only a time ("what did we do
yesterday?") gets that span's memories (`memoryd/domain/recaller.py`).

Read: dates as people write them ("October 13, 2023", "13 October 2023", "the
13th of October", "2023-10-13", without a year the latest such day that has begun;
lower-case "may" is a verb), a month of a year ("July 2023"), a year ("in 2023"),
and phrases that point back from the asking time, because memory holds the past:
"yesterday", "today", "this morning", "last night", "N days / weeks / months /
years ago" (digits, "a", "one" to "twelve", "a couple of", "a few"), "last week /
month / year / weekend / <weekday>", "this week / month", "the past N days" and
"in the last few weeks". A date names the time even where relative words surround
it ("last weekend, before April 10, 2023"). A time to come ("this weekend", "next
week", "tomorrow", a date after now) or a phrase without a number ("how many days
ago did I...") is not a time. People round: "a week ago" means five to nine days
ago, so a span from "N units ago" is as wide as a third of the distance either
side (at least a day, or an hour for hours), and a date is its day and a day either
side (a conversation late at night, or in another zone). "The week before <date>" (or
"two weeks after", "the day prior to") is that week and the date too, where what
happened in it is told ("last week I ..." said on the date). Calendar words are read in
the local time zone of `now`, as `memoryd/timephrases.py` reads `--since`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta

from memoryd.memory.models import RecallResult
from memoryd.memory.recall.gate import content_words, coverage
from memoryd.timephrases import local_midnight

#: How much a memory of the time the query speaks of is preferred: its score is
#: multiplied by this, so it comes first when it matches the subject at least two
#: thirds as well. Not more: people misplace times ("last weekend" for the one before),
#: and a memory that matches decidedly better still leads. On LongMemEval-dev's
#: questions asked at their own dates, 1.5 and 2 gave the same recall@5 (0.98, against
#: 0.97 without), 1.25 one question fewer at 1 (docs/performance.md).
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
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH = r"(?P<month>sept|" + "|".join(m[:3] + f"(?:{m[3:]})?" if len(m) > 3 else m
                                        for m in _MONTHS) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
#: In order: the first that matches is read. Dates first: where a query names one, its
#: other time words are relative to it ("last weekend, before April 10, 2023").
_PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("date", rf"\b{_YEAR}-(?P<month_number>[01]\d)-(?P<day>[0-3]\d)\b"),
        ("date", rf"\b(?:the\s+)?{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}\b"),
        ("date", rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b"),
        ("month", rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b"),
        ("date", rf"\b{_MONTH}\s+{_DAY}\b(?![:.]?\d)"),
        ("date", rf"\b(?:the\s+)?{_DAY}(?:\s+of)?\s+{_MONTH}\b"),
        ("year", rf"\b(?:in|during|of)\s+{_YEAR}\b"),
        ("ago", rf"\b{_COUNT}\s+{_UNIT}\s+ago\b"),
        ("past", rf"\b(?:in|over|during|within)?\s*the\s+(?:past|last)\s+(?:{_COUNT}\s+)?{_UNIT}"
                 r"\b(?!\s+of\b)"),
        ("before_yesterday", r"\bthe\s+day\s+before\s+yesterday\b"),
        ("yesterday", r"\b(?:yesterday|last\s+night)\b"),
        ("today", r"\b(?:earlier\s+)?(?:today|this\s+(?:morning|afternoon))\b"),
        ("last_weekend", r"\blast\s+weekend\b"),
        ("last_weekday", r"\blast\s+(?P<weekday>" + "|".join(_WEEKDAYS) + r")\b"),
        ("last", r"\blast\s+(?P<unit>week|month|year)\b"),
        ("this", r"\bthis\s+(?P<unit>week|month|year)\b"),
    ))


#: Words before a date that move the time from it ("the week before August 3, 2023",
#: "two weeks after 2023-03-01", "last weekend before April 10").
_AROUND = re.compile(
    rf"\b(?:(?:the|last|a)\s+(?P<around>day|week|weekend|month|year)|{_COUNT}\s+{_UNIT})"
    r"\s+(?P<way>before|prior\s+to|after)\s*$", re.IGNORECASE)
_AROUND_UNITS = {"weekend": timedelta(weeks=1), **_UNITS}


@dataclass(frozen=True, slots=True)
class SpokenTime:
    """A span of time a query speaks of, and the query without the words that said it."""

    start: datetime  # inclusive, UTC
    end: datetime  # exclusive, UTC
    phrase: str
    rest: str

    @property
    def only_time(self) -> bool:
        """Whether the query says nothing but a time ("what did we do yesterday?")."""
        return not content_words(self.rest)


def spoken_time(query: str, now: datetime) -> SpokenTime | None:
    """The span the query's first time phrase names, relative to `now` (timezone-aware);
    None when it names none."""
    refused: list[tuple[int, int]] = []  # words read as no past time are not read again
    for name, pattern in _PHRASES:
        match = pattern.search(query)
        if match is None or any(match.start() < e and s < match.end() for s, e in refused):
            continue
        begins = match.start()
        around = _AROUND.search(query, 0, begins) if name == "date" else None
        if around is not None:
            span, begins = _around(around, match, now), around.start()
        else:
            span = _span(name, match, now)
        start, end = (span[0], min(span[1], now)) if span is not None else (now, now)
        # A date to come, an impossible one, a day not begun; today has begun even at its
        # first instant (asked at 00:00, "this morning" is a time, empty so far).
        if start > end or (start == end and name != "today"):
            refused.append((begins, match.end()))
            continue
        rest = " ".join((query[:begins] + " " + query[match.end():]).split())
        return SpokenTime(start.astimezone(UTC), end.astimezone(UTC),
                          query[begins:match.end()].strip(), rest)
    return None


def _around(around: re.Match[str], match: re.Match[str],
            now: datetime) -> tuple[datetime, datetime] | None:
    """The span of "the week before <date>": that week, and the date itself too, where
    what happened in it is told ("last week I ..." said on the date), a third of the
    distance wider at its far end; None when that time has not begun. A date without a
    year is this year's when its time has begun (asked on June 10, "the week before June
    12" is this June's), else the year before's."""
    unit = _AROUND_UNITS[(around.group("around") or around.group("unit")).lower()]
    distance = unit * (_count(around.group("count")) if around.group("count") else 1.0)
    far = distance + max(distance / 3, timedelta(days=1))
    after = around.group("way").lower() == "after"
    for latest in (False, True):
        day = _named_day(match.groupdict(), now.astimezone().date(), latest=latest)
        if day is None:
            return None
        first, last = _day_span(day)
        if (local_midnight(day) - (timedelta(0) if after else distance)) < now:
            return (first, last + far) if after else (first - far, last)
    return None


def _span(name: str, match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    today = now.astimezone().date()
    if name in ("date", "month", "year"):
        return _calendar(name, match, today)
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
        return local_midnight(today - timedelta(days=2)), local_midnight(today - timedelta(days=1))
    if name == "yesterday":
        return local_midnight(today - timedelta(days=1)), local_midnight(today)
    if name == "today":
        return local_midnight(today), now
    if name == "last_weekend":
        # The weekend before this week's (on a Sunday, "last weekend" is not today).
        saturday = today - timedelta(days=today.weekday() + 2)
        monday = saturday + timedelta(days=2)
        return local_midnight(saturday) - timedelta(hours=12), local_midnight(monday)
    if name == "last_weekday":
        weekday = _WEEKDAYS.index(match.group("weekday").lower())
        back = (today.weekday() - weekday) % 7 or 7
        day = today - timedelta(days=back)
        return local_midnight(day), local_midnight(day + timedelta(days=1))
    unit_name = match.group("unit").lower()
    start = _start_of(unit_name, today)
    if name == "this":
        return local_midnight(start), now
    before = _start_of(unit_name, start - timedelta(days=1))
    return local_midnight(before), local_midnight(start)


def _calendar(name: str, match: re.Match[str], today: date) -> tuple[datetime, datetime] | None:
    """A date, month or year named: its local days, a day wider either side for a date
    (a conversation late at night, or in another zone, is still of that day). Without a
    year, the latest such day that has begun."""
    found = match.groupdict()
    year = int(found["year"]) if found.get("year") else None
    if name == "year":
        assert year is not None
        return local_midnight(date(year, 1, 1)), local_midnight(date(year + 1, 1, 1))
    month = _month_of(found)
    if month is None:
        return None
    if name == "month":
        assert year is not None
        after = date(year + month // 12, month % 12 + 1, 1)
        return local_midnight(date(year, month, 1)), local_midnight(after)
    day = _named_day(found, today)
    return _day_span(day) if day is not None else None


def _named_day(found: dict[str, str | None], today: date, *,
               latest: bool = True) -> date | None:
    """The day a date names; without a year, the latest such day that has begun (with
    `latest`; else this year's). None for a day that is none (31 February, "may")."""
    month = _month_of(found)
    if month is None:
        return None
    named_year = found.get("year")
    year = int(named_year) if named_year else None
    try:
        day = date(year if year is not None else today.year, month, int(found["day"] or 0))
        if latest and year is None and day > today:
            day = day.replace(year=day.year - 1)
    except ValueError:  # 31 February, 29 February of a common year
        return None
    return day


def _day_span(day: date) -> tuple[datetime, datetime]:
    return local_midnight(day - timedelta(days=1)), local_midnight(day + timedelta(days=2))


def _month_of(found: dict[str, str | None]) -> int | None:
    """The month a date or month names, by number or name; None for none."""
    if found.get("month") == "may":
        return None  # "the 5 may be wrong": lower-case "may" is a verb
    number = found.get("month_number")
    month = int(number) if number else _month_number(found.get("month") or "")
    return month if month is not None and 1 <= month <= 12 else None


def _month_number(text: str) -> int | None:
    name = text.lower().rstrip(".")
    name = "sep" if name == "sept" else name
    for number, month in enumerate(_MONTHS, 1):
        if month.startswith(name) and len(name) >= 3:
            return number
    return None


def _count(text: str) -> float:
    words = " ".join(text.lower().split())
    return float(words) if words.isdigit() else _NUMBERS[words]


def _start_of(unit: str, day: date) -> date:
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    return day.replace(month=1, day=1)


def spoken_first(results: Sequence[RecallResult], spoken: SpokenTime) -> list[RecallResult]:
    """`results` with those of the spoken time weighed up by SPOKEN_TIME_WEIGHT, best first
    (the same query's scores, so a memory of then that matches as well comes first)."""
    weighed = [replace(r, score=r.score * SPOKEN_TIME_WEIGHT) if during(r, spoken) else r
               for r in results]
    return sorted(weighed, key=lambda r: -r.score)


def spoken_scores(results: Sequence[RecallResult], scores: Sequence[float],
                  spoken: SpokenTime) -> list[float]:
    """A reranker's `scores` of `results` with the preference `spoken_first` gives: it reads
    only the texts, not when they were said. Scores outside [0, 1] (a server's raw logits)
    are put through the logistic function first, in their order and whatever the other
    candidates' scores, so that weighing one up raises it."""
    finite = [s if math.isfinite(s) else (1.0 if s > 0 else 0.0) for s in scores]  # NaN: 0
    if any(not 0.0 <= s <= 1.0 for s in finite):
        finite = [_logistic(s) for s in finite]
    return [s * SPOKEN_TIME_WEIGHT if during(r, spoken) else s
            for r, s in zip(results, finite, strict=True)]


def _logistic(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)  # no overflow for a large negative logit
    return e / (1.0 + e)


def during(result: RecallResult, spoken: SpokenTime) -> bool:
    """Whether the memory's conversation (else its creation) overlaps the spoken time."""
    began = result.provenance.started_at or result.created_at
    ended = result.provenance.ended_at or began
    return began < spoken.end and ended >= spoken.start


def asked_of(result: RecallResult, query: str, spoken: SpokenTime | None) -> str:
    """The words `result` is to mention (the relevance floor, the prompt gate): a memory of
    the time the query speaks of says that time by when it was said, so it answers for the
    rest of the query; any other memory for the whole of it."""
    return spoken.rest if spoken is not None and during(result, spoken) else query


def passes_gate(result: RecallResult, query: str, spoken: SpokenTime | None,
                floor: float) -> bool:
    """The prompt hook's gate (`agents.prompt_min_relevance`): a prompt that is only a time
    wants memories of then; any other wants its words mentioned (`asked_of`)."""
    if spoken is not None and spoken.only_time:
        return during(result, spoken)
    return coverage(asked_of(result, query, spoken), result.excerpt or result.content) >= floor
