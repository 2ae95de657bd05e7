"""What only the embedded SQLite backend promises: its file, schema, errors and scrubbing."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from memoryd.clock import FakeClock
from memoryd.errors import BackendError, BackendUnavailable
from memoryd.memory import ConversationSegment, SQLiteMemoryBackend
from memoryd.memory.backends.sqlite import backend as sqlite_module
from memoryd.memory.backends.sqlite import bulk
from memoryd.memory.backends.sqlite.schema import LATEST_VERSION, translate
from memoryd.memory.protocol import save_segments


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[SQLiteMemoryBackend]:
    """A backend on a fresh file inside a state directory that does not exist yet."""
    backend = await SQLiteMemoryBackend.open(tmp_path / "state" / "memory.db", clock=FakeClock())
    yield backend
    await backend.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_files_are_private(tmp_path: Path, opened: SQLiteMemoryBackend) -> None:
    """The database and its WAL side files are 0600, a directory it creates is 0700."""
    await opened.remember("private")
    db = tmp_path / "state" / "memory.db"
    assert _mode(db) == 0o600
    assert _mode(db.parent) == 0o700
    for suffix in ("-wal", "-shm"):
        side = db.with_name(db.name + suffix)
        if side.exists():
            assert _mode(side) == 0o600


async def test_existing_loose_file_is_tightened(tmp_path: Path) -> None:
    """Opening a database file that is world-readable makes it 0600."""
    db = tmp_path / "memory.db"
    db.touch(mode=0o644)
    db.chmod(0o644)
    backend = await SQLiteMemoryBackend.open(db, clock=FakeClock())
    await backend.close()
    assert _mode(db) == 0o600


async def test_wal_and_migrations_recorded_once(tmp_path: Path) -> None:
    """The file is in WAL mode; reopening applies no migration twice."""
    db = tmp_path / "memory.db"
    with structlog.testing.capture_logs() as first_logs:
        backend = await SQLiteMemoryBackend.open(db, clock=FakeClock())
    await backend.close()
    with structlog.testing.capture_logs() as second_logs:
        backend = await SQLiteMemoryBackend.open(db, clock=FakeClock())
    await backend.close()
    applied = [e for e in first_logs if e["event"] == "memory_migration_applied"]
    assert [e["version"] for e in applied] == list(range(1, LATEST_VERSION + 1))
    assert not [e for e in second_logs if e["event"] == "memory_migration_applied"]
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        versions = [r[0] for r in raw.execute("SELECT version FROM schema_migrations")]
    assert versions == list(range(1, LATEST_VERSION + 1))


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer memoryd is refused rather than misread."""
    db = tmp_path / "memory.db"
    backend = await SQLiteMemoryBackend.open(db, clock=FakeClock())
    await backend.close()
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'x')")
    with pytest.raises(BackendError, match="newer than this memoryd"):
        await SQLiteMemoryBackend.open(db, clock=FakeClock())


async def test_fts_follows_rows(tmp_path: Path, opened: SQLiteMemoryBackend) -> None:
    """The FTS index gains a row per memory and loses it on hard delete (triggers)."""
    a = await opened.remember("zebra crossing")
    await opened.remember("zebra stripes")
    db = tmp_path / "state" / "memory.db"

    def fts_hits() -> int:
        with sqlite3.connect(db) as raw:
            return int(raw.execute(
                "SELECT count(*) FROM memory_chunks_fts WHERE memory_chunks_fts"
                " MATCH 'content: zebra'"
            ).fetchone()[0])

    assert fts_hits() == 2
    await opened.forget(a.id, hard=True)
    assert fts_hits() == 1
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO memory_chunks_fts (memory_chunks_fts) VALUES ('integrity-check')")
        # One full-text index (schema v7): the chunks'.
        assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'memories_fts%'"
                           ).fetchone() == (0,)


async def test_hard_forget_leaves_no_bytes_on_disk(tmp_path: Path,
                                                   opened: SQLiteMemoryBackend) -> None:
    """After a hard forget the secret text appears in neither the database nor its WAL."""
    secret = "xylophonequartz"
    memory = await opened.remember(f"the vault code word is {secret} and nothing else")
    for i in range(20):
        await opened.remember(f"filler memory {i} about ordinary things")
    await opened.forget(memory.id, hard=True)
    await opened.close()
    state = tmp_path / "state"
    for path in state.iterdir():
        assert secret.encode() not in path.read_bytes(), path.name


