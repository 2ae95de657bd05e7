"""The embedded and the PostgreSQL backends rank one store alike: hybrid recall's ranking is
written once (`memoryd/memory/recall/hybrid.py`) and each backend supplies only its
channels. With the vector channel leading (the same embedder, the same cosines), every
step after the channels (fusion, weighing, one result a session with its best evidence,
near-duplicates out) must give the same results in the same order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from memoryd.clock import FakeClock
from memoryd.memory import MemoryBackend, MemoryType, SQLiteMemoryBackend
from tests.memory.hybrid_helpers import FakeEmbedder
from tests.memory.test_contract import segment

#: (session, text, hours ago): several segments of one session, a near-duplicate pair
#: in two sessions, other projects' talk.
TALK = [
    (1, "we deploy to staging before production because of the migration order", 30),
    (1, "the staging deploy waits for the database migration to finish first", 29),
    (1, "after the release the canary runs for an hour on preprod", 28),
    (2, "espresso machine in the kitchen needs descaling every month", 20),
    (3, "the cat sleeps on the painting canvas in the studio", 10),
    (4, "postgres holds the ledger and sqlite holds the local cache db", 5),
    (5, "we deploy to staging before production because of the migration order!", 2),
    (6, "a latte and an espresso before the release of the feline art show", 1),
    # One session, two segments that both answer: its result quotes the best of each.
    (7, "the coffee grinder for the espresso broke on monday", 40),
    (7, "a new espresso grinder and better coffee beans arrived on friday", 39),
]
FACTS = ["the production database is postgres 16 on the primary host",
         "rollouts go to canary first, then to live after an hour"]
QUERIES = ["deploy order staging production", "espresso coffee", "database postgres db",
           "cat canvas art", "release rollout first", "kitten painting"]


async def _filled(backend: MemoryBackend, clock: FakeClock) -> MemoryBackend:
    for session, text, hours in TALK:
        start = clock.now() - timedelta(hours=hours)
        project = "/work/app" if session != 6 else "/work/other"
        await backend.save_conversation_segment(
            segment(text, session_id=session, first=100 - hours, last=101 - hours,
                    project=project, start=start))
    for fact in FACTS:
        await backend.remember(fact, project="/work/app")
    while await backend.embed_pending():  # type: ignore[attr-defined]
        pass
    return backend


@pytest.fixture
async def backends(tmp_path: Path, clock: FakeClock
                   ) -> AsyncIterator[tuple[MemoryBackend, MemoryBackend]]:
    from memoryd.memory.backends.postgres import Owner, PostgresMemoryBackend
    from tests.pg import new_database

    embedded = await SQLiteMemoryBackend.open(tmp_path / "memory.db", clock=clock,
                                              embedder=FakeEmbedder(), fusion="vector")
    shared = await PostgresMemoryBackend.open(
        new_database(), owner=Owner(user="tester", origin="origin-a"), clock=clock,
        embedder=FakeEmbedder(), fusion="vector")
    try:
        yield await _filled(embedded, clock), await _filled(shared, clock)
    finally:
        await embedded.close()
        await shared.close()


@pytest.mark.parametrize("scope", ["project", "all_projects", "conversation"])
async def test_both_backends_rank_a_store_alike(
        backends: tuple[MemoryBackend, MemoryBackend], scope: str) -> None:
    embedded, shared = backends
    for query in QUERIES:
        asked = {"project": "/work/app", "limit": 5,
                 "all_projects": scope == "all_projects",
                 "types": [MemoryType.CONVERSATION] if scope == "conversation" else None}
        # Memories the query shares nothing with tie at relevance 0, ordered by their ids
        # (a fact's is random): only the ranked ones are compared.
        a = [r for r in await embedded.recall(query, **asked)  # type: ignore[arg-type]
             if r.relevance > 0]
        b = [r for r in await shared.recall(query, **asked)  # type: ignore[arg-type]
             if r.relevance > 0]
        assert a, query
        assert [(r.content, r.excerpt, r.session_matches, r.project) for r in a] == [
            (r.content, r.excerpt, r.session_matches, r.project) for r in b], query
        assert [r.score for r in a] == pytest.approx([r.score for r in b], rel=1e-4), query
        assert [r.similarity for r in a] == pytest.approx([r.similarity for r in b],
                                                          rel=1e-4), query


async def test_a_near_duplicate_is_dropped_by_both(
        backends: tuple[MemoryBackend, MemoryBackend]) -> None:
    """Sessions 1 and 5 said the same thing: each backend shows it once."""
    for backend in backends:
        found = await backend.recall("deploy staging before production migration order",
                                     project="/work/app", limit=10)
        said = [r for r in found if "because of the migration order" in r.content]
        assert len(said) == 1, [r.content for r in found]


@pytest.mark.parametrize("fusion", ["adaptive", "vector"])
async def test_keywords_alone_rank_alike_and_drop_the_same_repeats(
        tmp_path: Path, clock: FakeClock, fusion: str) -> None:
    """Without a model: a vector-led recall falls back to the keywords in both, a session
    is quoted from its best evidence in both, and the same words said in two sessions
    are shown once by both."""
    from memoryd.memory.backends.postgres import Owner, PostgresMemoryBackend
    from tests.pg import new_database

    embedded = await SQLiteMemoryBackend.open(tmp_path / "memory.db", clock=clock,
                                              fusion=fusion)  # type: ignore[arg-type]
    shared = await PostgresMemoryBackend.open(
        new_database(), owner=Owner(user="tester", origin="origin-a"), clock=clock,
        fusion=fusion)  # type: ignore[arg-type]
    try:
        for backend in (embedded, shared):
            for session, text, hours in [
                    (1, "the release checklist names the staging smoke tests", 9),
                    (2, "the release checklist names the staging smoke tests", 5),
                    (3, "espresso grinder broke and the espresso beans ran out", 3)]:
                await backend.save_conversation_segment(segment(
                    text, session_id=session, first=100 - hours, last=101 - hours,
                    start=clock.now() - timedelta(hours=hours)))
        for backend in (embedded, shared):
            found = await backend.recall("release checklist staging smoke tests",
                                         project="/work/app", limit=5)
            assert len([r for r in found if "release checklist" in r.content]) == 1, found
        a = await embedded.recall("espresso grinder", project="/work/app", limit=5)
        b = await shared.recall("espresso grinder", project="/work/app", limit=5)
        assert a and a[0].content.startswith("espresso grinder")
        assert [r.content for r in a][:1] == [r.content for r in b][:1]
    finally:
        await embedded.close()
        await shared.close()


async def test_a_session_is_quoted_from_its_best_evidence_by_both(
        backends: tuple[MemoryBackend, MemoryBackend]) -> None:
    """Session 7's two segments both answer: each backend gives one result for it whose
    excerpt quotes both, in the order they were said."""
    for backend in backends:
        found = await backend.recall("espresso grinder coffee", project="/work/app", limit=3)
        session = [r for r in found if "grinder" in r.content]
        assert len(session) == 1 and session[0].session_matches == 2, found
        assert session[0].excerpt is not None
        assert session[0].excerpt.index("broke on monday") < session[0].excerpt.index(
            "arrived on friday")
