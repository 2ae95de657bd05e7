"""When-phrases for `--since`/`--until`: ISO dates and times, and the few phrases people type.

Accepted: `2026-11-01`, `2026-11-01T14:30`, `2026-11-01 14:30:00+02:00`, `now`,
`today`, `yesterday`, `N minutes|hours|days|weeks|months|years ago` (also `N min`,
`3d ago`, `a week ago`), and `last week|month|year`. Calendar words (`today`,
`yesterday`, a bare date) mean midnight in the local time zone of `now`; the
result is always a UTC instant. Months count as 30 days and years as 365.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

from memoryd.errors import WhenError

_UNITS = {
    "s": 1, "sec": 1, "second": 1,
    "m": 60, "min": 60, "minute": 60,
    "h": 3600, "hr": 3600, "hour": 3600,
    "d": 86400, "day": 86400,
    "w": 604800, "wk": 604800, "week": 604800,
    "mo": 2592000, "month": 2592000,
    "y": 31536000, "yr": 31536000, "year": 31536000,
}
_AGO = re.compile(r"^(\d+|an?|one)\s*([a-z]+?)s?(?:\s+ago)?$")
_LAST = re.compile(r"^last\s+([a-z]+)$")


def local_midnight(day: date) -> datetime:
    """The UTC instant at which `day` begins in the local time zone."""
    # A naive datetime's astimezone() applies the local zone's rules for that date (DST).
    return datetime.combine(day, time(0)).astimezone(UTC)


def parse_when(text: str, now: datetime) -> datetime:
    """The UTC instant `text` names, relative to `now` (timezone-aware)."""
    try:
        return _parse_when(text, now)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, WhenError):
            raise
        raise WhenError(f"{text[:80]!r} is out of the range of dates") from None


def _parse_when(text: str, now: datetime) -> datetime:
    phrase = " ".join(text.strip().lower().split())
    if not phrase:
        raise WhenError("empty time")
    local_today = now.astimezone().date()
    if phrase == "now":
        return now.astimezone(UTC)
    if phrase == "today":
        return local_midnight(local_today)
    if phrase == "yesterday":
        return local_midnight(local_today - timedelta(days=1))
    match = _AGO.match(phrase)
    if match and match.group(2) in _UNITS:
        count = 1 if match.group(1) in ("a", "an", "one") else int(match.group(1))
        return (now - timedelta(seconds=count * _UNITS[match.group(2)])).astimezone(UTC)
    match = _LAST.match(phrase)
    if match and match.group(1) in _UNITS:
        return (now - timedelta(seconds=_UNITS[match.group(1)])).astimezone(UTC)
    try:
        if len(phrase) == 10:
            return local_midnight(date.fromisoformat(phrase))
        moment = datetime.fromisoformat(phrase.upper().replace(" ", "T", 1))
    except ValueError:
        raise WhenError(
            f"{text!r} is not a time: use an ISO date such as 2026-11-01, or a phrase "
            "such as 'yesterday' or '2 weeks ago'"
        ) from None
    return moment.astimezone(UTC)  # a naive time is local time
