"""Tailing real files into a real SQLite store: odd bytes, long lines, time zones, backfill."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
import structlog.testing
from helpers import local_time_zone

from memoryd.clock import FakeClock
from memoryd.config import Settings, load_settings
from memoryd.ingest.ingester import Ingester
from memoryd.store import connect, migrate
from memoryd.store.connection import PAGE_SIZE

pytestmark = pytest.mark.usefixtures("clean_environment")


@dataclass
class Harness:
    root: Path  # a Claude projects root
    settings: Settings
    ingester: Ingester

    @property
    def project(self) -> Path:
        path = self.root / "-home-user-project"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.settings.database_path)

    def rows(self, path: Path) -> list[tuple[Any, ...]]:
        """(uuid, role, content, timestamp, raw, byte_offset) of the file's session, in order."""
        with self.db() as db:
            found = db.execute("SELECT session_id FROM session_message_state WHERE path = ?",
                               (str(path),)).fetchone()
            if found is None:
                return []
            return db.execute(
                "SELECT uuid, role, content, timestamp, raw, byte_offset FROM session_messages"
                " WHERE session_id = ? ORDER BY message_index", found).fetchall()

    def rejected(self, path: Path) -> list[tuple[int, bytes, str]]:
        with self.db() as db:
            return [(o, r if isinstance(r, bytes) else r.encode(), why) for o, r, why in db.execute(
                "SELECT byte_offset, raw, reason FROM rejected_lines WHERE path = ?"
                " ORDER BY byte_offset", (str(path),))]


async def _harness(tmp_path: Path, **settings: Any) -> AsyncIterator[Harness]:
    root = tmp_path / "claude"
    root.mkdir()
    loaded = load_settings(None, state_dir=str(tmp_path / "state"),
                           sources=[{"kind": "claude", "root": str(root)}], **settings)
    conn = await connect(loaded.database_path)
    try:
        await migrate(conn)
        ingester = Ingester(conn, loaded, FakeClock())
        await ingester.load()
        yield Harness(root, loaded, ingester)
    finally:
        await conn.close()


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    """An ingester over an empty Claude root, on a fresh store."""
    async for h in _harness(tmp_path):
        yield h


def line(uuid: str, text: object = "hi", *, timestamp: str = "2025-09-03T00:47:19.293Z",
         kind: str = "user") -> bytes:
    """One Claude transcript line, in the real field order (uuid and timestamp last)."""
    record = {"parentUuid": None, "isSidechain": False, "type": kind,
              "message": {"role": kind, "content": text}, "uuid": uuid, "timestamp": timestamp}
    return orjson.dumps(record) + b"\n"


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


# -- odd bytes ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_ten_megabyte_line(harness: Harness) -> None:
    """A single 10 MB line is stored whole, with its raw bytes, and the next line after it."""
    path = harness.project / "big.jsonl"
    big = line("u-big", "x" * (10 * 1024 * 1024))
    path.write_bytes(line("u-0") + big + line("u-2"))
    await harness.ingester.run_once()
    rows = harness.rows(path)
    assert [r[0] for r in rows] == ["u-0", "u-big", "u-2"]
    assert len(rows[1][2]) == 10 * 1024 * 1024
    assert rows[1][4].encode() == big[:-1]
    assert rows[2][5] == len(line("u-0")) + len(big)


async def test_invalid_utf8_is_decoded_where_possible_and_kept_raw(harness: Harness) -> None:
    """A line with an invalid UTF-8 byte is stored (decoded with a replacement character) with
    its raw bytes intact; a line of undecodable garbage is a rejected line; both let later
    lines through."""
    path = harness.project / "bytes.jsonl"
    broken = line("u-1", "caf\u00e9").replace("é".encode(), b"\xe9")
    garbage = b"\xff\xfe\x00garbage\x80"
    path.write_bytes(line("u-0") + broken + garbage + b"\n" + line("u-3"))
    await harness.ingester.run_once()
    rows = harness.rows(path)
    assert [r[0] for r in rows] == ["u-0", "u-1", "u-3"]
    assert rows[1][2] == "caf\ufffd"
    assert rows[1][4] == broken[:-1]  # stored as a BLOB, byte for byte
    offset = len(line("u-0")) + len(broken)
    assert harness.rejected(path) == [(offset, garbage, "not JSON")]


