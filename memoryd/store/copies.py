"""Which stored messages repeat an earlier one of their session (a resumed, forked or
copied conversation written again): `Copies`, carried from page to page, and the marking."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Marked(Protocol):
    """A message as the marking sees it (`sessions.StoredMessage`)."""

    index: int
    is_copy: bool



@dataclass(slots=True)
class Copies:
    """Which messages of a session repeat an earlier one, carried from page to page.

    Claude Code writes a resumed session's conversation into its transcript again, under
    new uuids, with each record's own timestamp and content (a real session: 176 of its
    529 records, half of its memory text twice). Such a record goes back in time: its
    timestamp is not later than one already read. Only those are compared, by
    (timestamp, role, kind, content, tool), with the session's earlier messages: a
    session whose clock only moves on costs nothing.

    `claude --fork-session` (2.1.331, run against a local model server) starts a new
    transcript with the whole conversation it forks copied in: the same uuids and
    timestamps, the new session's id. A session whose first message (its uuid and time)
    a session of the same agent with a lower id holds is a fork of it: its messages held
    there are copies, page after page, until a page holds none.

    Codex's `fork` before 0.16x (0.120.0, run against a local model server) wrote the
    forked rollout again at the head of the fork's, under the original's own header
    (`copied_from`) and stamped with the time of the fork: the fork's first messages
    that are, one for one, the original's first messages (compared without their time)
    are copies; the first that is not begins the fork's own conversation.

    The copies stay stored (what the transcript holds is kept); memory, digests and
    requests leave them out, so each message reaches memory once, in one session.
    """

    #: The latest timestamp among the session's messages before `index`.
    latest: str | None = None
    #: The sessions (lower ids) it was forked from, while the pages read still copy them,
    #: and whether they were looked for.
    forked_from: list[int] = field(default_factory=list)
    looked: bool = False
    #: The session its transcript copies (`copied_from`), while its first messages
    #: still copy that one's, and whether it was looked for (a session named but not
    #: stored yet is looked for again at each read).
    original: int | None = None
    looked_for_original: bool = False
    #: The records read at the `latest` instant (a few): what a record at it is compared
    #: with, as (message index, `seen` of its key): a digest, not the row, is kept for
    #: every session the daemon follows.
    at_latest: list[tuple[int, bytes]] = field(default_factory=list)
    #: The message index `latest` holds for; another start reads it again.
    index: int = 0
    #: A person's words in a user message's text: what is compared of it (a resumed
    #: conversation writes a prompt and the IDE's note beside it as two records).
    words: Callable[[str], str] = str.strip

    def key(self, row: tuple[object, ...]) -> tuple[object, ...]:
        """What a row of `_read_messages` is compared by: (timestamp, role, kind, text,
        tool, tool input)."""
        content = row[3]
        if row[1] == "user" and isinstance(content, str):
            content = self.words(content)
        return (row[6], row[1], row[2], content, row[4], row[9])

    def seen(self, row: tuple[object, ...]) -> bytes:
        """The row's `key`, digested (what copies are found by)."""
        return hashlib.blake2b(repr(self.key(row)).encode("utf-8", "surrogatepass"),
                               digest_size=16).digest()


_COPY_LOOKUP = 500  # timestamps or keys per statement
#: How many messages before a read's start give the latest time it compares with.
LATEST_WINDOW = 5000
#: What a copy is compared by, as a row of `_read_messages` (`Copies.key`).
_COPY_COLUMNS = ("message_index, role, kind, content, tool_name, NULL, timestamp, NULL, NULL,"
                 " tool_input")


