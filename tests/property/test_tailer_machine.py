"""A hypothesis state machine over real files: whatever happens to the transcripts, every
message written is stored exactly once, in order of first appearance, and nothing partial.

The actions mirror Vector's file-source model tests: append a line, append part of a line
(completed later), truncate, replace (a new inode at the same path), rename or move,
copy under the same name into another directory, delete, restart the ingester, and
ingest. Deleted and replaced files are held open by the test so the file system cannot
hand their inode to a new file: inode reuse makes a new file indistinguishable from a
moved one, and is not what this machine tests.

The model follows issue 2 section 5. A file's identity is its device, inode and first
line: a file at a new path with a known inode and head was moved and continues its
session; a new file at a known path replaced the old one and continues that session,
read again from the start. Within a session a message is its uuid: rows are the
session's distinct uuids in the order they were first seen in a complete line.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import aiosqlite
import orjson
import pytest
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from memoryd.clock import FakeClock
from memoryd.config import Settings
from memoryd.ingest.ingester import Ingester
from memoryd.private import mask_private
from memoryd.store import connect, migrate

DIRECTORIES = ("-home-user-a", "-home-user-b")
# `<private>` spans are masked in the archive (tested in their own tests): not here.
_texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=30).filter(
    lambda t: mask_private(t) == t)


@dataclass
class Live:
    """A transcript on disk: its complete lines (uuid, bytes) and an unfinished last line."""

    lines: list[tuple[str, bytes]] = field(default_factory=list)
    partial: tuple[str, bytes, int] | None = None  # uuid, whole line, bytes written so far

    def size(self) -> int:
        return sum(len(b) for _u, b in self.lines) + (self.partial[2] if self.partial else 0)


@dataclass
class Registration:
    """What the ingester knows about a file it registered, as of the last pass."""

    lineage: int
    path: str
    device: int
    inode: int
    head: bytes
    offset: int = 0  # end of the last complete line read
    marker: bytes = b""  # the 64 bytes before it


class TailerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="tailer-machine-"))
        self.root = self.base / "claude"
        for directory in DIRECTORIES:
            (self.root / directory).mkdir(parents=True)
        self.config = Settings(state_dir=self.base / "state",
                               sources=[{"kind": "claude", "root": self.root}])  # type: ignore[list-item]
        self.loop = asyncio.new_event_loop()
        self.conn: aiosqlite.Connection | None = None
        self.ingester: Ingester | None = None
        self.held: list[int] = []  # descriptors keeping deleted or replaced inodes alive
        self.live: dict[str, Live] = {}
        self.registered: dict[str, Registration] = {}  # by path, as the ingester knows it
        self.expected: dict[int, list[str]] = {}  # lineage -> uuids in first-seen order
        self.sessions: dict[int, int] = {}  # lineage -> session id
        self.lines_by_uuid: dict[str, bytes] = {}
        self.counter = 0
        self.lineages = 0

    # -- plumbing ---------------------------------------------------------------------------

    def _start(self) -> None:
        async def start() -> Ingester:
            self.conn = conn = await connect(self.config.database_path)
            await migrate(conn)
            ingester = Ingester(conn, self.config, FakeClock())
            await ingester.load()
            return ingester

        self.ingester = self.loop.run_until_complete(start())

    def _stop(self) -> None:
        if self.conn is not None:
            self.loop.run_until_complete(self.conn.close())
            self.conn = None
            self.ingester = None

    def teardown(self) -> None:
        try:
            self._stop()
        finally:
            self.loop.close()
            for fd in self.held:
                os.close(fd)
            shutil.rmtree(self.base, ignore_errors=True)

    def _new_line(self, text: str) -> tuple[str, bytes]:
        self.counter += 1
        uuid = f"u-{self.counter:04d}"
        kind = "user" if self.counter % 2 else "assistant"
        # Real Claude Code field order: uuid and timestamp come last.
        minute, second = divmod(self.counter % 3600, 60)
        record = {"parentUuid": None, "isSidechain": False, "type": kind,
                  "message": {"role": kind, "content": text}, "uuid": uuid,
                  "timestamp": f"2025-09-03T00:{minute:02d}:{second:02d}Z"}
        data = orjson.dumps(record) + b"\n"
        self.lines_by_uuid[uuid] = data
        return uuid, data

    def _fresh_path(self, directory: int) -> str:
        self.counter += 1
        return str(self.root / DIRECTORIES[directory] / f"s{self.counter:04d}.jsonl")

    def _write(self, path: str, data: bytes, *, mode: str = "ab") -> None:
        with open(path, mode) as handle:
            handle.write(data)

    def _hold(self, path: str) -> None:
        self.held.append(os.open(path, os.O_RDONLY))

    # -- rules: what happens to the files ---------------------------------------------------

    @initialize(files=st.lists(st.lists(_texts, min_size=1, max_size=4), min_size=1,
                               max_size=3))
    def start(self, files: list[list[str]]) -> None:
        """Start with a few transcripts already on disk, as a backfill would."""
        for i, texts in enumerate(files):
            lines = [self._new_line(t) for t in texts]
            path = self._fresh_path(i % 2)
            self._write(path, b"".join(b for _u, b in lines), mode="wb")
            self.live[path] = Live(lines)
        self._start()

    def _maybe_ingest(self, now: bool) -> None:
        # Passes right after a change see the files mid-way, not only after several changes.
        if now:
            self.ingest()

    @rule(directory=st.integers(0, 1), texts=st.lists(_texts, max_size=3),
          replay=st.booleans(), data=st.data(), now=st.booleans())
    def create_file(self, directory: int, texts: list[str], replay: bool,
                    data: st.DataObject, now: bool) -> None:
        """A new transcript; with `replay`, it opens with another file's lines (same head)."""
        lines: list[tuple[str, bytes]] = []
        donors = [live for live in self.live.values() if live.lines]
        if replay and donors:
            donor = data.draw(st.sampled_from(donors))
            lines = donor.lines[: data.draw(st.integers(1, len(donor.lines)))]
        lines += [self._new_line(t) for t in texts]
        path = self._fresh_path(directory)
        self._write(path, b"".join(b for _u, b in lines), mode="wb")
        self.live[path] = Live(list(lines))
        self._maybe_ingest(now)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), texts=st.lists(_texts, min_size=1, max_size=3), now=st.booleans())
    def append_lines(self, data: st.DataObject, texts: list[str], now: bool) -> None:
        """Whole lines; an unfinished line in the way is finished first, as a writer would."""
        path = data.draw(st.sampled_from(sorted(self.live)))
        live = self.live[path]
        if live.partial is not None:
            uuid, line, written = live.partial
            self._write(path, line[written:])
            live.partial = None
            live.lines.append((uuid, line))
        for text in texts:
            uuid, line = self._new_line(text)
            self._write(path, line)
            self.live[path].lines.append((uuid, line))
        self._maybe_ingest(now)

    @precondition(lambda self: any(live.partial is None for live in self.live.values()))
    @rule(data=st.data(), text=_texts, now=st.booleans())
    def append_partial_line(self, data: st.DataObject, text: str, now: bool) -> None:
        """Part of a line, without its newline (an agent caught mid-write)."""
        path = data.draw(st.sampled_from(sorted(p for p, v in self.live.items() if not v.partial)))
        uuid, line = self._new_line(text)
        written = data.draw(st.integers(1, len(line) - 1))
        self._write(path, line[:written])
        self.live[path].partial = (uuid, line, written)
        self._maybe_ingest(now)

    @precondition(lambda self: any(live.partial for live in self.live.values()))
    @rule(data=st.data(), finish=st.booleans(), now=st.booleans())
    def continue_partial_line(self, data: st.DataObject, finish: bool, now: bool) -> None:
        """More of the unfinished line; with `finish`, the rest and its newline."""
        path = data.draw(st.sampled_from(sorted(p for p, v in self.live.items() if v.partial)))
        live = self.live[path]
        assert live.partial is not None
        uuid, line, written = live.partial
        upto = len(line) if finish else data.draw(st.integers(written, len(line) - 1))
        self._write(path, line[written:upto])
        if upto == len(line):
            live.partial = None
            live.lines.append((uuid, line))
        else:
            live.partial = (uuid, line, upto)
        self._maybe_ingest(now)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), now=st.booleans())
    def truncate(self, data: st.DataObject, now: bool) -> None:
        """Cut the file back to the end of one of its lines (or to empty), in place."""
        path = data.draw(st.sampled_from(sorted(self.live)))
        live = self.live[path]
        keep = data.draw(st.integers(0, len(live.lines)))
        live.lines, live.partial = live.lines[:keep], None
        os.truncate(path, live.size())
        self._maybe_ingest(now)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), same_head=st.booleans(), texts=st.lists(_texts, max_size=3),
          now=st.booleans())
    def replace(self, data: st.DataObject, same_head: bool, texts: list[str], now: bool) -> None:
        """A new file (new inode) at the same path, maybe with the same first line and a
        replay of some of the old lines, then new ones."""
        path = data.draw(st.sampled_from(sorted(self.live)))
        old = self.live[path].lines
        lines: list[tuple[str, bytes]] = []
        if same_head and old:
            lines.append(old[0])
            lines += [line for line in old[1:] if data.draw(st.booleans())]
        lines += [self._new_line(t) for t in texts]
        staging = str(self.base / "staging.tmp")
        self._write(staging, b"".join(b for _u, b in lines), mode="wb")
        self._hold(path)
        os.replace(staging, path)
        self.live[path] = Live(lines)
        self._maybe_ingest(now)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), directory=st.integers(0, 1), now=st.booleans())
    def rename(self, data: st.DataObject, directory: int, now: bool) -> None:
        """Rename or move the file to a new path (in the same or the other directory)."""
        path = data.draw(st.sampled_from(sorted(self.live)))
        target = self._fresh_path(directory)
        os.rename(path, target)
        self.live[target] = self.live.pop(path)
        self._maybe_ingest(now)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), now=st.booleans())
    def copy_beside(self, data: st.DataObject, now: bool) -> None:
        """Copy a file under its own name into the other directory: a backup, or the first
        half of a move across file systems when `delete` later takes the original."""
        path = Path(data.draw(st.sampled_from(sorted(self.live))))
        other = DIRECTORIES[1 - DIRECTORIES.index(path.parent.name)]
        target = str(self.root / other / path.name)
        assume(target not in self.live)
        shutil.copyfile(path, target)
        source = self.live[str(path)]
        self.live[target] = Live(list(source.lines), source.partial)
        self._maybe_ingest(now)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), now=st.booleans())
    def delete(self, data: st.DataObject, now: bool) -> None:
        path = data.draw(st.sampled_from(sorted(self.live)))
        self._hold(path)
        os.unlink(path)
        del self.live[path]
        self._maybe_ingest(now)

    @precondition(lambda self: bool(self.sessions))
    @rule()
    def restart(self) -> None:
        """Close the store and start a new ingester on it, as after a crash or reboot."""
        self._stop()
        self._start()

    @rule()
    def ingest(self) -> None:
        """One full pass; then what is stored must be exactly what the model expects."""
        assert self.ingester is not None
        self.loop.run_until_complete(self.ingester.run_once())
        self._observe()
        self._check()

    # -- the model ---------------------------------------------------------------------------

    def _observe(self) -> None:
        """How a pass resolves identities (issue 2 section 5), and what it then reads."""
        identity = {p: os.stat(p) for p in self.live}
        by_inode: dict[tuple[int, int], list[Registration]] = {}
        for registration in self.registered.values():
            by_inode.setdefault((registration.device, registration.inode), []).append(
                registration)
        lineage_of: dict[str, int | None] = {}
        claimed: set[str] = set()
        # The same file at the same path.
        for path, st_ in identity.items():
            known = self.registered.get(path)
            if known is not None and (known.device, known.inode) == (st_.st_dev, st_.st_ino):
                lineage_of[path] = known.lineage
                claimed.add(path)
        # A known file (inode and first line) at a new path: moved, it continues.
        for path, st_ in identity.items():
            if path in lineage_of:
                continue
            with open(path, "rb") as handle:
                start = handle.read(max((len(r.head) for r in self.registered.values()),
                                        default=0))
            known = next((r for r in by_inode.get((st_.st_dev, st_.st_ino), ())
                          if r.path not in claimed and start.startswith(r.head)), None)
            if known is None:
                continue
            lineage_of[path] = known.lineage
            claimed.update((known.path, path))
            self.registered.pop(known.path)
            self.registered.pop(path, None)
            known.path = path
            self.registered[path] = known
        # A new path whose bytes begin as a known file's that is gone (head, and the 64 bytes
        # before where it was read to): moved by copy, it continues, read again.
        # (In path order: of two new files beginning alike, the first continues.)
        for path in sorted(identity):
            if path in lineage_of or path in self.registered:
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            # Of several gone files that begin alike, the newest session's.
            twin = max((r for r in self.registered.values()
                        if r.path not in identity and r.path not in claimed
                        and data.startswith(r.head) and len(data) >= r.offset
                        and data[max(0, r.offset - 64):r.offset] == r.marker),
                       key=lambda r: self.sessions.get(r.lineage, 0), default=None)
            if twin is None:
                continue
            lineage_of[path] = twin.lineage
            claimed.update((twin.path, path))
            self.registered.pop(twin.path)
        # A known path that now holds another file: replaced, same session, read again.
        for path in identity:
            if path in lineage_of:
                continue
            known = self.registered.get(path)
            lineage_of[path] = known.lineage if known is not None and path not in claimed else None
        # Then every file is read to its end: each complete line's uuid, once per session.
        for path, live in self.live.items():
            if not live.lines:
                continue  # not registered yet, or emptied: nothing to read
            lineage = lineage_of[path]
            if lineage is None:
                self.lineages += 1
                lineage = self.lineages
                self.expected[lineage] = []
            seen = self.expected[lineage]
            seen += [u for u in dict.fromkeys(u for u, _b in live.lines) if u not in seen]
            st_ = identity[path]
            content = b"".join(b for _u, b in live.lines)
            self.registered[path] = Registration(lineage, path, st_.st_dev, st_.st_ino,
                                                 live.lines[0][1], len(content),
                                                 content[-64:])
            session = self._session_at(path)
            assert self.sessions.setdefault(lineage, session) == session, (
                f"{path} was stored in session {session}, expected {self.sessions[lineage]}")

    def _session_at(self, path: str) -> int:
        with sqlite3.connect(self.config.database_path) as db:
            row = db.execute("SELECT session_id FROM session_message_state WHERE path = ?",
                             (path,)).fetchone()
        assert row is not None, f"{path} has complete lines but was not registered"
        return int(row[0])

    def _check(self) -> None:
        with sqlite3.connect(self.config.database_path) as db:
            stored: dict[int, list[tuple[str, bytes]]] = {}
            for session, uuid, raw in db.execute(
                "SELECT session_id, uuid, raw FROM session_messages"
                " ORDER BY session_id, message_index"
            ):
                stored.setdefault(session, []).append(
                    (uuid, raw if isinstance(raw, bytes) else raw.encode()))
            rejected = db.execute("SELECT path, byte_offset, raw FROM rejected_lines").fetchall()
            sessions = {s for (s,) in db.execute("SELECT id FROM sessions")}
        assert sessions == set(self.sessions.values()), "a session the model did not expect"
        assert rejected == [], "a partial or joined line was taken for a line"
        for rows in stored.values():
            for uuid, raw in rows:  # nothing partial: every row is a whole written line
                assert raw + b"\n" == self.lines_by_uuid[uuid]
        by_session = {self.sessions[lineage]: uuids for lineage, uuids in self.expected.items()}
        assert {s: [u for u, _r in rows] for s, rows in stored.items()} == {
            s: uuids for s, uuids in by_session.items() if uuids}


@pytest.mark.usefixtures("clean_environment")
def test_tailer_state_machine() -> None:
    """Under any sequence of appends, partial lines, truncations, replacements, renames,
    deletions and restarts, each message is stored once per session, in first-seen order,
    and never a partial line."""
    run_state_machine_as_test(  # type: ignore[no-untyped-call]
        TailerMachine,
        settings=settings(max_examples=100, stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]),
    )