async def test_crlf_line_endings(harness: Harness) -> None:
    """CRLF-terminated lines are stored like LF ones, with correct byte offsets."""
    path = harness.project / "crlf.jsonl"
    first, second = line("u-0").replace(b"\n", b"\r\n"), line("u-1").replace(b"\n", b"\r\n")
    path.write_bytes(first + second)
    await harness.ingester.run_once()
    rows = harness.rows(path)
    assert [(r[0], r[2], r[5]) for r in rows] == [("u-0", "hi", 0), ("u-1", "hi", len(first))]
    assert harness.rejected(path) == []


async def test_non_json_and_non_objects_are_rejected_and_never_block(harness: Harness) -> None:
    """Non-JSON lines and JSON that is not an object go to rejected_lines with path, offset
    and raw bytes, and the lines after them are stored; a second pass adds nothing."""
    path = harness.project / "mixed.jsonl"
    bad = [b"// Source: gist 95599dbc", b'"a string"', b"42", b"[1, 2]", b"{not json"]
    data, expected, offset = b"", [], 0
    for i, junk in enumerate(bad):
        good = line(f"u-{i}")
        data += good + junk + b"\n"
        expected.append((offset + len(good), junk))
        offset = len(data)
    data += line("u-last")
    path.write_bytes(data)
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(path)] == [*(f"u-{i}" for i in range(5)), "u-last"]
    assert [(o, raw) for o, raw, _why in harness.rejected(path)] == expected
    stats = await harness.ingester.run_once()
    assert stats.messages == 0
    assert len(harness.rejected(path)) == len(bad)


async def test_partial_last_line_waits_for_its_newline(harness: Harness) -> None:
    """A last line without its newline is neither stored nor rejected until the newline comes."""
    path = harness.project / "partial.jsonl"
    whole = line("u-1", "finished later")
    path.write_bytes(line("u-0") + whole[:-10])
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(path)] == ["u-0"]
    append(path, whole[-10:-1])  # still no newline
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(path)] == ["u-0"]
    assert harness.rejected(path) == []
    append(path, b"\n")
    await harness.ingester.run_once()
    rows = harness.rows(path)
    assert [(r[0], r[2]) for r in rows] == [("u-0", "hi"), ("u-1", "finished later")]


async def test_unfinished_tail_rewritten_to_the_same_size_is_read(harness: Harness) -> None:
    """A partial tail replaced in place by a complete line of the very same size is read: an
    unchanged size alone does not mean nothing new arrived."""
    path = harness.project / "same-size.jsonl"
    replacement = line("u-2", "b")
    unfinished = line("u-1", "a" * 200)[: len(replacement)]
    assert b"\n" not in unfinished
    path.write_bytes(line("u-0") + unfinished)
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(path)] == ["u-0"]
    with path.open("r+b") as handle:
        handle.seek(len(line("u-0")))
        handle.write(replacement)
    assert path.stat().st_size == len(line("u-0")) + len(unfinished)
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(path)] == ["u-0", "u-2"]


async def test_file_whose_first_line_is_incomplete_is_not_registered(harness: Harness) -> None:
    """A file is not registered (no state, no session) before its first line is complete."""
    path = harness.project / "growing.jsonl"
    first = line("u-0", "a first line that is being written")
    path.write_bytes(first[:20])
    await harness.ingester.run_once()
    with harness.db() as db:
        assert db.execute("SELECT COUNT(*) FROM session_message_state").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM sessions").fetchone() == (0,)
    append(path, first[20:])
    await harness.ingester.run_once()
    with harness.db() as db:
        (head_length,) = db.execute("SELECT head_length FROM session_message_state"
                                    " WHERE path = ?", (str(path),)).fetchone()
    assert head_length == len(first)
    assert [r[0] for r in harness.rows(path)] == ["u-0"]


@pytest.fixture
def los_angeles_time() -> Iterator[None]:
    """The process's local zone set to America/Los_Angeles for one test."""
    with local_time_zone("America/Los_Angeles"):
        yield