def _forked_from(conn: sqlite3.Connection, session_id: int, start: int,
                 rows: Sequence[tuple[object, ...]]) -> list[int]:
    """The sessions of the same agent, with lower ids, that started when this one did
    and hold its first message (its key and time): what `claude --fork-session` copied
    it from. Looked for once a session (and again by a daemon started since)."""
    first = rows[0] if start == 0 else conn.execute(
        "SELECT message_index, NULL, NULL, NULL, NULL, NULL, timestamp, NULL, NULL, NULL,"
        " NULL, dedupe_key FROM session_messages WHERE session_id = ? AND message_index = 0",
        (session_id,)).fetchone()
    if first is None or first[6] is None or str(first[11]).startswith("h:"):
        return []  # a hash of the line, not the agent's own id: it holds the session's id
    # It starts when the session it copies did: its earliest message is a copy.
    return [row[0] for row in conn.execute(
        "SELECT DISTINCT m.session_id FROM sessions f JOIN sessions s"
        " ON s.source = f.source AND s.started_at = f.started_at AND s.id < f.id"
        " JOIN session_messages m ON m.session_id = s.id AND m.dedupe_key = ?"
        " AND m.timestamp = ? WHERE f.id = ?",
        (first[11], first[6], session_id))]


def _copied_original(conn: sqlite3.Connection, session_id: int,
                     start: int) -> tuple[int | None, bool]:
    """The session this one's transcript copies before its own (`copied_from`), when its
    messages before `start` are still all copies of that one's; and whether it names one
    not stored yet (looked for again at the next read)."""
    found = conn.execute(
        "SELECT s.copied_from, (SELECT c.id FROM sessions c WHERE c.source = s.source"
        " AND c.external_id = s.copied_from AND c.id != s.id ORDER BY c.id LIMIT 1)"
        " FROM sessions s WHERE s.id = ?", (session_id,)).fetchone()
    if found is None or found[0] is None:
        return None, False
    if found[1] is None:
        return None, True
    # Compared in SQL, index by index: an original of thousands of messages is never
    # loaded whole.
    differs = conn.execute(
        "SELECT 1 FROM session_messages f LEFT JOIN session_messages o"
        " ON o.session_id = ? AND o.message_index = f.message_index"
        " WHERE f.session_id = ? AND f.message_index < ? AND (o.id IS NULL"
        " OR o.role IS NOT f.role OR o.kind IS NOT f.kind OR o.content IS NOT f.content"
        " OR o.tool_name IS NOT f.tool_name OR o.tool_input IS NOT f.tool_input) LIMIT 1",
        (found[1], session_id, start)).fetchone()
    return (None if differs else int(found[1])), False


def _mark_copied(conn: sqlite3.Connection, rows: Sequence[tuple[object, ...]],
                 messages: Sequence[Marked], copies: Copies) -> None:
    """Mark the messages that are the original's at the same index (role, kind, content,
    tool); from the first that is not, the session's own conversation: not compared
    again."""
    first, last = rows[0][0], rows[-1][0]
    held = {row[0]: tuple(row[1:]) for row in conn.execute(
        "SELECT message_index, role, kind, content, tool_name, tool_input"
        " FROM session_messages WHERE session_id = ? AND message_index BETWEEN ? AND ?",
        (copies.original, first, last))}
    for row, message in zip(rows, messages, strict=True):
        if held.get(row[0]) != (row[1], row[2], row[3], row[4], row[9]):
            copies.original = None
            return
        message.is_copy = True


def _mark_forked(conn: sqlite3.Connection, rows: Sequence[tuple[object, ...]],
                 messages: Sequence[Marked], copies: Copies) -> None:
    """Mark the messages the sessions it was forked from hold (same key, same time); once
    a page holds none, the fork's own conversation has begun: not looked for again."""
    keys = sorted({str(row[11]) for row in rows})
    held: set[tuple[str, object]] = set()
    marks = ", ".join("?" * len(copies.forked_from))
    for at in range(0, len(keys), _COPY_LOOKUP):
        part = keys[at:at + _COPY_LOOKUP]
        held.update((key, stamp) for key, stamp in conn.execute(
            f"SELECT dedupe_key, timestamp FROM session_messages WHERE session_id IN ({marks})"
            f" AND dedupe_key IN ({', '.join('?' * len(part))})",
            (*copies.forked_from, *part)))
    found = False
    for row, message in zip(rows, messages, strict=True):
        if (row[11], row[6]) in held:
            message.is_copy = found = True
    if not found:
        copies.forked_from = []


