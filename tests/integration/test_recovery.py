"""Lifecycle and recovery on real SQLite files with a fake clock."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import TRANSCRIPTS, lay_out_fixtures, local_time_zone, sources_for

from memoryd.clock import FakeClock
from memoryd.config import Settings, load_settings
from memoryd.errors import BackendError, BackendUnavailable
from memoryd.ingest.ingester import Ingester
from memoryd.lifecycle.expiry import expire_stale_sessions, is_stale
from memoryd.lifecycle.recovery import Recovery
from memoryd.lifecycle.sync_policy import RecoveryPolicy
from memoryd.memory import (
    ConversationSegment,
    MemoryBackend,
    MemoryType,
    RequestedMemory,
    SaveResult,
    SQLiteMemoryBackend,
)
from memoryd.store.database import open_store

COMPACTED = TRANSCRIPTS / "claude" / (
    "daaain+claude-code-log__test__test_data__dag_compact_after_rewind.jsonl")
POMODORO = TRANSCRIPTS / "claude" / "yoavf+ai-sessions__examples__claude-code-pomodoro-timer.jsonl"


@dataclass
class World:
    settings: Settings
    clock: FakeClock
    project: Path

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.settings.database_path)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "claude"
    project = root / "-home-user-project"
    project.mkdir(parents=True)
    settings = load_settings(None, state_dir=str(tmp_path / "state"),
                             sources=[{"kind": "claude", "root": str(root)}])
    return World(settings, FakeClock(), project)


async def ingest(world: World) -> None:
    async with open_store(world.settings) as conn:
        ingester = Ingester(conn, world.settings, world.clock)
        await ingester.load()
        await ingester.run_once()


@pytest.fixture
async def backend(world: World) -> AsyncIterator[SQLiteMemoryBackend]:
    opened = await SQLiteMemoryBackend.open(world.settings.memory_path, clock=world.clock)
    yield opened
    await opened.close()


#: The fixtures' timestamps lie years before the fake clock: without this, every tail
#: would be due at once for its age (sync_max_lag), hiding the quiet rule under test.
NEVER = timedelta(days=36500)


async def recover(world: World, backend: MemoryBackend, *, max_lag: timedelta = NEVER,
                  **kwargs: Any) -> Any:
    policy = RecoveryPolicy(retry_attempts=2, retry_wait_max=0.01, sync_max_lag=max_lag)
    async with open_store(world.settings) as conn:
        return await Recovery(conn, backend, world.clock, policy).run(**kwargs)


def sync_state(world: World) -> list[tuple[int, int, int, str]]:
    with world.db() as db:
        return list(db.execute(
            "SELECT id, message_count, memory_sync_index, status FROM sessions ORDER BY id"))


async def conversation_ranges(backend: SQLiteMemoryBackend) -> dict[int, list[tuple[int, int]]]:
    ranges: dict[int, list[tuple[int, int]]] = {}
    async for record in backend.export():
        if record["type"] != MemoryType.CONVERSATION.value:
            continue
        p = record["provenance"]
        ranges.setdefault(p["session_id"], []).append((p["first_index"], p["last_index"]))
    return {k: sorted(v) for k, v in ranges.items()}


def assert_partitioned(ranges: list[tuple[int, int]], count: int) -> None:
    """The ranges cover 0..count-1 exactly once each, with no overlap and no hole."""
    covered = [i for first, last in ranges for i in range(first, last + 1)]
    assert covered == list(range(count))


def test_is_stale_is_a_pure_utc_decision() -> None:
    """Staleness depends only on the two instants, never on a local zone."""
    clock = FakeClock()
    from datetime import timedelta

    last = clock.now()
    assert not is_stale(last, last + timedelta(minutes=29, seconds=59), timedelta(minutes=30))
    assert is_stale(last, last + timedelta(minutes=30), timedelta(minutes=30))
    assert is_stale(None, last, timedelta(minutes=30))


@pytest.fixture(params=["UTC", "America/Los_Angeles", "Asia/Kathmandu"])
def local_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    with local_time_zone(request.param):
        yield request.param


async def test_quiet_session_pauses_and_new_line_reactivates(world: World, local_zone: str) -> None:
    """A session quiet for stale_session_timeout is paused; a new message makes it active."""
    from datetime import timedelta

    transcript = world.project / "s1.jsonl"
    line = {"type": "user", "uuid": "a", "timestamp": "2026-01-01T00:00:00Z",
            "message": {"role": "user", "content": "first"}}
    transcript.write_text(json.dumps(line) + "\n")
    await ingest(world)
    timeout = timedelta(minutes=30)
    async with open_store(world.settings) as conn:
        world.clock.advance(29 * 60)
        assert await expire_stale_sessions(conn, world.clock, timeout) == []
        world.clock.advance(60)
        assert await expire_stale_sessions(conn, world.clock, timeout) == [1]
    assert sync_state(world)[0][3] == "paused"

    line = {"type": "assistant", "uuid": "b", "message": {"role": "assistant", "content": "x"}}
    with transcript.open("a") as handle:
        handle.write(json.dumps(line) + "\n")
    await ingest(world)
    assert sync_state(world)[0][3] == "active"


async def test_the_lifecycle_check_reads_only_the_active_sessions(world: World) -> None:
    """Every minute the check pauses quiet sessions: it must find the active ones by an
    index, not read every session a store ever held (10,000 sessions refilled an idle
    daemon's page cache with 2 MB each time)."""
    async with open_store(world.settings) as conn:
        await conn.executemany(
            "INSERT INTO sessions (source, transcript_path, status, created_at)"
            " VALUES ('claude', ?, ?, '2026-01-01T00:00:00Z')",
            [(f"/t/{n}.jsonl", "active" if n % 100 == 0 else "paused") for n in range(2000)])
        statements: list[str] = []
        await conn.set_trace_callback(statements.append)
        world.clock.advance(3600)
        paused = await expire_stale_sessions(conn, world.clock, timedelta(minutes=30))
        await conn.set_trace_callback(None)
        assert len(paused) == 20
        [update] = [s for s in statements if s.lstrip().upper().startswith("UPDATE")]
        async with conn.execute("EXPLAIN QUERY PLAN " + update) as cursor:
            plan = " ".join(str(row[3]) for row in await cursor.fetchall())
    assert "USING INDEX sessions_active" in plan, plan


async def test_boundary_first_then_quiet_tail(world: World, backend: SQLiteMemoryBackend) -> None:
    """What precedes a compaction is saved at once; the open tail only once quiet."""
    (world.project / "compacted.jsonl").write_bytes(COMPACTED.read_bytes())
    await ingest(world)
    [(sid, count, _index, _)] = sync_state(world)
    with world.db() as db:
        boundary = db.execute("SELECT message_index FROM session_messages WHERE kind ="
                              " 'compact_boundary'").fetchone()[0]
    report = await recover(world, backend)
    assert sync_state(world)[0][2] == boundary
    assert report.segments_saved >= 1
    assert (await conversation_ranges(backend))[sid][-1][1] == boundary - 1

    world.clock.advance(61)
    await recover(world, backend)
    assert sync_state(world)[0][2] == count
    assert_partitioned((await conversation_ranges(backend))[sid], count)


async def test_summaries_become_session_summary_memories(world: World,
                                                         backend: SQLiteMemoryBackend) -> None:
    """Compaction summaries are saved once as session_summary memories."""
    (world.project / "compacted.jsonl").write_bytes(COMPACTED.read_bytes())
    await ingest(world)
    first = await recover(world, backend, force=True)
    again = await recover(world, backend, force=True)
    assert first.summaries_saved >= 1 and again.summaries_saved == 0
    kinds = [r["type"] async for r in backend.export()]
    assert kinds.count(MemoryType.SESSION_SUMMARY.value) == first.summaries_saved


async def test_summaries_carry_the_conversations_time_span(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """A summary is dated by the conversation it summarises, not by the day it was ingested."""
    (world.project / "compacted.jsonl").write_bytes(COMPACTED.read_bytes())
    world.clock.advance(400 * 86400)
    await ingest(world)
    await recover(world, backend, force=True)
    with world.db() as db:
        first, last = db.execute("SELECT MIN(timestamp), MAX(timestamp)"
                                 " FROM session_messages").fetchone()
    summaries = [r async for r in backend.export() if r["type"] == "session_summary"]
    assert summaries
    for record in summaries:
        span = record["provenance"]
        assert span["started_at"] is not None and span["ended_at"] is not None
        assert first[:19] <= span["started_at"][:19] <= span["ended_at"][:19] <= last[:19]
    last_week = await backend.recall("", since=world.clock.now() - timedelta(days=7),
                                     types=[MemoryType.SESSION_SUMMARY])
    assert last_week == []


class FlakyBackend:
    """Fault injection: the real backend behind it, failing the first `failures` saves."""

    def __init__(self, inner: SQLiteMemoryBackend, failures: int,
                 crash_after_save: bool = False) -> None:
        self.inner = inner
        self.failures = failures
        self.crash_after_save = crash_after_save
        self.fail_requests = False
        self.name = "flaky"

    async def save_requested_memory(self, requested: RequestedMemory) -> SaveResult:
        if self.fail_requests:
            raise BackendUnavailable("injected outage", backend=self.name)
        return await self.inner.save_requested_memory(requested)

    async def save_conversation_segment(self, segment: ConversationSegment) -> SaveResult:
        if self.failures > 0:
            self.failures -= 1
            raise BackendUnavailable("injected outage", backend=self.name)
        result = await self.inner.save_conversation_segment(segment)
        if self.crash_after_save:
            self.crash_after_save = False
            raise RuntimeError("crash between the save and the index update")
        return result

    async def save_conversation_segments(
            self, segments: list[ConversationSegment]) -> list[SaveResult]:
        # Each save of a batch may fail: faults land between segments, not only batches.
        return [await self.save_conversation_segment(s) for s in segments]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_backend_outage_loses_nothing(world: World, backend: SQLiteMemoryBackend) -> None:
    """While the backend fails the index stays put; once it recovers all is saved once."""
    (world.project / "pomodoro.jsonl").write_bytes(POMODORO.read_bytes())
    await ingest(world)
    flaky = FlakyBackend(backend, failures=3)
    policy = RecoveryPolicy(retry_attempts=2, retry_wait_max=0.01, sync_max_lag=NEVER)
    async with open_store(world.settings) as conn:
        recovery = Recovery(conn, flaky, world.clock, policy)  # type: ignore[arg-type]
        world.clock.advance(61)
        report = await recovery.run()
        assert report.failed_sessions == [1] and flaky.failures == 1
        assert sync_state(world)[0][2] == 0
        assert await conversation_ranges(backend) == {}
        # Backed off: the next run leaves the session alone.
        report = await recovery.run()
        assert report.failed_sessions == [] and flaky.failures == 1
        world.clock.advance(5)
        report = await recovery.run()
        assert report.failed_sessions == [] and flaky.failures == 0
    [(sid, count, index, _)] = sync_state(world)
    assert index == count
    assert_partitioned((await conversation_ranges(backend))[sid], count)


async def test_crash_between_save_and_index_update(world: World,
                                                   backend: SQLiteMemoryBackend) -> None:
    """A segment saved but not yet counted is recognised by its id, not stored twice."""
    (world.project / "pomodoro.jsonl").write_bytes(POMODORO.read_bytes())
    await ingest(world)
    crashing = FlakyBackend(backend, failures=0, crash_after_save=True)
    with pytest.raises(RuntimeError):
        await recover(world, crashing, force=True)
    assert sync_state(world)[0][2] == 0
    report = await recover(world, backend, force=True)
    assert report.segments_already_stored == 1
    [(sid, count, index, _)] = sync_state(world)
    assert index == count
    assert_partitioned((await conversation_ranges(backend))[sid], count)


@pytest.mark.parametrize("fault", ["save", "index"])
async def test_a_batch_that_stopped_stops_its_session_there(
        world: World, backend: SQLiteMemoryBackend, monkeypatch: pytest.MonkeyPatch,
        fault: str) -> None:
    """A session's batches overlap: one's index moves while the next one's memories are
    written. When one stops (its save fails, or another sync moved its index) the index
    moves past none after it, at most the one already writing is written, and the next
    pass saves the rest, each segment once."""
    from memoryd.lifecycle import recovery as recovery_module

    monkeypatch.setattr(recovery_module, "BATCH_SEGMENTS", 2)
    (world.project / "pomodoro.jsonl").write_bytes(POMODORO.read_bytes())
    await ingest(world)
    written: list[list[int]] = []  # each batch written: its segments' first indexes
    save = backend.save_conversation_segments

    async def saving(segments: Any) -> Any:
        if fault == "save" and len(written) == 2:
            written.append([])
            raise BackendError("injected failure", backend="sqlite")  # not transient
        written.append([s.first_index for s in segments])
        return await save(segments)

    monkeypatch.setattr(backend, "save_conversation_segments", saving)
    moved: list[int] = []
    advance = recovery_module.store.advance_sync_index

    async def advancing(conn: Any, session_id: int, old: int, new: int,
                        **kwargs: Any) -> bool:
        if fault == "index" and len(moved) == 2:
            moved.append(-1)
            return False  # as when another sync moved it first
        moved.append(new)
        return await advance(conn, session_id, old, new, **kwargs)

    monkeypatch.setattr(recovery_module.store, "advance_sync_index", advancing)
    # Short segments: the session's 118 messages are a dozen batches.
    policy = RecoveryPolicy(retry_attempts=2, retry_wait_max=0.01, sync_max_lag=NEVER,
                            max_chars=400)
    async with open_store(world.settings) as conn:
        report = await Recovery(conn, backend, world.clock, policy).run(force=True)
    third = written[2][0] if fault == "index" else None
    [(sid, count, index, _)] = sync_state(world)
    # The index stopped where the third batch begins.
    assert index == moved[1] and 0 < index < count
    if fault == "save":
        assert report.failed_sessions == [sid] and len(written) == 3
    else:
        assert third == index and len(written) <= 4 and len(moved) == 3
    monkeypatch.undo()
    async with open_store(world.settings) as conn:
        await Recovery(conn, backend, world.clock, policy).run(force=True)
    [(sid, count, index, _)] = sync_state(world)
    assert index == count
    assert_partitioned((await conversation_ranges(backend))[sid], count)


async def test_recall_finds_recovered_text_with_provenance(world: World,
                                                           backend: SQLiteMemoryBackend) -> None:
    """A phrase typed in a transcript is recalled with the uuids of its messages."""
    (world.project / "pomodoro.jsonl").write_bytes(POMODORO.read_bytes())
    await ingest(world)
    await recover(world, backend, force=True)
    with world.db() as db:
        said = dict(db.execute(
            "SELECT uuid, message_index FROM session_messages"
            " WHERE content LIKE '%smooth transition%'").fetchall())
    results = await backend.recall("smooth transitions between states")
    # The session comes back once, with its best evidence: messages that say it.
    [hit] = results
    assert hit.session_matches > 1 and "smooth transition" in (hit.excerpt or "")
    shown = [u for u in hit.provenance.message_uuids if u in said]
    assert shown
    first, last = hit.provenance.first_index, hit.provenance.last_index
    assert first is not None and last is not None
    assert all(first <= said[u] <= last for u in shown)
    assert hit.provenance.project == "/Users/yoavfarhi/dev/pomodoro/claude"


async def test_a_conversation_that_never_pauses_still_reaches_memory(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """A tail whose first message is older than sync_max_lag is saved while still active."""
    transcript = world.project / "busy.jsonl"
    start = world.clock.now()

    def say(i: int) -> None:
        stamp = (start + timedelta(seconds=30 * i)).isoformat().replace("+00:00", "Z")
        line = {"type": "user", "uuid": f"m{i}", "timestamp": stamp,
                "message": {"role": "user", "content": f"message number {i}"}}
        with transcript.open("a") as handle:
            handle.write(json.dumps(line) + "\n")

    saved_at = None
    for i in range(10):  # a message every 30 s: never quiet for sync_delay (60 s)
        say(i)
        await ingest(world)
        await recover(world, backend, max_lag=timedelta(minutes=2))
        if sync_state(world)[0][2] > 0 and saved_at is None:
            saved_at = i
        world.clock.advance(30)
    assert saved_at == 4  # the first message turned two minutes old with the fifth
    assert_partitioned((await conversation_ranges(backend))[1], sync_state(world)[0][2])


async def test_a_question_waits_for_its_answer_and_is_saved_with_it(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """A live session's last question, still unanswered, is not saved alone by a timed
    pass or by the sync after a turn: it joins its answer, so recall finds the answer
    with it instead of a bare question that outranks it. Once two minutes old, or forced
    (another session's start, `memoryd sync`), it is saved as it is."""
    transcript = world.project / "asking.jsonl"
    start = world.clock.now()

    def say(i: int, role: str, text: str) -> None:
        stamp = (start + timedelta(seconds=10 * i)).isoformat().replace("+00:00", "Z")
        content: Any = text if role == "user" else [{"type": "text", "text": text}]
        line = {"type": role, "uuid": f"m{i}", "timestamp": stamp, "sessionId": "s-ask",
                "message": {"role": role, "content": content}}
        with transcript.open("a") as handle:
            handle.write(json.dumps(line) + "\n")

    say(0, "user", "how should the build cache be warmed")
    say(1, "assistant", "warm it from the nightly artifact bucket before the first job")
    say(2, "user", "what is the rate limit of the staging gateway")
    await ingest(world)
    world.clock.advance(90)  # quiet for longer than sync_delay: the tail is due
    await recover(world, backend, max_lag=timedelta(minutes=5))
    assert sync_state(world)[0][2] == 2  # the question waits
    await recover(world, backend, max_lag=timedelta(minutes=5), force=True,
                  session_id=1, settle_questions=True)  # the sync after an agent's turn
    assert sync_state(world)[0][2] == 2

    say(3, "assistant", "the staging gateway allows 500 requests a minute per token")
    await ingest(world)
    world.clock.advance(90)
    await recover(world, backend, max_lag=timedelta(minutes=5))
    assert await conversation_ranges(backend) == {1: [(0, 1), (2, 3)]}
    hits = await backend.recall("rate limit staging gateway", limit=3)
    assert "500 requests a minute" in hits[0].content

    say(4, "user", "and the rate limit in production")
    await ingest(world)
    world.clock.advance(90)
    await recover(world, backend, max_lag=timedelta(minutes=5))
    assert sync_state(world)[0][2] == 4
    world.clock.advance(300)  # no answer in five minutes (killed mid-turn): saved alone
    await recover(world, backend, max_lag=timedelta(minutes=5))
    assert sync_state(world)[0][2] == 5

    say(5, "user", "one more question nobody answers")
    await ingest(world)
    await recover(world, backend, force=True, session_id=1)  # forced: saved as it is
    assert sync_state(world)[0][2] == 6


def _user_line(uuid: str, text: str, timestamp: str) -> str:
    """A line as Claude Code writes a typed prompt, in the pomodoro fixture's session."""
    return json.dumps({
        "parentUuid": None, "isSidechain": False, "userType": "external",
        "cwd": "/Users/yoavfarhi/dev/pomodoro/claude",
        "sessionId": "36d9e1bc-63bf-4e97-8a3e-2b20ba8583f2", "version": "2.0.24",
        "type": "user", "message": {"role": "user", "content": text}, "uuid": uuid,
        "timestamp": timestamp}) + "\n"


async def facts(backend: SQLiteMemoryBackend) -> list[dict[str, Any]]:
    return [r async for r in backend.export() if r["type"] == MemoryType.FACT.value]


async def test_remember_requests_become_facts_once(world: World,
                                                   backend: SQLiteMemoryBackend) -> None:
    """"Remember that …" typed in a session is saved as a fact of its own, pointing at the
    message; syncing the same messages again stores nothing new."""
    transcript = world.project / "pomodoro.jsonl"
    transcript.write_bytes(POMODORO.read_bytes() + _user_line(
        "remember-1", "Looks good. Remember that the timer must chime after exactly 25 "
        "minutes, and my api key is sk-abcdefghijklmnopqrstuvwx1234.",
        "2025-10-21T20:10:30.000Z").encode())
    await ingest(world)
    report = await recover(world, backend, force=True)
    assert report.requests_saved == 1
    [fact] = await facts(backend)
    assert fact["content"].startswith("Remember that the timer must chime after exactly 25")
    assert "sk-abcdefghijklmnop" not in fact["content"]  # masked, as in segments
    assert fact["tags"] == ["requested"] and fact["importance"] == 0.8
    with world.db() as db:
        index = db.execute("SELECT message_index FROM session_messages WHERE uuid = ?",
                           ("remember-1",)).fetchone()[0]
    provenance = fact["provenance"]
    assert (provenance["first_index"], provenance["last_index"]) == (index, index)
    assert provenance["message_uuids"] == ["remember-1"]
    results = await backend.recall("timer chime 25 minutes", types=[MemoryType.FACT])
    assert [r.memory_id for r in results] == [fact["id"]]

    with world.db() as db:  # as if the index had never moved: everything is synced again
        db.execute("UPDATE sessions SET memory_sync_index = 0")
    report = await recover(world, backend, force=True)
    assert report.requests_saved == 0 and report.segments_saved == 0
    assert len(await facts(backend)) == 1


async def test_request_save_failure_holds_the_index(world: World,
                                                    backend: SQLiteMemoryBackend) -> None:
    """If the fact cannot be saved, the segment's messages count as unsynced: the request
    is saved on a later pass, never skipped."""
    transcript = world.project / "pomodoro.jsonl"
    transcript.write_bytes(POMODORO.read_bytes() + _user_line(
        "remember-2", "From now on, keep every CSS colour in custom properties.",
        "2025-10-21T20:10:30.000Z").encode())
    await ingest(world)
    flaky = FlakyBackend(backend, failures=0)
    flaky.fail_requests = True
    report = await recover(world, flaky, force=True)
    assert report.failed_sessions == [1]
    assert sync_state(world)[0][2] < sync_state(world)[0][1]
    assert await facts(backend) == []
    report = await recover(world, backend, force=True)
    assert report.requests_saved == 1
    [(_, count, index, _)] = sync_state(world)
    assert index == count
    assert [f["content"] for f in await facts(backend)] == [
        "From now on, keep every CSS colour in custom properties."]


async def test_real_transcripts_ask_to_remember_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """No message of the fixture transcripts (real sessions of three agents, with injected
    prompts, tool output and the agents' own text) asks to remember anything, so any fact
    recovery extracts from them is a false positive."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    roots = lay_out_fixtures(tmp_path / "agents")
    settings = load_settings(None, state_dir=str(tmp_path / "state"), sources=sources_for(roots))
    everything = World(settings, FakeClock(), roots["claude"])
    await ingest(everything)
    async with await SQLiteMemoryBackend.open(settings.memory_path,
                                              clock=everything.clock) as backend:
        report = await recover(everything, backend, force=True)
        assert report.segments_saved > 50
        assert report.requests_saved == 0 and await facts(backend) == []


async def _digests(backend: SQLiteMemoryBackend) -> list[dict[str, Any]]:
    return [r async for r in backend.export() if r["type"] == MemoryType.SESSION_DIGEST.value]


async def test_a_session_gets_one_live_digest_that_grows_with_it(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """Recovery saves a digest of each session it syncs (31.1): what the person asked and
    the files it created, with provenance. When the session grows, the new digest
    supersedes the old one (history kept, one live version), and an unchanged session
    adds nothing on the next pass."""
    lines = POMODORO.read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    transcript = world.project / "pomodoro.jsonl"
    transcript.write_bytes(b"".join(lines[:half]))
    await ingest(world)
    first = await recover(world, backend, force=True)
    assert first.digests_saved == 1
    [old] = await _digests(backend)
    assert "Build a simple Pomodoro timer" in old["content"]
    assert old["provenance"]["first_index"] == 0

    transcript.write_bytes(b"".join(lines))
    await ingest(world)
    second = await recover(world, backend, force=True)
    assert second.digests_saved == 1
    found = await _digests(backend)
    live = [r for r in found if r["superseded_by"] is None]
    assert len(found) == 2 and len(live) == 1
    [new] = live
    assert new["supersedes"] == old["id"]
    assert new["provenance"]["last_index"] > old["provenance"]["last_index"]
    assert "index.html (new" in new["content"] and "Changed:" in new["content"]
    # A digest is recalled like any memory, by its type.
    recalled = await backend.recall("pomodoro timer", types=[MemoryType.SESSION_DIGEST])
    assert [r.memory_id for r in recalled] == [new["id"]]

    third = await recover(world, backend, force=True)
    assert third.digests_saved == 0 and len(await _digests(backend)) == 2


async def test_an_older_digest_saved_late_does_not_replace_the_newer(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """An outbox may replay an older version after a newer one landed: the newer stays
    the live one."""
    from memoryd.memory import DIGEST_KIND, SessionSummary

    def version(last: int, text: str) -> SessionSummary:
        return SessionSummary(source="claude", session_id=7, session_external_id="s7",
                              project="/p", kind=DIGEST_KIND, content=text, first_index=0,
                              last_index=last)

    newer = await backend.save_session_summary(version(40, "claude session s7: forty"))
    older = await backend.save_session_summary(version(10, "claude session s7: ten"))
    assert newer.created and older.created
    live = [r["id"] for r in await _digests(backend) if r["superseded_by"] is None]
    assert live == [newer.id]


async def test_a_forgotten_session_takes_its_digest_with_it(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """Forgetting a session forgets its digest, every version."""
    (world.project / "pomodoro.jsonl").write_bytes(POMODORO.read_bytes())
    await ingest(world)
    await recover(world, backend, force=True)
    [digest] = await _digests(backend)
    session = digest["provenance"]["session_external_id"]
    assert await backend.forget_where(session_external_id=session, hard=True) > 0
    assert await _digests(backend) == []


async def test_segments_stored_by_an_older_version_are_rendered_again_once(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """Issue 31.2's upgrade: a segment stored with tool inputs' JSON and tool output (as
    earlier versions wrote them) reads as memory text is written now, same id and range;
    a second pass changes nothing, and a segment whose messages expired keeps its text."""
    from memoryd.lifecycle.rerender import rerender_step
    from memoryd.lifecycle.segments import render_range
    from memoryd.store import sessions as sessions_store

    (world.project / "pomodoro.jsonl").write_bytes(POMODORO.read_bytes())
    await ingest(world)
    await recover(world, backend, force=True)
    segments = [r async for r in backend.export()
                if r["type"] == "conversation" and r["superseded_by"] is None]
    assert len(segments) > 1
    async with open_store(world.settings) as conn:
        olden = []
        for record in segments:
            p = record["provenance"]
            messages = await sessions_store.messages_from(
                conn, p["session_id"], p["first_index"], p["last_index"] - p["first_index"] + 1)
            old = "\n".join(f"{m.role}: {m.content}" for m in messages)  # the raw form
            if old != record["content"]:
                assert await backend.rewrite_content(record["id"], old)
                olden.append(record)
        segments = olden
        assert len(segments) > 1
        assert "[tool_use Write]" in "".join(
            [r["content"] async for r in backend.export() if r["type"] == "conversation"])
        # The last segment's messages expire: it keeps the text it has.
        kept = segments[-1]
        with world.db() as db:
            db.execute("UPDATE session_messages SET kind = 'expired' WHERE message_index = ?",
                       (kept["provenance"]["last_index"],))
        kept_text = (await backend.get(kept["id"])).content  # type: ignore[union-attr]
        step = await rerender_step(conn, backend, world.clock, sessions=1)
        assert step.done is False and step.rewritten == len(segments) - 1
        assert (await rerender_step(conn, backend, world.clock, sessions=1)).done
        for record in segments[:-1]:
            p = record["provenance"]
            messages = await sessions_store.messages_from(
                conn, p["session_id"], p["first_index"], p["last_index"] - p["first_index"] + 1)
            now = await backend.get(record["id"])
            assert now is not None and now.content == render_range(messages, now.project)
            assert "[tool_use" not in now.content and now.provenance.first_index == p[
                "first_index"]
        assert (await backend.get(kept["id"])).content == kept_text  # type: ignore[union-attr]
        # Done once: a later pass does nothing, even with old text around again.
        assert await backend.rewrite_content(segments[0]["id"], "assistant: old text")
        again = await rerender_step(conn, backend, world.clock)
        assert again.done and again.rewritten == 0
    found = await backend.recall("index.html", types=[MemoryType.CONVERSATION])
    assert found and all("[tool_use" not in r.content for r in found
                         if r.memory_id != kept["id"])


@pytest.fixture
def git_worktree(tmp_path: Path) -> tuple[Path, Path]:
    """A real repository and a linked worktree of it (with a sub-directory `web`)."""
    import os
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    repo, tree = tmp_path / "repo", tmp_path / "repo-wt"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "x"],
                 ["worktree", "add", "-q", "-b", "wt", str(tree)]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    (tree / "web").mkdir()
    return repo, tree


async def test_projects_stored_by_worktree_path_move_to_their_repository(
        world: World, backend: SQLiteMemoryBackend, git_worktree: tuple[Path, Path]) -> None:
    """Issue 31.4's upgrade: sessions and memories an older version labelled with a
    worktree's sub-directory move to the repository's project, once; a path outside any
    repository keeps its name."""
    from memoryd.lifecycle.repositories import relabel_by_repository

    repo, tree = git_worktree
    (world.project / "pomodoro.jsonl").write_bytes(POMODORO.read_bytes())
    await ingest(world)
    await recover(world, backend, force=True)
    with world.db() as db:
        [(original,)] = db.execute("SELECT project FROM sessions").fetchall()
    old = str(tree / "web")
    # As an older version stored them: under the worktree's sub-directory.
    assert (await backend.relabel_project(original, old)).moved > 0
    with world.db() as db:
        db.execute("UPDATE sessions SET project = ?", (old,))
    async with open_store(world.settings) as conn:
        assert await relabel_by_repository(conn, backend, world.clock) == 1
        assert await relabel_by_repository(conn, backend, world.clock) == 0
    with world.db() as db:
        assert db.execute("SELECT project, worktree FROM sessions").fetchall() == [
            (str(repo), str(tree))]
    labels = {r["project"] async for r in backend.export()}
    assert labels == {str(repo)}


async def test_a_gemini_session_belongs_to_the_project_gemini_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        git_worktree: tuple[Path, Path]) -> None:
    """Issue 32.2: Gemini's records name no directory; `~/.gemini/tmp/<name>/.project_root`
    does. The session is that project's (its repository's), so its memories are never
    global."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    repo, tree = git_worktree
    sample = TRANSCRIPTS / "gemini" / (
        "jazzyalex+agent-sessions__Resources__Fixtures__stage0__agents__gemini__small.json")
    chats = tmp_path / "gemini" / "shop" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text(str(tree / "web"))
    (chats / "session-1.json").write_bytes(sample.read_bytes())
    settings = load_settings(None, state_dir=str(tmp_path / "state"),
                             sources=[{"kind": "gemini", "root": str(tmp_path / "gemini")}])
    clock = FakeClock()
    async with open_store(settings) as conn:
        ingester = Ingester(conn, settings, clock)
        await ingester.load()
        await ingester.run_once()
    with sqlite3.connect(settings.database_path) as db:
        assert db.execute("SELECT project FROM sessions").fetchall() == [(str(repo),)]


_PARALLEL = "5b0c1d2e-3f40-4152-8637-48596a7b8c9d"


def _use(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}


def _parallel_line(uuid: str, role: str, content: Any) -> str:
    return json.dumps({
        "parentUuid": None, "isSidechain": False, "userType": "external",
        "cwd": "/home/user/parallel", "sessionId": _PARALLEL, "version": "2.0.24",
        "gitBranch": "main", "type": role, "uuid": uuid,
        "timestamp": f"2025-10-01T10:00:0{len(uuid)}.000Z",
        "message": {"role": role, "content": content}}) + "\n"


class _DigestsFromTheStore(Recovery):
    """Recovery that never uses the digests it built while saving: each one is read
    back from the store and built again, as a later pass does."""

    async def _digest_of(self, due: Any) -> Any:
        self._built.clear()
        return await super()._digest_of(due)


@pytest.mark.parametrize("in_hand", [None, 3])
async def test_digests_built_while_saving_match_those_built_from_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_hand: int | None) -> None:
    """A pass that saves a session from its first message builds the digest from the
    messages it saved, without reading them again; on the real transcripts of the three
    agents, every digest is the one built afterwards from the store. A pass over many
    sessions reads them a page at a time and saves its digests every few sessions
    (`SESSIONS_PAGE`, `DIGESTS_IN_HAND`: here 2 and 3 as well) instead of holding them
    all to its end, and that changes none of them."""
    import shutil

    from memoryd.lifecycle import recovery as recovery_module
    from memoryd.store import sessions as store

    held: list[int] = []
    listed: list[int] = []
    if in_hand is not None:
        monkeypatch.setattr(recovery_module, "DIGESTS_IN_HAND", in_hand)
        # ...and reads the sessions to save a few at a time.
        monkeypatch.setattr(recovery_module, "SESSIONS_PAGE", 2)
        to_sync = store.sessions_to_sync

        async def listing(*args: Any, **kwargs: Any) -> Any:
            found = await to_sync(*args, **kwargs)
            listed.append(len(found))
            return found

        monkeypatch.setattr(store, "sessions_to_sync", listing)
        sync_session = Recovery._sync_session

        async def counting(self: Recovery, *args: Any, **kwargs: Any) -> None:
            await sync_session(self, *args, **kwargs)
            held.append(len(self._built))

        monkeypatch.setattr(Recovery, "_sync_session", counting)

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    roots = lay_out_fixtures(tmp_path / "agents")
    # Parallel calls whose results come in the calls' order: only the lines' call ids
    # tell which result is whose (the failure is the tests', not the linter's).
    parallel = roots["claude"] / "-home-user-parallel"
    parallel.mkdir()
    (parallel / f"{_PARALLEL}.jsonl").write_text("".join([
        _parallel_line("u1", "user", "run the tests and the linter"),
        _parallel_line("a1", "assistant", [_use("toolu_A", "pytest -q")]),
        _parallel_line("a2", "assistant", [_use("toolu_B", "ruff check .")]),
        _parallel_line("r1", "user", [{"type": "tool_result", "tool_use_id": "toolu_A",
                                       "is_error": True, "content":
                                       "FAILED tests/test_app.py::test_one - AssertionError"}]),
        _parallel_line("r2", "user", [{"type": "tool_result", "tool_use_id": "toolu_B",
                                       "content": "All checks passed!"}]),
        _parallel_line("a3", "assistant", [{"type": "text", "text": "One test fails."}]),
    ]))
    settings = load_settings(None, state_dir=str(tmp_path / "state"), sources=sources_for(roots))
    await ingest(World(settings, FakeClock(), roots["claude"]))
    other = settings.model_copy(update={"state_dir": tmp_path / "state-2"})
    shutil.copytree(tmp_path / "state", tmp_path / "state-2")

    reads: list[int] = []
    read = store.digest_messages

    async def counted(conn: Any, session_id: int, end: int, **kwargs: Any) -> Any:
        reads.append(session_id)
        return await read(conn, session_id, end, **kwargs)

    monkeypatch.setattr(store, "digest_messages", counted)
    found = []
    for state, recovery in ((settings, Recovery), (other, _DigestsFromTheStore)):
        policy = RecoveryPolicy(retry_attempts=2, sync_max_lag=NEVER)
        async with open_store(state) as conn, await SQLiteMemoryBackend.open(
                state.memory_path, clock=FakeClock()) as backend:
            report = await recovery(conn, backend, FakeClock(), policy).run(force=True)
            digests = await _digests(backend)
        assert report.digests_saved == len(digests) > 20
        found.append(sorted((d["provenance"]["session_external_id"], d["provenance"]["first_index"],
                             d["provenance"]["last_index"], d["content"]) for d in digests))
        if recovery is Recovery:
            # No session's messages were read twice, but a subagent's whose digest was
            # built in another batch than its parent's (its work is its parent's).
            async with open_store(state) as conn:
                subagents = {row[0] for row in await conn.execute_fetchall(
                    "SELECT id FROM sessions WHERE parent_session_id IS NOT NULL")}
            assert subagents and set(reads) <= subagents
    # Every digest was built from the store (some sessions' digests say nothing: unsaved).
    assert len(reads) >= len(found[1])
    assert found[0] == found[1]
    if in_hand is not None:
        assert max(held) == in_hand and len(held) > 4 * in_hand
        assert max(listed) == 2 and len(listed) > len(held) / 2
    texts = "\n".join(d[3] for d in found[0])
    # What the comparison covers: branches, commands with outcomes, files, each agent.
    assert all(f"{agent} session" in texts for agent in ("claude", "codex", "gemini"))
    assert "branch " in texts and "Ran: " in texts and "Changed: " in texts
    assert "Ran: pytest -q → failed: FAILED tests/test_app.py::test_one" in texts
    assert "ruff check . → passed" in texts


@pytest.mark.parametrize("page", [1, 4, 37])
async def test_the_pages_a_pass_reads_do_not_change_what_it_saves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: int) -> None:
    """A pass reads a session a page at a time (the next page while it saves this one)
    and cuts the open tail of a page again with the next: on the real transcripts, any
    page size saves the same segments, facts and digests as one read of everything."""
    import shutil

    from memoryd.lifecycle import recovery as recovery_module

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    roots = lay_out_fixtures(tmp_path / "agents")
    settings = load_settings(None, state_dir=str(tmp_path / "state"), sources=sources_for(roots))
    await ingest(World(settings, FakeClock(), roots["claude"]))
    paged = settings.model_copy(update={"state_dir": tmp_path / "state-2"})
    shutil.copytree(tmp_path / "state", tmp_path / "state-2")
    saved = []
    for state, size in ((settings, 100_000), (paged, page)):
        monkeypatch.setattr(recovery_module, "PAGE", size)
        policy = RecoveryPolicy(retry_attempts=2, sync_max_lag=NEVER)
        async with open_store(state) as conn, await SQLiteMemoryBackend.open(
                state.memory_path, clock=FakeClock()) as backend:
            batches: list[int] = []
            save = backend.save_conversation_segments

            async def counted(segments: Any, save: Any = save,
                              batches: list[int] = batches) -> Any:
                batches.append(len(segments))
                return await save(segments)

            monkeypatch.setattr(backend, "save_conversation_segments", counted)
            report = await Recovery(conn, backend, FakeClock(), policy).run(force=True)
            # A batch gathers a session's pages: one a session, and one more for each
            # BATCH_SEGMENTS of its segments, however small the pages.
            assert max(batches) <= recovery_module.BATCH_SEGMENTS
            assert len(batches) <= report.sessions + sum(batches) // \
                recovery_module.BATCH_SEGMENTS
            saved.append(sorted([(r["id"], r["type"], r["content"])
                                 async for r in backend.export()]))
        with sqlite3.connect(state.database_path) as db:
            assert db.execute("SELECT count(*) FROM sessions WHERE memory_sync_index"
                              " != message_count").fetchone()[0] == 0
    assert len(saved[0]) > 60
    assert saved[0] == saved[1]


async def test_a_segment_of_many_pages_is_cut_a_few_times_not_once_a_page(
        world: World, backend: SQLiteMemoryBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tool results that worked give memory no line, so a long run of them is one
    segment however many pages it spans: a pass cuts it again only once twice as much is
    in hand (all the cutting together reads each message a few times, not once a page)."""
    from memoryd.lifecycle import recovery as recovery_module

    results = 300
    lines = [_parallel_line("u0", "user", "read every file")]
    lines += [_parallel_line(f"r{n}", "user", [{"type": "tool_result", "tool_use_id": f"t{n}",
                                                "content": "ok"}]) for n in range(results)]
    lines.append(_parallel_line("a0", "assistant", [{"type": "text", "text": "All read."}]))
    (world.project / f"{_PARALLEL}.jsonl").write_text("".join(lines))
    await ingest(world)
    cut: list[int] = []
    plan = recovery_module.plan_segments

    def counted(messages: Any, **kwargs: Any) -> Any:
        cut.append(len(messages))
        return plan(messages, **kwargs)

    monkeypatch.setattr(recovery_module, "plan_segments", counted)
    monkeypatch.setattr(recovery_module, "PAGE", 4)
    report = await recover(world, backend, force=True)
    count = results + 2
    assert report.messages_synced == count
    assert_partitioned((await conversation_ranges(backend))[1], count)
    # Once a page, the cuts would read about count**2 / 8 (11,000) messages.
    assert sum(cut) <= 4 * count


@pytest.mark.parametrize("stop_after", [1, 3, 8])
async def test_a_pass_stopped_midway_leaves_no_read_behind_and_the_next_finishes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_after: int) -> None:
    """A pass reads the next session's first page while it saves the last of this one; a
    pass told to stop (the daemon shutting down) ends with no read left running, and
    the next pass saves exactly what one uninterrupted pass does."""
    import asyncio
    import shutil

    from memoryd.lifecycle import recovery as recovery_module

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(recovery_module, "PAGE", 5)
    roots = lay_out_fixtures(tmp_path / "agents")
    settings = load_settings(None, state_dir=str(tmp_path / "state"), sources=sources_for(roots))
    await ingest(World(settings, FakeClock(), roots["claude"]))
    stopped = settings.model_copy(update={"state_dir": tmp_path / "state-2"})
    shutil.copytree(tmp_path / "state", tmp_path / "state-2")
    policy = RecoveryPolicy(retry_attempts=2, sync_max_lag=NEVER)
    # Every pass's pages, to see that none is left holding a read it began.
    made: list[recovery_module.PageReader] = []

    class Pages(recovery_module.PageReader):
        def __init__(self, conn: Any, *args: Any) -> None:
            super().__init__(conn, *args)
            made.append(self)

    monkeypatch.setattr(recovery_module, "PageReader", Pages)
    saved = []
    for state, stop in ((settings, None), (stopped, stop_after)):
        asked = 0

        def stopping(stop: int | None = stop) -> bool:
            nonlocal asked
            asked += 1
            return stop is not None and asked > stop

        async with open_store(state) as conn, await SQLiteMemoryBackend.open(
                state.memory_path, clock=FakeClock()) as backend:
            first = await Recovery(conn, backend, FakeClock(), policy, stopping).run(force=True)
            assert asyncio.all_tasks() == {asyncio.current_task()}
            assert made and not any(pages._ahead for pages in made)
            if stop is not None:
                with sqlite3.connect(state.database_path) as db:
                    assert db.execute("SELECT count(*) FROM sessions WHERE memory_sync_index"
                                      " < message_count").fetchone()[0] > 0
                second = await Recovery(conn, backend, FakeClock(), policy).run(force=True)
                assert first.messages_synced + second.messages_synced > 0
            saved.append(sorted([(r["id"], r["type"], r["content"])
                                 async for r in backend.export()]))
        with sqlite3.connect(state.database_path) as db:
            assert db.execute("SELECT count(*) FROM sessions WHERE memory_sync_index"
                              " != message_count").fetchone()[0] == 0
    assert saved[0] == saved[1]


RESUMED = TRANSCRIPTS / "claude" / (
    "moredip+session-share__session-viewer__test__INTEGRATION__fixtures__general-tool-calls.jsonl")


def _replayed(lines: list[bytes]) -> tuple[int, set[str]]:
    """Where Claude Code began writing the conversation again (2.1.14 resuming a 2.1.11
    session), and the assistant texts of the records before it."""
    said: set[str] = set()
    for number, line in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("version") == "2.1.14":
            return number, said
        for block in (record.get("message") or {}).get("content") or []:
            if record.get("type") == "assistant" and block.get("type") == "text":
                said.add(block["text"].strip())
    raise AssertionError("the fixture holds no resumed conversation")


async def _session_memory(backend: SQLiteMemoryBackend) -> tuple[str, str]:
    """The live conversation text and digest of the one session saved."""
    records = [r async for r in backend.export() if r["superseded_by"] is None]
    text = "\n".join(r["content"] for r in sorted(
        (r for r in records if r["type"] == MemoryType.CONVERSATION.value),
        key=lambda r: r["provenance"]["first_index"]))
    [digest] = [r["content"] for r in records if r["type"] == MemoryType.SESSION_DIGEST.value]
    return text, digest


@pytest.mark.parametrize("page", [7, 500])
@pytest.mark.parametrize("later", [False, True])
async def test_a_resumed_conversation_written_again_reaches_memory_once(
        world: World, backend: SQLiteMemoryBackend, monkeypatch: pytest.MonkeyPatch,
        page: int, later: bool) -> None:
    """Claude Code writes a resumed session's conversation into its transcript again,
    under new uuids (a real session: its first 350 records again). Every record stays
    stored, but memory holds each message once: the copies give no line, no request to
    the digest and no time to its span, whether they are read in the pass that read their
    originals or in a later one (a daemon restarted in between: `later`), in pages of any
    size; what the person said after the resume is saved."""
    from memoryd.lifecycle import recovery as recovery_module

    monkeypatch.setattr(recovery_module, "PAGE", page)
    lines = RESUMED.read_bytes().splitlines(keepends=True)
    resumed_at, said = _replayed(lines)
    transcript = world.project / "resumed.jsonl"
    if later:
        transcript.write_bytes(b"".join(lines[:resumed_at]))
        await ingest(world)
        await recover(world, backend, force=True)
    transcript.write_bytes(b"".join(lines))
    await ingest(world)
    await recover(world, backend, force=True)

    with world.db() as db:
        stored = db.execute("SELECT count(*) FROM session_messages").fetchone()[0]
    assert sync_state(world)[0][1:3] == (stored, stored)
    text, digest = await _session_memory(backend)
    body = text.split("\n")
    # What the agent said before the resume, each once (after it, Claude Code's own
    # "No response requested." is said twice, at two times: kept twice).
    before = [line for line in body if line.startswith("assistant: ")
              and line.removeprefix("assistant: ") in said]
    assert len(before) == len(set(before)) > 10
    for words in ("The plan is ready.", "The plugin is complete.", "All validation passes"):
        assert sum(line.startswith("assistant: " + words) for line in body) == 1, words
    assert any(s.startswith("The plan is ready.") for s in said)
    # After the resume: the skill the person ran, and what it said.
    assert "publish_session.py" in text and "No response requested." not in digest
    assert "2026-01-21 15:30–21:56 UTC" in digest
    assert text.count("user: commit!") == 1 and digest.count('"commit!"') == 1


async def test_a_message_said_twice_is_kept_twice(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """Only a record that goes back in time and matches an earlier one to the millisecond
    is a copy: the same words said again later, or two records at one instant that say
    different things, are each kept."""
    transcript = world.project / "twice.jsonl"
    transcript.write_text(
        _user_line("u1", "run the tests", "2025-10-21T20:00:00.000Z")
        + _user_line("u2", "run the tests", "2025-10-21T20:01:00.000Z")
        + _user_line("u3", "and the linter", "2025-10-21T20:01:00.000Z")
        + _user_line("u4", "run the tests", "2025-10-21T20:00:30.000Z"))
    await ingest(world)
    await recover(world, backend, force=True)
    text, digest = await _session_memory(backend)
    assert text.count("user: run the tests") == 3 and "user: and the linter" in text
    assert "4 requests" in digest


async def test_a_digest_that_says_nothing_is_not_saved(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """A session of nothing but a subagent's prompt (its agent killed before it did
    anything) has no digest to give: where and when alone would be a line of a block."""
    line = json.loads(_user_line("p1", "Search the web for the cart bug",
                                 "2026-01-21T20:53:00.000Z"))
    (world.project / "agent-a1.jsonl").write_text(json.dumps({**line, "isSidechain": True}) + "\n")
    await ingest(world)
    report = await recover(world, backend, force=True)
    assert report.segments_saved == 1 and report.digests_saved == 0
    assert await _digests(backend) == []
    assert sync_state(world)[0][2] == 1
    with world.db() as db:  # not looked at again: the digest is up to date
        assert db.execute("SELECT digest_index FROM sessions").fetchone()[0] == 1


@pytest.mark.parametrize("page", [5, 500])
@pytest.mark.parametrize("together", [False, True])
async def test_a_forked_conversation_reaches_memory_once(
        world: World, backend: SQLiteMemoryBackend, monkeypatch: pytest.MonkeyPatch,
        page: int, together: bool) -> None:
    """`claude --fork-session` (the pinned 2.1.331 against a local model server) writes a
    new transcript that begins with the whole conversation it forks, each record with its
    own uuid and timestamp, under the new session's id. The fork's memory holds what was
    said after the fork, and its digest asks only that; the original keeps its own; read
    in the same pass or after the original was saved, in pages of any size."""
    from memoryd.lifecycle import recovery as recovery_module

    monkeypatch.setattr(recovery_module, "PAGE", page)
    original = POMODORO.read_bytes()
    forked = [json.loads(line) for line in original.splitlines()]
    sessions = {r["sessionId"] for r in forked if "sessionId" in r}
    assert len(sessions) == 1
    fork_id = "f0f0f0f0-1111-4222-8333-444444444444"
    lines = [json.dumps({**r, "sessionId": fork_id} if "sessionId" in r else r) + "\n"
             for r in forked]
    lines.append(_user_line("fork-prompt-1", "now add a dark theme to the timer",
                            "2025-10-22T09:00:00.000Z").replace(
        "36d9e1bc-63bf-4e97-8a3e-2b20ba8583f2", fork_id))
    (world.project / "36d9e1bc-63bf-4e97-8a3e-2b20ba8583f2.jsonl").write_bytes(original)
    if not together:
        await ingest(world)
        await recover(world, backend, force=True)
    (world.project / f"{fork_id}.jsonl").write_text("".join(lines))
    await ingest(world)
    await recover(world, backend, force=True)

    records = [r async for r in backend.export() if r["superseded_by"] is None]
    by_session: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_session.setdefault(r["provenance"]["session_external_id"], []).append(r)
    assert set(by_session) == {"36d9e1bc-63bf-4e97-8a3e-2b20ba8583f2", fork_id}

    def text(session: str, kind: MemoryType) -> str:
        return "\n".join(r["content"] for r in by_session[session] if r["type"] == kind.value)

    fork_text = text(fork_id, MemoryType.CONVERSATION)
    assert "now add a dark theme" in fork_text and "Pomodoro" not in fork_text
    fork_digest = text(fork_id, MemoryType.SESSION_DIGEST)
    assert 'Left unanswered: "now add a dark theme to the timer"' in fork_digest
    assert "1 request" in fork_digest and "index.html" not in fork_digest
    original_text = text("36d9e1bc-63bf-4e97-8a3e-2b20ba8583f2", MemoryType.CONVERSATION)
    assert "Build a simple Pomodoro timer" in original_text
    assert "3 requests" in text("36d9e1bc-63bf-4e97-8a3e-2b20ba8583f2",
                                MemoryType.SESSION_DIGEST)
    with world.db() as db:  # every line of both transcripts is stored all the same
        counts = dict(db.execute("SELECT external_id, message_count FROM sessions"))
    assert counts[fork_id] == counts["36d9e1bc-63bf-4e97-8a3e-2b20ba8583f2"] + 1
    # A daemon started again before each page: each finds the session the fork copies.
    from memoryd.lifecycle.segments import new_copies
    from memoryd.store import sessions as store

    async with open_store(world.settings) as conn:
        async with conn.execute("SELECT id FROM sessions WHERE external_id = ?",
                                (fork_id,)) as cursor:
            [(fork,)] = list(await cursor.fetchall())
        marks: list[bool] = []
        while len(marks) < counts[fork_id]:
            marks += [m.is_copy for m in await store.messages_from(
                conn, fork, len(marks), 7, copies=new_copies())]
    assert marks == [True] * (counts[fork_id] - 1) + [False]


CODEX_FORK = Path(__file__).parent / "data" / "codex-0.120-fork"


@pytest.mark.parametrize(("page", "chunk"), [(3, 1 << 20), (500, 1 << 20), (7, 4096)])
@pytest.mark.parametrize("together", [False, True])
async def test_a_codex_fork_written_with_its_original_reaches_memory_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: int, chunk: int,
        together: bool) -> None:
    """Codex 0.120 (the real CLI, `codex fork`) writes the forked session's whole rollout
    again at the head of the fork's, under the original's own header and stamped with the
    time of the fork (`data/codex-0.120-fork`). The fork's memory holds only its own turn,
    its digest asks only that; its own "OK, noted." (the words the original's turns ended
    with too) is kept; read in the same pass as the original or after it, in pages of any
    size, and with the fork's own header and the one it copies in two reads (`chunk`:
    each header is about 21 KB). Every line stays stored."""
    from memoryd.lifecycle import recovery as recovery_module

    monkeypatch.setattr(recovery_module, "PAGE", page)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    day = tmp_path / "codex" / "sessions" / "2026" / "11" / "28"
    day.mkdir(parents=True)
    settings = load_settings(None, state_dir=str(tmp_path / "state"), read_chunk_bytes=chunk,
                             sources=[{"kind": "codex", "root": str(tmp_path / "codex")}])
    world = World(settings, FakeClock(), day)
    original, fork = sorted(CODEX_FORK.glob("rollout-*.jsonl"))
    original_id, fork_id = (json.loads(f.read_text().splitlines()[0])["payload"]["id"]
                            for f in (original, fork))
    (day / original.name).write_bytes(original.read_bytes())
    async with await SQLiteMemoryBackend.open(settings.memory_path, clock=world.clock) as backend:
        if not together:
            await ingest(world)
            await recover(world, backend, force=True)
        (day / fork.name).write_bytes(fork.read_bytes())
        await ingest(world)
        await recover(world, backend, force=True)
        records = [r async for r in backend.export() if r["superseded_by"] is None]

    def text(session: str, kind: MemoryType) -> str:
        return "\n".join(r["content"] for r in records if r["type"] == kind.value
                         and r["provenance"]["session_external_id"] == session)

    fork_text = text(fork_id, MemoryType.CONVERSATION)
    assert "third prompt in the fork: gamma" in fork_text
    assert "alpha decision" not in fork_text and "second prompt" not in fork_text
    assert fork_text.count("OK, noted.") == 1
    fork_digest = text(fork_id, MemoryType.SESSION_DIGEST)
    assert "gamma" in fork_digest and "alpha" not in fork_digest and "beta" not in fork_digest
    original_text = text(original_id, MemoryType.CONVERSATION)
    assert "alpha decision" in original_text and "second prompt: beta" in original_text
    assert original_text.count("OK, noted.") == 2
    with world.db() as db:  # every line of both rollouts is stored all the same
        counts = dict(db.execute("SELECT external_id, message_count FROM sessions"))
    assert counts[fork_id] > counts[original_id]


BIGPLAN = (Path(__file__).parents[2] / "benchmarks" / "data" / "continuation"
           / "tensiondriven-athena-Users-j-Code-athena-bigplan"
           / "8a688e43-529e-461d-8fca-1bfa0d4757cf.jsonl.gz")


async def test_a_store_from_before_api_errors_were_told_gets_its_digests_again(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """A real session that ended on Claude Code's "API Error: 400 ..." was stored by an
    earlier version as the agent's words, and its digest concluded with the error. The
    store's migration tells those rows by their line and builds the digest again: the
    new version concludes with what the agent last said, and says how it ended."""
    (world.project / BIGPLAN.name.removesuffix(".gz")).write_bytes(
        gzip.decompress(BIGPLAN.read_bytes()))
    await ingest(world)
    with world.db() as db:  # as an earlier version stored them
        told = db.execute("UPDATE session_messages SET kind = 'message'"
                          " WHERE kind = 'api_error'").rowcount
    assert told == 4
    await recover(world, backend, force=True)
    [before] = await _digests(backend)
    assert "Concluded: API Error: 400" in before["content"]

    with world.db() as db:
        # As the store was before migration 13 (and those after it).
        db.execute("DELETE FROM schema_migrations WHERE version >= 13")
        db.execute("ALTER TABLE session_messages DROP COLUMN content_key")  # v14
        db.execute("DROP TABLE clock_marks")  # v15
        db.execute("DROP TABLE session_rewinds")  # v16
        # Most such records do not say "API Error" (a sample of public transcripts: 143 of
        # 177 said "You've hit your session limit ..."): the record's flag tells them.
        db.execute("UPDATE session_messages SET content = 'You''ve hit your session limit'"
                   " WHERE content LIKE 'API Error: Request was aborted%'")
    await recover(world, backend, force=True)  # the store migrated when it opened
    with world.db() as db:
        assert db.execute("SELECT count(*) FROM session_messages WHERE kind = 'api_error'"
                          ).fetchone()[0] == told
    [after] = [d for d in await _digests(backend) if d["superseded_by"] is None]
    assert after["id"] != before["id"]
    assert "Concluded: API Error" not in after["content"]
    assert "Ended on an error of the model's API: API Error: 400" in after["content"]


def _sub_line(session: str, uuid: str, role: str, content: Any, *, sidechain: bool,
              agent: str | None = None, second: int = 0) -> str:
    record: dict[str, Any] = {
        "parentUuid": None, "isSidechain": sidechain, "userType": "external",
        "cwd": "/home/user/shop", "sessionId": session, "version": "2.1.30", "type": role,
        "uuid": uuid, "timestamp": f"2026-10-01T10:00:{second:02d}.000Z",
        "message": {"role": role, "content": content}}
    if agent:
        record["agentId"] = agent
    return json.dumps(record) + "\n"


async def test_a_subagents_work_is_its_parents_and_has_no_digest_of_its_own(
        world: World, backend: SQLiteMemoryBackend) -> None:
    """Issue 62.2: Claude Code 2.1 writes a subagent's transcript beside its session's
    (`<session>/subagents/agent-<id>.jsonl`); the files it changed and the commands it ran
    are named in the parent's digest, which is built again when the subagent goes on
    after it; the subagent's prompt and report are not a session of their own."""
    parent = "5e55a0b1-0000-4000-8000-000000000001"
    (world.project / f"{parent}.jsonl").write_text(
        _sub_line(parent, "p1", "user", "split the cart module", sidechain=False)
        + _sub_line(parent, "p2", "assistant", [{"type": "text", "text": "Delegating."}],
                    sidechain=False, second=1))
    subagents = world.project / parent / "subagents"
    subagents.mkdir(parents=True)
    agent = subagents / "agent-a1b2c3d4.jsonl"
    edit = {"type": "tool_use", "id": "toolu_E", "name": "Edit",
            "input": {"file_path": "/home/user/shop/lib/cart/total.ex",
                      "old_string": "a", "new_string": "b"}}
    agent.write_text(
        _sub_line(parent, "s1", "user", "Move the total into lib/cart/total.ex",
                  sidechain=True, agent="a1b2c3d4", second=2)
        + _sub_line(parent, "s2", "assistant", [edit], sidechain=True, agent="a1b2c3d4",
                    second=3))
    await ingest(world)
    await recover(world, backend, force=True)
    live = [d for d in await _digests(backend) if d["superseded_by"] is None]
    assert [d["provenance"]["session_external_id"] for d in live] == [parent]
    assert "lib/cart/total.ex" in live[0]["content"]
    assert "Move the total" not in live[0]["content"]
    # The subagent goes on after its parent's digest: the parent's is built again.
    with agent.open("a") as out:
        out.write(_sub_line(parent, "s3", "assistant", [{**edit, "id": "toolu_F", "input": {
            "file_path": "/home/user/shop/lib/cart/tax.ex", "content": "x"}, "name": "Write"}],
            sidechain=True, agent="a1b2c3d4", second=4))
    await ingest(world)
    await recover(world, backend, force=True)
    live = [d for d in await _digests(backend) if d["superseded_by"] is None]
    assert len(live) == 1 and "lib/cart/tax.ex" in live[0]["content"], live