async def test_timestamps_are_stored_as_utc_in_any_zone(
    los_angeles_time: None, harness: Harness
) -> None:
    """With TZ set to a non-UTC zone, timestamps with offsets, with Z and without a zone are
    all stored as UTC, and so are the session's first and last message times."""
    assert time.localtime(0).tm_gmtoff != 0
    path = harness.project / "zones.jsonl"
    path.write_bytes(
        line("u-0", timestamp="2025-09-03T02:47:19.293+02:00")
        + line("u-1", timestamp="2025-09-03T00:48:00Z")
        + line("u-2", timestamp="2025-09-03T00:49:00.5")
    )
    await harness.ingester.run_once()
    stamps = [r[3] for r in harness.rows(path)]
    assert stamps == ["2025-09-03T00:47:19.293Z", "2025-09-03T00:48:00.000Z",
                      "2025-09-03T00:49:00.500Z"]
    with harness.db() as db:
        started, last = db.execute("SELECT started_at, last_message_at FROM sessions").fetchone()
    assert (started, last) == (stamps[0], stamps[2])


# -- files moving under the tailer --------------------------------------------------------


async def test_rename_continues_where_it_was(harness: Harness) -> None:
    """A renamed file keeps its session and offset: old lines are not read again."""
    path = harness.project / "a.jsonl"
    path.write_bytes(line("u-0") + line("u-1"))
    await harness.ingester.run_once()
    moved = harness.root / "-elsewhere" / "b.jsonl"
    moved.parent.mkdir()
    path.rename(moved)
    append(moved, line("u-2"))
    stats = await harness.ingester.run_once()
    assert stats.bytes_read == len(line("u-2"))
    assert [r[0] for r in harness.rows(moved)] == ["u-0", "u-1", "u-2"]
    with harness.db() as db:
        assert db.execute("SELECT COUNT(*), MAX(transcript_path) FROM sessions").fetchone() == (
            1, str(moved))


async def test_move_picks_the_state_whose_first_line_matches(harness: Harness) -> None:
    """Two saved states on one inode (emptied, rewritten, moved): a later move continues the
    file whose first line matches, not the older one (found by the state machine)."""
    first = harness.project / "a.jsonl"
    first.write_bytes(line("u-old"))
    await harness.ingester.run_once()
    os.truncate(first, 0)
    second = harness.project / "b.jsonl"
    first.rename(second)
    append(second, line("u-new"))
    await harness.ingester.run_once()
    session_of_second = harness.rows(second)
    assert [r[0] for r in session_of_second] == ["u-new"]
    third = harness.project / "c.jsonl"
    second.rename(third)
    append(third, line("u-later"))
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(third)] == ["u-new", "u-later"]
    assert [r[0] for r in harness.rows(first)] in ([], ["u-old"])


async def test_truncate_and_rewrite_never_duplicates_or_deletes(harness: Harness) -> None:
    """A file truncated and rewritten is read from the start: known uuids are not stored
    again, new ones are, and what was stored stays."""
    path = harness.project / "t.jsonl"
    path.write_bytes(line("u-0") + line("u-1") + line("u-2"))
    await harness.ingester.run_once()
    path.write_bytes(line("u-1") + line("u-3"))  # opens with O_TRUNC: same inode, shorter
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(path)] == ["u-0", "u-1", "u-2", "u-3"]


async def test_replaced_file_with_same_first_line(harness: Harness) -> None:
    """A new file at a known path (new inode), starting with the same line, is read from the
    start; only its new messages are added."""
    path = harness.project / "r.jsonl"
    path.write_bytes(line("u-0") + line("u-1"))
    await harness.ingester.run_once()
    keep_inode = path.open("rb")  # so the new file cannot reuse the old inode
    try:
        path.unlink()
        path.write_bytes(line("u-0") + line("u-new") + line("u-1") + line("u-9"))
        await harness.ingester.run_once()
    finally:
        keep_inode.close()
    assert [r[0] for r in harness.rows(path)] == ["u-0", "u-1", "u-new", "u-9"]


async def test_two_files_with_the_same_first_line_are_two_sessions(harness: Harness) -> None:
    """Files that share a first line (a replayed history) are two sessions with all their rows."""
    first, second = harness.project / "one.jsonl", harness.project / "two.jsonl"
    first.write_bytes(line("u-0") + line("u-1"))
    await harness.ingester.run_once()
    second.write_bytes(line("u-0") + line("u-1") + line("u-2"))
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(first)] == ["u-0", "u-1"]
    assert [r[0] for r in harness.rows(second)] == ["u-0", "u-1", "u-2"]
    with harness.db() as db:
        assert db.execute("SELECT COUNT(*) FROM sessions").fetchone() == (2,)