async def test_export_pages_through_everything(
    opened: SQLiteMemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Export walks all pages (no silent cap) in id order, even across page boundaries."""
    monkeypatch.setattr(sqlite_module, "EXPORT_PAGE_SIZE", 3)
    made = {(await opened.remember(f"item {i}")).id for i in range(10)}
    ids = [r["id"] async for r in opened.export()]
    assert ids == sorted(made)


async def test_locked_database_is_transient(tmp_path: Path) -> None:
    """A 'database is locked' error becomes BackendUnavailable; other errors BackendError."""
    db = tmp_path / "lock.db"
    holder = sqlite3.connect(db, timeout=0, isolation_level=None)
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError) as locked:
            other.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(sqlite3.OperationalError) as syntax:
            other.execute("SELEC 1")
    finally:
        holder.close()
        other.close()
    unavailable = translate(locked.value)
    assert isinstance(unavailable, BackendUnavailable) and unavailable.transient
    assert unavailable.backend == "sqlite"
    failed = translate(syntax.value)
    assert type(failed) is BackendError and not failed.transient


async def test_closed_backend(opened: SQLiteMemoryBackend) -> None:
    """A closed backend reports unavailable and refuses work with BackendError."""
    await opened.close()
    await opened.close()
    assert not await opened.is_available()
    with pytest.raises(BackendError, match="closed"):
        await opened.recall("x")


async def test_concurrent_use_of_one_backend(opened: SQLiteMemoryBackend) -> None:
    """Concurrent coroutines on one backend never collide inside a transaction."""

    async def work(i: int) -> None:
        await opened.remember(f"concurrent memory {i}")
        await opened.save_conversation_segment(ConversationSegment(
            source="claude", session_id=i, session_external_id=None, project=None,
            first_index=0, last_index=1, text=f"concurrent segment {i}"))
        await opened.recall("concurrent")

    await asyncio.gather(*(work(i) for i in range(25)))
    assert len([r async for r in opened.export()]) == 50


async def test_two_backends_share_one_file(tmp_path: Path) -> None:
    """Two backends (as two processes would) on one file see each other's writes."""
    db = tmp_path / "memory.db"
    clock = FakeClock()
    async with (
        await SQLiteMemoryBackend.open(db, clock=clock) as one,
        await SQLiteMemoryBackend.open(db, clock=clock) as two,
    ):
        memory = await one.remember("shared between processes")
        (hit,) = await two.recall("processes")
        assert hit.memory_id == memory.id
        seg = ConversationSegment(source="codex", session_id=1, session_external_id="x",
                                  project=None, first_index=0, last_index=0, text="hello")
        assert (await one.save_conversation_segment(seg)).created
        assert not (await two.save_conversation_segment(seg)).created


async def test_busy_database_is_unavailable_but_recall_still_answers(tmp_path: Path) -> None:
    """With another writer holding the lock, writes raise BackendUnavailable; recall still reads.

    Recall writes nothing, and a use that cannot be recorded is logged, never raised."""
    db = tmp_path / "memory.db"
    async with await SQLiteMemoryBackend.open(db, clock=FakeClock(), busy_timeout=0.05) as backend:
        memory = await backend.remember("the lock holder test")
        holder = sqlite3.connect(db, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(BackendUnavailable):
                await backend.remember("blocked")
            (hit,) = await backend.recall("holder")
            assert hit.memory_id == memory.id
            with structlog.testing.capture_logs() as logs:
                await backend.record_use([memory.id])
            assert any(e["event"] == "memory_use_not_recorded" for e in logs)
        finally:
            holder.close()
        assert await backend.is_available()
        await backend.remember("unblocked")


async def test_a_batch_of_segments_stores_every_chunk_as_cut(
        tmp_path: Path, opened: SQLiteMemoryBackend) -> None:
    """A batch's chunks, written in one statement, are each exactly their span of the
    memory's text (any Unicode, quotes, backslashes, NUL), with their messages and the
    project's scope token; an already stored segment adds none."""
    tricky = ("naïve café 🚀 \u2028 \"quoted\" \\back\\slash\\ \x00 zero-width\u200b "
              "Ünïcödé 日本語 ") * 40
    segments = [
        ConversationSegment(
            source="claude", session_id=7, session_external_id="s-7",
            project=f"/p/{n % 2}", first_index=n * 2, last_index=n * 2 + 1,
            text=f"user: {tricky} {n}\nassistant: answer {n} {tricky}",
            message_uuids=(f"u{n}a", f"u{n}b"))
        for n in range(5)]
    results = await opened.save_conversation_segments(segments)
    assert all(r.created for r in results)
    assert not any(r.created for r in await opened.save_conversation_segments(segments[:2]))
    with sqlite3.connect(tmp_path / "state" / "memory.db") as raw:
        rows = raw.execute(
            "SELECT m.content, m.project, c.start_char, c.end_char, c.content, c.first_index,"
            " c.last_index, c.message_uuids, c.scope, mp.id FROM memory_chunks c"
            " JOIN memories m ON m.seq = c.memory_seq"
            " LEFT JOIN memory_projects mp ON mp.project = m.project ORDER BY c.seq").fetchall()
    assert len(rows) >= 10
    for content, _project, start, end, text, first, last, uuids, scope, project_id in rows:
        assert text == content[start:end]
        assert first is not None and last is not None and uuids.startswith('["u')
        assert scope == f"p{project_id}"
    covered = {(r[0], r[2], r[3]) for r in rows}
    assert {seg.text for seg in segments} == {c for c, _, _ in covered}


async def test_a_batch_prepared_ahead_is_saved_as_made_and_only_by_its_backend(
        tmp_path: Path) -> None:
    """Recovery makes a batch's rows while the batch before is written
    (`prepare_segments`): saved later, they are the rows made then, in one transaction;
    another backend (another store, another clock) makes its own."""
    from datetime import UTC, datetime

    from memoryd.memory.protocol import prepare_segments

    batch = [ConversationSegment(
        source="claude", session_id=3, session_external_id="s-3", project="/p",
        first_index=n, last_index=n, text=f"user: step {n} of the deploy", message_uuids=(f"u{n}",))
        for n in range(3)]
    made_at, later = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)
    clock = FakeClock(made_at)
    first = await SQLiteMemoryBackend.open(tmp_path / "a" / "memory.db", clock=clock)
    second = await SQLiteMemoryBackend.open(tmp_path / "b" / "memory.db",
                                            clock=FakeClock(later))
    try:
        prepared = prepare_segments(first, batch)
        assert list(prepared) == batch
        clock.advance(3600)
        assert all(r.created for r in await save_segments(first, prepared))
        assert all(r.created for r in await save_segments(second, prepared))
        for backend, when in ((first, made_at), (second, later)):
            memories = [await backend.get(s.id) for s in batch]
            assert [m.content for m in memories if m] == [s.text for s in batch]
            assert {m.created_at for m in memories if m} == {when}
    finally:
        await first.close()
        await second.close()


async def test_a_batch_supersedes_each_segments_own_shorter_tails(
        opened: SQLiteMemoryBackend) -> None:
    """In one batch, every segment supersedes the shorter saves of its own messages (and
    only those), oldest first in its chain."""
    def seg(session: int, first: int, last: int) -> ConversationSegment:
        return ConversationSegment(
            source="claude", session_id=session, session_external_id=f"s-{session}",
            project=None, first_index=first, last_index=last,
            text=f"talk of session {session} from {first} to {last}")

    shorter = [seg(1, 0, 3), seg(1, 0, 5), seg(2, 10, 12), seg(3, 0, 2)]
    for item in shorter:
        await opened.save_conversation_segment(item)
    batch = [seg(1, 0, 9), seg(2, 10, 20), seg(2, 21, 25)]
    assert all(r.created for r in await opened.save_conversation_segments(batch))
    by_id = {m.id: m for item in shorter + batch if (m := await opened.get(item.id))}
    # seg(1, 0, 5) already superseded seg(1, 0, 3) when it was saved.
    assert by_id[shorter[0].id].superseded_by == shorter[1].id
    assert by_id[shorter[1].id].superseded_by == batch[0].id
    assert by_id[batch[0].id].supersedes == shorter[1].id
    assert by_id[shorter[2].id].superseded_by == batch[1].id
    assert by_id[shorter[3].id].superseded_by is None
    assert by_id[batch[2].id].supersedes is None and by_id[batch[1].id].superseded_by is None


async def test_the_chunk_index_merges_eight_segments_at_a_time(
        tmp_path: Path, opened: SQLiteMemoryBackend) -> None:
    """Schema v8: FTS5's automerge is 8 on the chunk index (fewer merges on bulk saves)."""
    with sqlite3.connect(tmp_path / "state" / "memory.db") as raw:
        assert raw.execute("SELECT v FROM memory_chunks_fts_config WHERE k = 'automerge'"
                           ).fetchone() == (8,)


async def test_keyword_recall_reaches_past_matches_the_filters_refuse(
        opened: SQLiteMemoryBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """FTS5 ranks a few of its best matches before the filters are applied; when those
    are all refused (another agent's private memories), recall still finds the allowed
    match ranked below them."""
    from memoryd.memory.backends.sqlite import hybrid
    from memoryd.memory.recall import hybrid as ranking

    # For limit 1: a pool of 10, FTS5's best 10 matches (12 private ones) read first.
    monkeypatch.setattr(ranking, "CANDIDATES", 1)
    monkeypatch.setattr(hybrid, "KEYWORD_OVERFETCH", 1)
    for i in range(12):
        await opened.remember(f"deploy order staging deploy order staging note {i}",
                              project="/work/app", private_to="codex")
    shared = await opened.remember("the deploy notes mention a long list of other things",
                                   project="/work/app")
    found = await opened.recall("deploy order staging", project="/work/app", limit=1)
    assert [r.memory_id for r in found] == [shared.id]
    mine = await opened.recall("deploy order staging", project="/work/app", limit=1,
                               agent="codex")
    assert mine and mine[0].memory_id != shared.id


async def test_live_memory_index_covers_the_recall_filter(opened: SQLiteMemoryBackend,
                                                          tmp_path: Path) -> None:
    """The list of memories a recall allows is read from the live-memory index, which
    holds every column the filter reads (project, private_to): no row of `memories` is
    read for it (before, private_to was read from each of a project's rows)."""
    from datetime import UTC, datetime

    from memoryd.memory.backends.sqlite import hybrid, recall

    await opened.remember("anything", project="/work/app")
    conn = sqlite3.connect(tmp_path / "state" / "memory.db")
    try:
        columns = [row[2] for row in conn.execute("PRAGMA index_info(memories_live_by_project)")]
        assert columns == ["project", "private_to"]
        for agent in (None, "codex"):
            plan = recall.plan("", now=datetime.now(UTC), project="/work/app", since=None,
                               until=None, types=None, all_projects=False, agent=agent)
            assert plan is not None
            steps = [row[3] for row in conn.execute(
                "EXPLAIN QUERY PLAN " + hybrid._allowed_sql(plan), plan.params)]
            searches = [s for s in steps if s.startswith("SEARCH m")]
            assert len(searches) == 2, steps
            assert all("INDEX memories_live_by_project" in s for s in searches), steps
    finally:
        conn.close()


def test_statements_come_in_few_sizes() -> None:
    """Rows are inserted in statements of power-of-two sizes, within the limit on bound
    values: however batches vary, few distinct statements are prepared and kept."""
    conn = sqlite3.connect(":memory:")
    try:
        sizes: set[int] = set()
        for width in (9, 26):
            limit = min(bulk.MAX_VARIABLES,
                        conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
            for count in range(0, 1500):
                cuts = list(bulk._cuts(conn, width, count))
                assert [at for at, _ in cuts] == [sum(s for _, s in cuts[:i])
                                                  for i in range(len(cuts))]
                assert sum(size for _, size in cuts) == count
                for _, size in cuts:
                    assert size & (size - 1) == 0 and size * width <= limit
                    assert size <= bulk.MAX_ROWS
                sizes |= {size for _, size in cuts}
        assert len(sizes) <= bulk.MAX_ROWS.bit_length()
    finally:
        conn.close()


async def test_batches_of_every_size_keep_sqlite_small(tmp_path: Path) -> None:
    """A backfill's batches vary in size; what SQLite holds after them stays small (a
    statement prepared per size kept 71 MB after 150 batches)."""
    import ctypes
    import ctypes.util
    import random

    name = ctypes.util.find_library("sqlite3")
    if name is None:
        pytest.skip("SQLite is not a shared library here")
    lib = ctypes.CDLL(name)
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    rng = random.Random(1)
    before = lib.sqlite3_memory_used()  # the process's other connections, if any
    async with await SQLiteMemoryBackend.open(tmp_path / "m.db", clock=FakeClock()) as backend:
        n = 0
        for _ in range(40):
            segments = []
            for _ in range(rng.randint(60, 128)):
                n += 1
                segments.append(ConversationSegment(
                    source="claude", session_id=1, session_external_id="s", project="/p",
                    first_index=n * 10, last_index=n * 10 + 9,
                    text="\n".join(f"user: message {n} {i} " + "word " * rng.randint(20, 200)
                                   for i in range(rng.randint(2, 8))),
                    message_uuids=tuple(f"u{n}-{i}" for i in range(10))))
            await backend.save_conversation_segments(segments)
        used = (lib.sqlite3_memory_used() - before) / 1e6
    assert used < 12, f"SQLite holds {used:.1f} MB"


@pytest.mark.parametrize("layers", [None, ["sqlite", "jsonl"]])
async def test_a_backfill_s_page_cache_is_handed_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: list[str] | None) -> None:
    """After a burst of saves SQLite keeps its page cache (up to 2 MB a connection) for the
    connection's life; `release_memory` (what the daemon calls once a backfill is over)
    hands it back, through a chain of layers as well, and memory still answers."""
    import ctypes
    import ctypes.util

    from memoryd.config import load_settings
    from memoryd.memory.opening import open_layers
    from memoryd.memory.protocol import release_memory

    name = ctypes.util.find_library("sqlite3")
    if name is None:
        pytest.skip("SQLite is not a shared library here")
    lib = ctypes.CDLL(name)
    lib.sqlite3_memory_used.restype = ctypes.c_int64
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    settings = load_settings(None, state_dir=str(tmp_path / "state"), sources=[],
                             memory={"backends": layers} if layers else {})
    backend = await open_layers(settings, FakeClock(), None)
    try:
        for n in range(30):
            await save_segments(backend, [ConversationSegment(
                source="claude", session_id=n, session_external_id=f"s{n}", project="/p",
                first_index=i * 2, last_index=i * 2 + 1,
                text=f"user: step {n} {i} of the migration " + "detail " * 300,
                message_uuids=(f"u{n}-{i}",)) for i in range(40)])
        held = lib.sqlite3_memory_used()
        await release_memory(backend)
        freed = (held - lib.sqlite3_memory_used()) / 1e6
        assert freed > 1.0, f"handed back {freed:.2f} MB"
        found = await backend.recall("step 29 7 of the migration", limit=1)
        assert found and found[0].provenance.session_id == 29
    finally:
        await backend.close()


async def test_a_store_opened_for_reading_only_is_still_its_owner_s(tmp_path: Path) -> None:
    """Read-only (a hook on a full disk) writes nothing, still reads, and still refuses a
    user the store does not belong to."""
    from memoryd.errors import StoreOwnedElsewhere

    path = tmp_path / "memory.db"
    clock = FakeClock()
    owned = await SQLiteMemoryBackend.open(path, clock=clock, owner="alice")
    await owned.remember("the rate limit is 500/min", project="/p")
    await owned.close()
    before = path.read_bytes()
    reader = await SQLiteMemoryBackend.open(path, clock=clock, owner="alice", readonly=True)
    try:
        found = await reader.recall("rate limit", project="/p", limit=5)
        assert [r.content for r in found] == ["the rate limit is 500/min"]
    finally:
        await reader.close()
    assert path.read_bytes() == before
    with pytest.raises(StoreOwnedElsewhere):
        await SQLiteMemoryBackend.open(path, clock=clock, owner="bob", readonly=True)