async def _subagent_links_and_digests(
        settings: Settings, world: World) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """After ingesting and saving everything: (subagent's id, parent's id) of each stored
    link, and the live digests."""
    await ingest(world)
    with world.db() as conn:
        linked = conn.execute(
            "SELECT c.external_id, p.external_id FROM sessions c JOIN sessions p"
            " ON c.parent_session_id = p.id").fetchall()
    async with await SQLiteMemoryBackend.open(settings.memory_path,
                                              clock=FakeClock()) as backend:
        await recover(world, backend, force=True)
        live = [d for d in await _digests(backend) if d["superseded_by"] is None]
    return [tuple(row) for row in linked], live


def _rollout_line(kind: str, payload: dict[str, Any], second: int) -> str:
    return json.dumps({"timestamp": f"2026-03-12T10:00:{second:02d}.000Z", "type": kind,
                       "payload": payload}) + "\n"


async def test_a_codex_subagents_rollout_is_its_parents_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 62.2: Codex (0.10x+) writes a spawned agent's thread as a rollout of its own
    whose `session_meta.source` names the parent thread; it is stored as the parent's
    subagent, its patch is named in the parent's digest, and it has no digest of its
    own (read from Codex's source: `SessionSource::SubAgent(ThreadSpawn{..})`)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    day = tmp_path / "codex" / "2026" / "03" / "12"
    day.mkdir(parents=True)
    parent, child = "019ce3fb-1087-7980-8f92-8d0171aaea6a", "019ce419-22a5-7321-baa1-5d0152ca561e"
    cwd = "/home/user/ship"
    (day / f"rollout-2026-03-12T10-00-00-{parent}.jsonl").write_text(
        _rollout_line("session_meta", {"id": parent, "cwd": cwd, "source": "cli",
                                       "cli_version": "0.114.0"}, 0)
        + _rollout_line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "fix the flaky e2e specs"}]}, 1)
        + _rollout_line("response_item", {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Spawned a worker for the specs."}]}, 2))
    patch = "*** Begin Patch\n*** Update File: e2e/docs.spec.ts\n@@\n-a\n+b\n*** End Patch"
    (day / f"rollout-2026-03-12T10-00-03-{child}.jsonl").write_text(
        _rollout_line("session_meta", {"id": child, "cwd": cwd, "cli_version": "0.114.0",
                                       "source": {"subagent": {"thread_spawn": {
                                           "parent_thread_id": parent, "depth": 1}}}}, 3)
        + _rollout_line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Make e2e/docs.spec.ts wait for the editor"}]}, 4)
        + _rollout_line("response_item", {"type": "custom_tool_call", "name": "apply_patch",
                                          "call_id": "c1", "input": patch}, 5))
    settings = load_settings(None, state_dir=str(tmp_path / "state"),
                             sources=[{"kind": "codex", "root": str(tmp_path / "codex")}])
    linked, live = await _subagent_links_and_digests(settings, World(settings, FakeClock(), day))
    assert linked == [(child, parent)]
    assert [d["provenance"]["session_external_id"] for d in live] == [parent]
    assert "e2e/docs.spec.ts" in live[0]["content"]


async def test_a_gemini_subagents_chat_is_its_parents_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 62.2: Gemini CLI writes a subagent's chat as `chats/<parent session id>/
    <agent id>.json` (`kind: "subagent"`, read from its chatRecordingService); it is
    stored as a subagent of that session, and its edit is named in that session's
    digest, which is the only one."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    project = tmp_path / "gemini" / "shop"
    chats = project / "chats"
    parent_id = "b1f31681-4b57-4337-8bc5-ac73580f752a"
    (chats / parent_id).mkdir(parents=True)
    (project / ".project_root").write_text("/home/user/shop")

    def chat(session: str, messages: list[dict[str, Any]], **extra: Any) -> str:
        return json.dumps({"sessionId": session, "projectHash": "f1", "startTime":
                           "2026-04-16T22:38:00.000Z", "lastUpdated": "2026-04-16T23:00:00Z",
                           "messages": messages, **extra})

    (chats / "session-2026-04-16T22-38-b1f31681.json").write_text(chat(parent_id, [
        {"id": "m1", "timestamp": "2026-04-16T22:38:00.000Z", "type": "user",
         "content": [{"text": "tidy the docket"}]},
        {"id": "m2", "timestamp": "2026-04-16T22:39:00.000Z", "type": "gemini",
         "content": "The investigator did it."}]))
    (chats / parent_id / "tl63m8.json").write_text(chat("tl63m8", [
        {"id": "s1", "timestamp": "2026-04-16T22:58:42.750Z", "type": "user",
         "content": [{"text": "Rewrite DOCKET.md as a task board"}]},
        {"id": "s2", "timestamp": "2026-04-16T22:59:00.000Z", "type": "gemini", "content": "",
         "toolCalls": [{"id": "w1", "name": "write_file", "status": "success",
                        "args": {"file_path": "/home/user/shop/DOCKET.md", "content": "x"},
                        "result": []}]}], kind="subagent"))
    settings = load_settings(None, state_dir=str(tmp_path / "state"),
                             sources=[{"kind": "gemini", "root": str(tmp_path / "gemini")}])
    linked, live = await _subagent_links_and_digests(settings,
                                                     World(settings, FakeClock(), chats))
    assert linked == [("tl63m8", parent_id)]
    assert [d["provenance"]["session_external_id"] for d in live] == [parent_id]
    assert "DOCKET.md" in live[0]["content"]


def _gemini_line(record: dict[str, Any]) -> str:
    return json.dumps(record) + "\n"


def _gemini_message(uid: str, kind: str, text: str, minute: int) -> str:
    content: object = [{"text": text}] if kind == "user" else text
    return _gemini_line({"id": uid, "timestamp": f"2026-11-20T10:{minute:02d}:00.000Z",
                         "type": kind, "content": content})


@pytest.mark.parametrize("late", [False, True])
async def test_what_a_gemini_rewind_discards_is_not_what_the_session_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, late: bool) -> None:
    """Gemini CLI's `/rewind` goes back to an earlier prompt, which the person edits and
    sends again: the file keeps every line and adds `{"$rewindTo": <that prompt's id>}`
    (chatRecordingService: the named message and every one after it are no longer the
    conversation). The archive keeps them all; the digest and what is saved to memory
    after the rewind leave them out; a message written again after the rewind lives
    again. Read in one pass, or (`late`) after the digest was built: it is built again."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    project = tmp_path / "gemini" / "shop"
    chats = project / "chats"
    chats.mkdir(parents=True)
    (project / ".project_root").write_text("/home/user/shop")
    chat = chats / "session-2026-11-20T10-00-7a1c.jsonl"
    before = (_gemini_line({"sessionId": "7a1c", "projectHash": "f1",
                            "startTime": "2026-11-20T10:00:00.000Z"})
              + _gemini_message("m1", "user", "set up the release checklist", 0)
              + _gemini_message("m2", "gemini", "Done: RELEASE.md lists the steps.", 1)
              + _gemini_message("m3", "user", "Decision: we ship on Fridays", 2)
              + _gemini_message("m4", "gemini", "Noted: releases go out on Fridays.", 3))
    after = (_gemini_line({"$rewindTo": "m3"})
             + _gemini_message("m5", "user", "Decision: we ship on Mondays", 4)
             + _gemini_message("m6", "gemini", "Noted: releases go out on Mondays.", 5)
             + _gemini_message("m2", "gemini", "Done: RELEASE.md lists the steps.", 6))
    settings = load_settings(None, state_dir=str(tmp_path / "state"),
                             sources=[{"kind": "gemini", "root": str(tmp_path / "gemini")}])
    world = World(settings, FakeClock(), chats)
    async with await SQLiteMemoryBackend.open(settings.memory_path,
                                              clock=FakeClock()) as backend:
        if late:
            chat.write_text(before)
            await ingest(world)
            await recover(world, backend, force=True)
            first = [d for d in await _digests(backend) if d["superseded_by"] is None]
            assert "Fridays" in first[0]["content"]
            chat.write_text(before + after)
        else:
            chat.write_text(before + after)
        await ingest(world)
        await recover(world, backend, force=True)
        live = [d for d in await _digests(backend) if d["superseded_by"] is None]
        saved = [r["content"] async for r in backend.export()
                 if r["type"] == MemoryType.CONVERSATION.value]
    with world.db() as conn:
        stored = [row[0] for row in conn.execute(
            "SELECT content FROM session_messages ORDER BY message_index")]
    assert len(stored) == 6 and any("Fridays" in text for text in stored)
    assert len(live) == 1
    assert "we ship on Mondays" in live[0]["content"]
    assert "Fridays" not in live[0]["content"]
    assert "set up the release checklist" in live[0]["content"]
    if not late:  # saved before the rewind was read, it stays saved (see docs/agents.md)
        assert not any("Fridays" in text for text in saved)
        assert any("Mondays" in text for text in saved)