async def test_deleted_file_keeps_its_session_and_messages(harness: Harness) -> None:
    """Deleting a transcript leaves its session and rows; its state is marked missing."""
    path = harness.project / "d.jsonl"
    path.write_bytes(line("u-0"))
    await harness.ingester.run_once()
    path.unlink()
    await harness.ingester.run_once()
    with harness.db() as db:
        assert db.execute("SELECT COUNT(*) FROM session_messages").fetchone() == (1,)
        assert db.execute("SELECT missing FROM session_message_state").fetchone() == (1,)


# -- backfill -----------------------------------------------------------------------------


def _open_fds_under(directory: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            count += 1
    return count


def _write_corpus(root: Path, n_files: int, lines_per_file: int) -> list[str]:
    paths = []
    for i in range(n_files):
        path = root / f"-p{i % 7}" / f"s{i:03d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"".join(line(f"{i}-{j}", "y" * 300) for j in range(lines_per_file)))
        paths.append(str(path))
    assert Path(paths[0]).stat().st_size > 3 * 4096  # so every file needs several turns
    return paths


@pytest.fixture
async def small_turns(tmp_path: Path) -> AsyncIterator[Harness]:
    """An ingester whose turns read at most 4 KB of a file before moving to the next file."""
    async for h in _harness(tmp_path, read_chunk_bytes=4096):
        yield h


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
async def test_backfill_holds_few_files_open_and_is_fair(small_turns: Harness) -> None:
    """A backfill of 300 files never holds more than a handful of descriptors, and reads them
    round-robin: no file gets a second turn before every file has had its first."""
    harness, n_files, lines_per_file = small_turns, 300, 40
    paths = _write_corpus(harness.root, n_files, lines_per_file)

    total_fds_before = len(os.listdir("/proc/self/fd"))
    peak = {"corpus": 0, "total": 0}
    turns: list[str] = []
    offsets: dict[str, int] = {}
    sampling = threading.Event()
    sampling.set()

    def sample() -> None:  # a second look, between the callbacks, from another thread
        while sampling.is_set():
            peak["corpus"] = max(peak["corpus"], _open_fds_under(harness.root))
            time.sleep(0.0005)

    def progress(_bytes_read: int) -> None:
        peak["total"] = max(peak["total"], len(os.listdir("/proc/self/fd")))
        peak["corpus"] = max(peak["corpus"], _open_fds_under(harness.root))
        moved = {t.path: t.state.offset for t in harness.ingester.tracked.values()
                 if t.state is not None and t.state.offset != offsets.get(t.path, 0)}
        assert len(moved) == 1  # exactly one file advanced per reported turn
        offsets.update(moved)
        turns.extend(moved)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stats = await harness.ingester.run_once(progress=progress)
    finally:
        sampling.clear()
        sampler.join()

    assert stats.messages == n_files * lines_per_file
    assert peak["corpus"] <= 2
    assert peak["total"] - total_fds_before <= 4
    # Fair: the turns come in rounds, each visiting every unfinished file once (all files
    # are the same size, so at any moment no file is more than one turn ahead of another).
    assert sorted(turns[:n_files]) == sorted(paths)
    counts = dict.fromkeys(paths, 0)
    for turn in turns:
        counts[turn] += 1
        assert max(counts.values()) - min(counts.values()) <= 1
    assert min(counts.values()) >= 3
    with harness.db() as db:
        assert db.execute("SELECT COUNT(DISTINCT session_id) FROM session_messages"
                          ).fetchone() == (n_files,)


async def test_unreadable_directories_and_files_warn_once(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory that cannot be listed, and a file that cannot be opened, are said once
    across many passes (as root nothing is unreadable, so the refusals are injected), and
    said again only after they were readable in between."""
    import memoryd.ingest.discovery as discovery
    import memoryd.ingest.tailer as tailer

    locked = harness.root / "-home-user-locked"
    locked.mkdir()
    path = harness.project / "s.jsonl"
    path.write_bytes(line("u-0"))
    await harness.ingester.run_once()
    real_scandir, real_open = os.scandir, tailer.open_transcript

    def no_listing(directory: Any) -> Any:
        if str(directory) == str(locked):
            raise PermissionError(13, "Permission denied", str(directory))
        return real_scandir(directory)

    def no_reading(name: str) -> int:
        if name == str(path):
            raise PermissionError(13, "Permission denied", name)
        return real_open(name)

    monkeypatch.setattr(discovery.os, "scandir", no_listing)
    monkeypatch.setattr(tailer, "open_transcript", no_reading)
    append(path, line("u-1"))
    with structlog.testing.capture_logs() as logs:
        for _ in range(4):  # every pass scans and gives the file a turn
            await harness.ingester.run_once()
    events = [entry["event"] for entry in logs]
    assert events.count("directory_unreadable") == 1, events
    assert events.count("transcript_unreadable") == 1, events
    monkeypatch.setattr(tailer, "open_transcript", real_open)
    await harness.ingester.run_once()
    assert [r[0] for r in harness.rows(path)] == ["u-0", "u-1"]


# -- overlapping commits -----------------------------------------------------------------


async def test_a_failed_commit_moves_no_file_on_and_the_next_pass_stores_each_once(
        harness: Harness) -> None:
    """Files are committed one while the next is parsed: a commit that fails (here the
    write, refused by a trigger) leaves its file where it was, a file committed before it
    stays stored, and the next pass stores everything exactly once."""
    from memoryd.errors import StoreError

    paths = [harness.project / f"s{i}.jsonl" for i in range(4)]
    for i, path in enumerate(paths):
        text = "boom" if i == 2 else "fine"
        path.write_bytes(b"".join(line(f"u-{i}-{n}", f"{text} {n}") for n in range(30)))
    with harness.db() as db:
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON session_messages"
                   " WHEN NEW.content LIKE 'boom%' BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(StoreError, match="refused"):
        await harness.ingester.run_once()
    assert harness.rows(paths[2]) == []
    stored_before = {p.name: len(harness.rows(p)) for p in paths}
    assert set(stored_before.values()) <= {0, 30}  # whole files or nothing
    with harness.db() as db:
        db.execute("DROP TRIGGER refuse")
    await harness.ingester.run_once()
    for i, path in enumerate(paths):
        assert [r[0] for r in harness.rows(path)] == [f"u-{i}-{n}" for n in range(30)]
    with harness.db() as db:
        assert db.execute("SELECT COUNT(*), COUNT(DISTINCT uuid) FROM session_messages"
                          ).fetchone() == (120, 120)


async def test_new_store_uses_larger_pages_and_an_older_store_keeps_its_own(
        tmp_path: Path) -> None:
    """A new state database is made with PAGE_SIZE pages; one made with SQLite's 4 KB
    default keeps them, and ingests into them as before."""
    (tmp_path / "new").mkdir()
    async for fresh in _harness(tmp_path / "new"):
        path = fresh.project / "a.jsonl"
        path.write_bytes(line("u-0") + line("u-1", "y" * 20_000))
        await fresh.ingester.run_once()
        with fresh.db() as db:
            assert db.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
        assert [r[0] for r in fresh.rows(path)] == ["u-0", "u-1"]

    older = tmp_path / "old" / "state"
    older.mkdir(parents=True)
    with sqlite3.connect(older / "memoryd.db") as db:
        db.execute("PRAGMA page_size = 4096")
        db.execute("PRAGMA journal_mode = WAL")
    async for old in _harness(tmp_path / "old"):
        path = old.project / "b.jsonl"
        path.write_bytes(line("u-2") + line("u-3", "z" * 20_000))
        await old.ingester.run_once()
        with old.db() as db:
            assert db.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert [r[2] for r in old.rows(path)] == ["hi", "z" * 20_000]


async def test_a_transcript_made_while_the_watch_starts_is_read_by_a_catch_up(
        harness: Harness) -> None:
    """The watcher says it covers the roots before its notifications flow; a session that
    writes its transcript in between (an agent started with the daemon, then killed) is
    never named by a notification. A catch-up in the watch's first seconds (the next
    session's start hook) walks the roots and reads it."""
    import asyncio

    ingester, stop = harness.ingester, asyncio.Event()
    running = asyncio.create_task(ingester.run(stop))
    try:
        await asyncio.wait_for(ingester.catch_up(), 30)
        ingester.watching([harness.root])
        killed = harness.project / "killed.jsonl"
        killed.write_bytes(line("k1", "Decision: refunds go through the ledger service"))
        await asyncio.wait_for(ingester.catch_up(), 30)
        assert [r[0] for r in harness.rows(killed)] == ["k1"]
    finally:
        stop.set()
        ingester.wake.set()
        await asyncio.wait_for(running, 30)