def mark_copies(conn: sqlite3.Connection, session_id: int, start: int,
                 rows: Sequence[tuple[object, ...]], messages: Sequence[Marked],
                 copies: Copies) -> None:
    """Set `is_copy` on the messages (read from index `start` on) that repeat an earlier
    message of the session, and move `copies` past them."""
    if copies.index != start:
        # The latest time of the messages just before, and those at it: a replay that
        # began further back than LATEST_WINDOW is found from where this read starts on.
        window = (session_id, start - LATEST_WINDOW, start)
        copies.latest = conn.execute(
            "SELECT MAX(timestamp) FROM session_messages WHERE session_id = ?"
            " AND message_index >= ? AND message_index < ?", window).fetchone()[0]
        copies.at_latest = [(int(row[0]), copies.seen(tuple(row))) for row in conn.execute(
            f"SELECT {_COPY_COLUMNS} FROM session_messages WHERE session_id = ?"
            " AND message_index >= ? AND message_index < ? AND timestamp = ?",
            (*window, copies.latest))] if copies.latest is not None else []
        copies.looked = copies.looked_for_original = False
    if not copies.looked:
        copies.forked_from = _forked_from(conn, session_id, start, rows)
        copies.looked = True
    if not copies.looked_for_original:
        copies.original, awaiting = _copied_original(conn, session_id, start)
        copies.looked_for_original = not awaiting
    if copies.forked_from:
        _mark_forked(conn, rows, messages, copies)
    if copies.original is not None:
        _mark_copied(conn, rows, messages, copies)
    latest = copies.latest
    back: list[int] = []  # earlier than a message read before
    ties: list[int] = []  # at the latest time read: agents write several records a ms
    first_seen: dict[bytes, int] = {}
    merged = 0  # how many of `at_latest` first_seen holds
    for position, row in enumerate(rows):
        stamp = row[6]
        if not isinstance(stamp, str) or row[1] == "tool" or row[2] == "tool_result":
            # A tool's result names no call here: two parallel calls' alike results at
            # one instant are two results (a copy's result is matched by its call id).
            continue
        if latest is not None and stamp < latest:
            back.append(position)
            continue
        if latest is not None and stamp == latest:
            ties.append(position)
            if not back:
                # Compared with the messages at that instant read before (pages or not).
                for index, seen in copies.at_latest[merged:]:
                    first_seen.setdefault(seen, index)
                merged = len(copies.at_latest)
        else:
            latest = stamp
            copies.at_latest, merged = [], 0
        copies.at_latest.append((int(row[0]), copies.seen(row)))  # type: ignore[call-overload]
    copies.latest = latest
    copies.index = messages[-1].index + 1
    if not back and not ties:
        return
    if back:
        # A replay: the session's earlier messages at those instants, read from the store
        # (no index on time: once a page that goes back, never for a session in order).
        first_seen = {}
        stamps = sorted({str(rows[p][6]) for p in back + ties})
        last = messages[max(back + ties)].index
        for at in range(0, len(stamps), _COPY_LOOKUP):
            part = stamps[at:at + _COPY_LOOKUP]
            for row in conn.execute(
                    f"SELECT {_COPY_COLUMNS} FROM session_messages WHERE session_id = ?"
                    f" AND message_index < ? AND timestamp IN ({', '.join('?' * len(part))})",
                    (session_id, last, *part)):
                key = copies.seen(tuple(row))
                index = row[0]
                assert isinstance(index, int)
                if index < first_seen.get(key, index + 1):
                    first_seen[key] = index
    for position in back + ties:
        message = messages[position]
        if first_seen.get(copies.seen(rows[position]), message.index) < message.index:
            message.is_copy = True
