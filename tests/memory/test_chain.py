"""The chain in-process, on a real PostgreSQL that is stopped and started, a SQLite fallback and
the SQLite outbox: nothing lost while the primary is down, nothing doubled when it returns."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.clock import FakeClock
from memoryd.errors import BackendUnavailable
from memoryd.memory import ConversationSegment, MemoryBackend, SQLiteMemoryBackend
from memoryd.memory.backends.jsonl import JsonlMemoryBackend
from memoryd.memory.backends.postgres import Owner, PostgresMemoryBackend
from memoryd.memory.chain import ChainBackend
from memoryd.memory.layers import OPEN_RETRY, Layer
from memoryd.memory.outbox import MAX_ATTEMPTS, Outbox
from memoryd.memory.protocol import Capability
from tests.pg import database_on, own_server, start, stop

ALL = frozenset(Capability) - {Capability.VECTORS}


def segment(last: int, *, first: int = 0, session: int = 1,
            text: str = "") -> ConversationSegment:
    return ConversationSegment(
        source="claude", session_id=session, session_external_id=f"s{session}",
        project="/work/app", first_index=first, last_index=last,
        text=text or " ".join(f"word{i} blue green rollout" for i in range(first, last + 1)))


@pytest.fixture(scope="module")
def pg() -> Any:
    return own_server()


@pytest.fixture
async def chain(pg: Any, tmp_path: Path) -> AsyncIterator[ChainBackend]:
    clock = FakeClock()
    dsn = database_on(pg)

    async def postgres() -> MemoryBackend:
        return await PostgresMemoryBackend.open(
            dsn, owner=Owner("alice", "laptop"), clock=clock, connect_timeout=1.0)

    async def sqlite() -> MemoryBackend:
        return await SQLiteMemoryBackend.open(tmp_path / "memory.db", clock=clock)

    async def jsonl() -> MemoryBackend:
        return await JsonlMemoryBackend.open(tmp_path / "jsonl", clock=clock)

    backend = ChainBackend(
        [Layer("postgres", postgres, clock), Layer("sqlite", sqlite, clock),
         Layer("jsonl", jsonl, clock)],
        await Outbox.open(tmp_path / "outbox.db", clock=clock), clock,
        {"postgres": ALL, "sqlite": ALL, "jsonl": ALL})
    backend.clock = clock  # type: ignore[attr-defined]  # for the tests below
    yield backend
    start(pg)
    await backend.close()


async def primary_rows(chain: ChainBackend) -> list[dict[str, Any]]:
    backend = await chain.primary.get()
    return [record async for record in backend.export()]


async def test_saves_fall_back_and_reach_the_primary_once_when_it_returns(
        chain: ChainBackend, pg: Any) -> None:
    first = segment(3)
    assert (await chain.save_conversation_segment(first)).created
    stop(pg)
    try:
        during = segment(6, first=4)
        assert (await chain.save_conversation_segment(during)).created
        fact = await chain.remember("the staging database is called pebble")
        (hit,) = await chain.recall("pebble")
        assert hit.memory_id == fact.id and hit.layer == "sqlite"
        (depth,) = await chain.depth()
        assert (depth.layer, depth.waiting, depth.parked) == ("postgres", 2, 0)
        assert await chain.drain() == 0  # still down: nothing lands, nothing lost
    finally:
        start(pg)
    assert await chain.drain() == 2
    assert await chain.depth() == []
    rows = await primary_rows(chain)
    assert sorted(r["id"] for r in rows) == sorted([first.id, during.id, fact.id])
    (hit,) = await chain.recall("pebble")
    assert hit.memory_id == fact.id and hit.layer == "postgres"
    # A crash between a replay and its deletion replays it again: the id is stored once.
    await chain.outbox.add("postgres", "segment", during.id,
                           json.loads(json.dumps(_encode(during))))
    assert await chain.drain() == 1
    assert len(await primary_rows(chain)) == 3


def _encode(value: ConversationSegment) -> dict[str, Any]:
    from memoryd.memory.outbox import encode

    return encode(value)


async def test_a_tail_saved_during_the_outage_is_superseded_in_order(
        chain: ChainBackend, pg: Any) -> None:
    """The shorter tail saved while the primary was down, then its longer save after it came
    back (queued behind the first): the primary ends with one live segment for those messages."""
    await chain.save_conversation_segment(segment(1))
    stop(pg)
    try:
        await chain.save_conversation_segment(segment(4, first=2))
    finally:
        start(pg)
    longer = segment(7, first=2)
    await chain.save_conversation_segment(longer)  # the outbox is not empty: queued behind
    assert (await chain.depth())[0].waiting == 2
    assert await chain.drain() == 2
    live = [r for r in await primary_rows(chain) if r["superseded_by"] is None]
    covered = sorted(i for r in live for i in range(r["provenance"]["first_index"],
                                                    r["provenance"]["last_index"] + 1))
    assert covered == list(range(8))


async def test_forgetting_while_the_primary_is_down_reaches_it_later(
        chain: ChainBackend, pg: Any) -> None:
    fact = await chain.remember("the vpn password rotates monthly")
    stop(pg)
    try:
        assert await chain.forget(fact.id, hard=True) is False  # no fallback held a copy
        (depth,) = await chain.depth()
        assert depth.waiting == 1
    finally:
        start(pg)
    assert await chain.drain() == 1
    assert await (await chain.primary.get()).get(fact.id) is None
    assert [d.memory_id for d in await chain.deletions()] == [fact.id]


async def test_a_primary_down_at_start_is_a_layer_to_fall_back_from(
        chain: ChainBackend, pg: Any) -> None:
    stop(pg)
    try:
        saved = await chain.save_conversation_segment(segment(2))
        assert saved.created
        assert not await chain.primary.available()
        clock: FakeClock = chain.clock  # type: ignore[attr-defined]
        clock.advance(OPEN_RETRY + 1)
    finally:
        start(pg)
    assert await chain.drain() == 1
    assert [r["id"] for r in await primary_rows(chain)] == [saved.id]


async def test_with_no_layer_left_the_save_fails_but_stays_in_the_outbox(
        pg: Any, tmp_path: Path) -> None:
    """[postgres] alone and down: the save raises (the sync index does not move), the outbox
    keeps it once however often recovery retries, and it lands when the server is back."""
    clock = FakeClock()
    dsn = database_on(pg)

    async def postgres() -> MemoryBackend:
        return await PostgresMemoryBackend.open(dsn, owner=Owner("alice", "x"), clock=clock,
                                                connect_timeout=1.0)

    chain = ChainBackend([Layer("postgres", postgres, clock)],
                         await Outbox.open(tmp_path / "outbox.db", clock=clock), clock,
                         {"postgres": ALL})
    stop(pg)
    try:
        for _ in range(3):
            with pytest.raises(BackendUnavailable, match="outbox"):
                await chain.save_conversation_segment(segment(3))
        assert (await chain.depth())[0].waiting == 1
    finally:
        start(pg)
    clock.advance(OPEN_RETRY + 1)
    assert await chain.drain() == 1
    assert not (await chain.save_conversation_segment(segment(3))).created
    await chain.close()


async def test_an_entry_that_keeps_failing_is_parked_not_retried_forever(
        chain: ChainBackend) -> None:
    await chain.outbox.add("postgres", "record", "broken", {"schema_version": 99})
    ok = await chain.remember("kept after the broken entry")
    for _ in range(MAX_ATTEMPTS):
        await chain.drain()
    (depth,) = await chain.depth()
    assert (depth.waiting, depth.parked) == (0, 1)
    assert (await chain.outbox.parked())[0].key == "broken"
    assert await (await chain.primary.get()).get(ok.id) is not None


async def test_extra_patterns_are_masked_before_the_outbox_and_every_layer(
        tmp_path: Path) -> None:
    """With the primary away, a save waits in the outbox: the configured patterns are masked
    in what it keeps, as in what the fallback stores."""
    from memoryd.memory.privacy.redaction import compile_extra

    clock = FakeClock()

    async def away() -> MemoryBackend:
        raise BackendUnavailable("not reachable", backend="postgres")

    async def jsonl() -> MemoryBackend:
        return await JsonlMemoryBackend.open(tmp_path / "jsonl", clock=clock)

    chain = ChainBackend([Layer("postgres", away, clock), Layer("jsonl", jsonl, clock)],
                         await Outbox.open(tmp_path / "outbox.db", clock=clock), clock,
                         {"postgres": ALL, "jsonl": ALL},
                         masks=compile_extra([("ticket", r"ACME-\d{6}")]))
    try:
        await chain.save_conversation_segment(segment(2, text="user: ACME-123456 is broken"))
        await chain.remember("ACME-654321 waits for review")
        stored = [r["content"] async for r in chain.export()]
        assert all("ACME-" not in text and "[REDACTED:ticket]" in text for text in stored)
    finally:
        await chain.close()
    assert b"ACME-" not in every_byte_under(tmp_path)


def every_byte_under(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in directory.rglob("*") if p.is_file())


async def test_a_replayed_forget_spares_what_others_saved_after_it_was_asked(
        chain: ChainBackend, pg: Any) -> None:
    clock: FakeClock = chain.clock  # type: ignore[attr-defined]
    old = await chain.remember("the old deploy script", project="/work/app")
    stop(pg)
    try:
        await chain.forget_where(project="/work/app")  # queued for the primary
    finally:
        start(pg)
    clock.advance(120)
    # Another machine saves into the project meanwhile, straight into the primary.
    newer = await (await chain.primary.get()).remember("the new deploy script",
                                                       project="/work/app")
    assert await chain.drain() == 1
    primary = await chain.primary.get()
    assert (await primary.get(old.id)).deleted_at is not None  # type: ignore[union-attr]
    assert (await primary.get(newer.id)).deleted_at is None  # type: ignore[union-attr]


async def test_imports_and_corrections_while_the_primary_is_down_are_never_lost(
        chain: ChainBackend, pg: Any) -> None:
    """An import lands in the fallback and is queued for the primary; a correction of a
    memory that has not reached the primary yet is refused (corrected in the fallback, it
    would reach the primary uncorrected), and goes through once the outbox has drained."""
    from memoryd.memory import Memory, MemoryType, Provenance, memory_to_record, new_memory_id

    now = chain.clock.now()  # type: ignore[attr-defined]
    record = memory_to_record(Memory(
        id=new_memory_id(), content="the release train leaves on thursdays",
        type=MemoryType.FACT, importance=0.9, project=None, tags=(),
        provenance=Provenance(), created_at=now, updated_at=now))
    stop(pg)
    try:
        assert await chain.import_records([record]) == 1
        (depth,) = await chain.depth()
        assert (depth.layer, depth.waiting) == ("postgres", 1)
        fact = await chain.remember("the release branch is cut on mondays")
        with pytest.raises(BackendUnavailable, match="waits in the outbox"):
            await chain.correct(fact.id, "the release branch is cut on tuesdays")
    finally:
        start(pg)
    chain.clock.advance(OPEN_RETRY + 1)  # type: ignore[attr-defined]  # opened first while down
    assert await chain.drain() == 2
    ids = {r["id"] for r in await primary_rows(chain)}
    assert {record["id"], fact.id} <= ids
    fixed = await chain.correct(fact.id, "the release branch is cut on tuesdays")
    hit, *_ = await chain.recall("release branch cut tuesdays")
    assert hit.memory_id == fixed.id and hit.layer == "postgres"
