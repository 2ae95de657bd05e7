"""A resumed conversation's copies are found however a session is read.

Claude Code writes a resumed session's conversation into its transcript again, with
each record's own timestamp and content (`store.sessions.Copies`). Recovery reads a
session a page at a time, pass after pass, sometimes by a daemon started since: a
message must be marked a copy exactly when an earlier message of the session says the
same thing at the same instant and its time is not later than one read before it, with
any pages, any passes, any restarts, and never when a session's clock only moves on.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.config import load_settings
from memoryd.store import sessions as store
from memoryd.store.database import open_store

_WORDS = st.sampled_from(["run the tests", "ok", "", "fix it", "<ide_opened_file>x"
                          "</ide_opened_file>ok"])
_MESSAGE = st.tuples(st.sampled_from(["user", "assistant"]), _WORDS, st.integers(0, 5))


def _stamp(second: int) -> str:
    return f"2026-01-21T15:{second // 60:02d}:{second % 60:02d}.000Z"


def _words(text: str) -> str:
    return text.replace("<ide_opened_file>x</ide_opened_file>", "").strip()


def _expected(rows: list[tuple[str, str, str]]) -> list[bool]:
    """The definition, over the whole session at once: (role, content, timestamp) rows."""
    marks = []
    latest: str | None = None
    for n, (role, content, stamp) in enumerate(rows):
        words = _words(content) if role == "user" else content
        earlier = any(r == role and (_words(c) if r == "user" else c) == words and s == stamp
                      for r, c, s in rows[:n])
        marks.append(latest is not None and stamp <= latest and earlier)
        latest = stamp if latest is None or stamp > latest else latest
    return marks


async def _read(path: Path, rows: list[tuple[str, str, str]], pages: list[int],
                passes: list[int], restarts: list[bool]) -> list[bool]:
    state = load_settings(None, state_dir=str(path))
    async with open_store(state) as conn:
        await conn.execute("INSERT INTO sessions (id, source, transcript_path, created_at)"
                           " VALUES (1, 'claude', '/t.jsonl', '2026-01-21T15:00:00.000Z')")
        await conn.executemany(
            "INSERT INTO session_messages (session_id, message_index, role, content,"
            " timestamp, raw, dedupe_key) VALUES (1, ?, ?, ?, ?, x'', ?)",
            [(n, role, content, stamp, f"k{n}") for n, (role, content, stamp)
             in enumerate(rows)])
        marks: list[bool] = []
        copies = store.Copies(words=_words)
        sizes = itertools.cycle(pages)
        ends = iter([*sorted(set(passes)), len(rows)])
        restart = iter(restarts)
        start, end = 0, next(ends)
        while start < len(rows):
            if start >= end:
                end = next(ends)
                if next(restart, False):  # a daemon started since: nothing in hand
                    copies = store.Copies(words=_words)
                continue
            page = await store.messages_from(conn, 1, start, min(next(sizes), end - start),
                                             copies=copies)
            marks += [m.is_copy for m in page]
            start += len(page)
        whole = await store.digest_messages(conn, 1, len(rows), copies=store.Copies(
            words=_words))
        assert [m.is_copy for m in whole] == marks
    return marks


_runs = itertools.count()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(said=st.lists(_MESSAGE, min_size=1, max_size=25),
       replay=st.tuples(st.integers(0, 24), st.integers(0, 25)),
       after=st.lists(_MESSAGE, max_size=5),
       pages=st.lists(st.integers(1, 9), min_size=1, max_size=4),
       passes=st.lists(st.integers(1, 60), max_size=4),
       restarts=st.lists(st.booleans(), max_size=4))
def test_copies_are_found_with_any_pages_passes_and_restarts(
        tmp_path: Path, said: list[tuple[str, str, int]], replay: tuple[int, int],
        after: list[tuple[str, str, int]], pages: list[int], passes: list[int],
        restarts: list[bool]) -> None:
    # A session whose clock moves on (or stands still), then a run of it written again,
    # then more said after the resume.
    second, rows = 0, []
    for role, content, step in said:
        second += step
        rows.append((role, content, _stamp(second)))
    first, count = replay[0] % len(rows), replay[1]
    rows += rows[first:first + count]
    for role, content, step in after:
        second += step + 1
        rows.append((role, content, _stamp(second)))
    path = tmp_path / f"state-{next(_runs)}"
    marks = asyncio.run(_read(path, rows, pages, passes, restarts))
    assert marks == _expected(rows)
    if count and first + count <= len(said):
        # A run written again at once is found whole.
        assert all(marks[len(said):len(said) + count])


def test_a_session_whose_clock_moves_on_is_not_looked_at(tmp_path: Path) -> None:
    """No copy, and no statement beyond the page's own (and one look for the session it
    was forked from), for a session read in order."""
    rows = [("user" if n % 2 else "assistant", "same words", _stamp(n)) for n in range(30)]
    statements: list[str] = []

    async def read() -> list[bool]:
        state = load_settings(None, state_dir=str(tmp_path / "state"))
        async with open_store(state) as conn:
            await conn.execute(
                "INSERT INTO sessions (id, source, transcript_path, created_at)"
                " VALUES (1, 'claude', '/t.jsonl', '2026-01-21T15:00:00.000Z')")
            await conn.executemany(
                "INSERT INTO session_messages (session_id, message_index, role, content,"
                " timestamp, raw, dedupe_key) VALUES (1, ?, ?, ?, ?, x'', ?)",
                [(n, r, c, s, f"k{n}") for n, (r, c, s) in enumerate(rows)])
            await conn.commit()
            await conn.set_trace_callback(statements.append)
            copies, marks, start = store.Copies(), [], 0
            while start < len(rows):
                page = await store.messages_from(conn, 1, start, 7, copies=copies)
                marks += [m.is_copy for m in page]
                start += len(page)
            return marks

    assert asyncio.run(read()) == [False] * 30
    # Its pages, and once whether a session it was forked from holds its first message.
    others = [s for s in statements if "session_messages" in s and "message_index >= " not in s]
    assert len(others) == 1 and "dedupe_key = " in others[0]
    with sqlite3.connect(tmp_path / "state" / "memoryd.db") as db:
        assert db.execute("SELECT count(*) FROM session_messages").fetchone()[0] == 30


def test_a_daemon_started_in_the_middle_of_a_copy_still_finds_the_rest(
        tmp_path: Path) -> None:
    """A pass that starts inside a run of copies (the daemon restarted after saving part
    of it) knows the session's latest time from the store, not from the message before."""
    said = [("user" if n % 2 else "assistant", f"words {n}", _stamp(10 * n))
            for n in range(10)]
    rows = said + said + [("user", "after the resume", _stamp(200))]
    marks = asyncio.run(_read(tmp_path / "state", rows, [4], [15], [True]))
    assert marks == [False] * 10 + [True] * 10 + [False]
