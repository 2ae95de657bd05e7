"""The memory backend contract: every backend in conftest.BACKENDS must pass all of these."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from memoryd.clock import FakeClock
from memoryd.errors import BackendError
from memoryd.memory import (
    SCHEMA_VERSION,
    ConversationSegment,
    DeletionMode,
    MemoryBackend,
    MemoryType,
    Provenance,
    SessionSummary,
)
from memoryd.memory.protocol import ProjectRelabel

BackendFactory = Callable[[str], Awaitable[MemoryBackend]]

DAY = 86400.0


def segment(
    text: str,
    *,
    session_id: int = 1,
    first: int = 0,
    last: int = 3,
    project: str | None = "/work/app",
    start: datetime | None = None,
    minutes: int = 10,
) -> ConversationSegment:
    start = start or datetime(2025, 12, 31, 12, 0, tzinfo=UTC)
    return ConversationSegment(
        source="claude",
        session_id=session_id,
        session_external_id=f"sess-{session_id}",
        project=project,
        first_index=first,
        last_index=last,
        text=text,
        message_uuids=tuple(f"uuid-{session_id}-{i}" for i in range(first, last + 1)),
        started_at=start,
        ended_at=start + timedelta(minutes=minutes),
    )


async def export_all(backend: MemoryBackend, project: str | None = None) -> list[dict[str, Any]]:
    return [record async for record in backend.export(project)]


async def test_backend_satisfies_protocol(backend: MemoryBackend) -> None:
    """The backend is a runtime MemoryBackend, has a name and reports itself available."""
    assert isinstance(backend, MemoryBackend)
    assert backend.name
    assert await backend.is_available()


async def test_remember_then_recall_by_keyword(backend: MemoryBackend, clock: FakeClock) -> None:
    """A remembered fact is found by one of its words, with its fields and default importance."""
    prov = Provenance(session_id=7, session_external_id="abc", source="codex", project="/p",
                      first_index=2, last_index=4, message_uuids=("u2", "u3", "u4"))
    memory = await backend.remember("We deploy to staging before production", tags=("ops",),
                                    provenance=prov)
    assert memory.type is MemoryType.FACT and memory.importance == pytest.approx(0.9)
    assert memory.project == "/p" and memory.created_at == clock.now()
    assert len(memory.id) == 32
    results = await backend.recall("staging")
    assert [r.memory_id for r in results] == [memory.id]
    hit = results[0]
    assert hit.content == memory.content and hit.type is MemoryType.FACT
    assert hit.provenance == prov and hit.project == "/p" and hit.tags == ("ops",)
    assert hit.created_at == clock.now() and hit.score > 0


async def test_recall_returns_segment_provenance(backend: MemoryBackend) -> None:
    """A recalled conversation segment carries its session, index range, message uuids and span."""
    seg = segment("the flaky test was caused by a race in the websocket reconnect", first=5,
                  last=8)
    assert (await backend.save_conversation_segment(seg)).created
    (hit,) = await backend.recall("websocket race")
    assert hit.memory_id == seg.id and hit.type is MemoryType.CONVERSATION
    assert hit.provenance == seg.provenance
    assert hit.provenance.message_uuids == ("uuid-1-5", "uuid-1-6", "uuid-1-7", "uuid-1-8")
    assert (hit.provenance.first_index, hit.provenance.last_index) == (5, 8)
    assert hit.importance == pytest.approx(0.5)


async def test_more_relevant_ranks_first(backend: MemoryBackend) -> None:
    """A memory matching more of the query's words ranks above one matching fewer."""
    partial = await backend.remember("the rate limit of the billing service is documented")
    full = await backend.remember("the billing service rate limit is 500 requests per minute")
    await backend.remember("unrelated note about lunch")
    results = await backend.recall("billing rate limit per minute")
    assert [r.memory_id for r in results] == [full.id, partial.id]
    assert results[0].score > results[1].score


async def test_higher_importance_wins_ties(backend: MemoryBackend) -> None:
    """Of two equally relevant memories, the more important one ranks first."""
    low = await backend.remember("alpha beta gamma", importance=0.6)
    high = await backend.remember("alpha beta delta", importance=0.95)
    results = await backend.recall("alpha")
    assert [r.memory_id for r in results] == [high.id, low.id]


async def test_recent_beats_old_for_decaying_types(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """Auto-saved conversation fades with age; facts of any age score the same."""
    old_start = clock.now() - timedelta(days=1)
    # Texts that match alike but are not near-duplicates (which recall shows once).
    old = segment("we discussed the cache eviction policy for the web tier", session_id=1,
                  start=old_start)
    await backend.save_conversation_segment(old)
    old_fact = await backend.remember("cache eviction uses LRU order in the web tier")
    clock.advance(90 * DAY)
    new = segment("we discussed the cache eviction policy for the api tier", session_id=2,
                  start=clock.now() - timedelta(hours=1))
    await backend.save_conversation_segment(new)
    new_fact = await backend.remember("cache eviction uses LRU order in the api tier")
    conv = await backend.recall("cache eviction", types=[MemoryType.CONVERSATION])
    assert [r.memory_id for r in conv] == [new.id, old.id]
    assert conv[0].score > conv[1].score
    facts = await backend.recall("cache eviction", types=[MemoryType.FACT])
    assert {r.memory_id for r in facts} == {old_fact.id, new_fact.id}
    assert facts[0].score == pytest.approx(facts[1].score)


async def test_recall_does_not_feed_its_own_ranking(backend: MemoryBackend,
                                                     clock: FakeClock) -> None:
    """Being returned by recall leaves a memory's use count and later rank unchanged."""
    old = segment("we chose postgres for the billing service", session_id=1,
                  start=clock.now() - timedelta(hours=2))
    await backend.save_conversation_segment(old)
    clock.advance(120 * DAY)
    new = segment("we chose postgres for the billing service database",
                  session_id=2, start=clock.now() - timedelta(hours=2))
    await backend.save_conversation_segment(new)
    first = await backend.recall("postgres billing", types=[MemoryType.CONVERSATION])
    for _ in range(5):
        again = await backend.recall("postgres billing", types=[MemoryType.CONVERSATION])
        assert [(r.memory_id, r.score) for r in again] == [
            (r.memory_id, r.score) for r in first]
    got = await backend.get(old.id)
    assert got is not None and got.access_count == 0 and got.last_accessed_at is None


async def test_record_use_is_counted_and_bounded(backend: MemoryBackend,
                                                 clock: FakeClock) -> None:
    """Opening a memory by id counts a use; it lifts an old memory's weight, boundedly."""
    old = segment("the release checklist lives in docs/release.md", session_id=1,
                  start=clock.now() - timedelta(hours=1))
    await backend.save_conversation_segment(old)
    clock.advance(365 * DAY)
    before = (await backend.recall("release checklist"))[0].score
    await backend.record_use([old.id, old.id])
    got = await backend.get(old.id)
    assert got is not None and got.access_count == 1 and got.last_accessed_at == clock.now()
    after = (await backend.recall("release checklist"))[0].score
    assert before < after <= before * 1.125 + 1e-9
    await backend.record_use([])


async def test_project_scope_and_all_projects(backend: MemoryBackend) -> None:
    """A project sees its own and project-less memories; all_projects adds others, ranked after."""
    here = await backend.remember("deploy with make release", project="/a", importance=0.8)
    everywhere = await backend.remember("deploy never on fridays", importance=0.8)
    elsewhere = await backend.remember("deploy with make release please", project="/b",
                                       importance=1.0)
    scoped = await backend.recall("deploy release", project="/a")
    assert {r.memory_id for r in scoped} == {here.id, everywhere.id}
    wide = await backend.recall("deploy release", project="/a", all_projects=True)
    assert [r.memory_id for r in wide][-1] == elsewhere.id and len(wide) == 3
    unscoped = await backend.recall("deploy release")
    assert {r.memory_id for r in unscoped} == {here.id, everywhere.id, elsewhere.id}


async def test_since_until_on_conversation_span(backend: MemoryBackend, clock: FakeClock) -> None:
    """since/until select by the conversation's span, or by created_at when there is none."""
    jan = datetime(2025, 1, 10, tzinfo=UTC)
    mar = datetime(2025, 3, 10, tzinfo=UTC)
    s_jan = segment("talked about the parser rewrite", session_id=1, start=jan)
    s_mar = segment("talked about the parser rewrite again", session_id=2, start=mar)
    await backend.save_conversation_segment(s_jan)
    await backend.save_conversation_segment(s_mar)
    fact = await backend.remember("the parser rewrite shipped")  # created 2026-01-01
    feb = datetime(2025, 2, 1, tzinfo=UTC)
    assert {r.memory_id for r in await backend.recall("parser", until=feb)} == {s_jan.id}
    since_feb = await backend.recall("parser", since=feb)
    assert {r.memory_id for r in since_feb} == {s_mar.id, fact.id}
    window = await backend.recall("parser", since=feb, until=datetime(2025, 12, 1, tzinfo=UTC))
    assert [r.memory_id for r in window] == [s_mar.id]
    # A span that overlaps the window's start is included.
    edge = await backend.recall("parser", since=jan + timedelta(minutes=5), until=feb)
    assert [r.memory_id for r in edge] == [s_jan.id]


async def test_time_order_and_empty_query(backend: MemoryBackend, clock: FakeClock) -> None:
    """order='time' lists oldest first; a query without words lists memories by weight."""
    first = await backend.remember("one thing")
    clock.advance(DAY)
    second = await backend.remember("another thing", importance=1.0)
    clock.advance(DAY)
    third = await backend.remember("a third thing", importance=0.8)
    timeline = await backend.recall("thing", order="time")
    assert [r.memory_id for r in timeline] == [first.id, second.id, third.id]
    listing = await backend.recall("", order="score")
    assert [r.memory_id for r in listing] == [second.id, first.id, third.id]
    assert len(await backend.recall("?!", limit=2)) == 2


async def test_types_filter(backend: MemoryBackend) -> None:
    """types keeps only the asked-for memory types."""
    fact = await backend.remember("graphql schema lives in api/schema.graphql")
    ctx = await backend.remember("graphql gateway project", type=MemoryType.PROJECT_CONTEXT)
    assert ctx.importance == pytest.approx(0.8)
    got = await backend.recall("graphql", types=[MemoryType.PROJECT_CONTEXT])
    assert [r.memory_id for r in got] == [ctx.id]
    assert await backend.recall("graphql", types=[]) == []
    assert {r.memory_id for r in await backend.recall("graphql")} == {fact.id, ctx.id}


async def test_correct_supersedes_and_keeps_history(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """A correction supersedes the old memory: recall shows only the latest, history the chain."""
    v1 = await backend.remember("the rate limit is 100 per minute", project="/api", tags=("api",))
    clock.advance(60)
    v2 = await backend.correct(v1.id, "the rate limit is 500 per minute", reason="raised in May")
    clock.advance(60)
    v3 = await backend.correct(v2.id, "the rate limit is 600 per minute")
    assert v2.type is MemoryType.CORRECTION and v2.supersedes == v1.id
    assert v2.project == "/api" and v2.tags == ("api",) and v2.reason == "raised in May"
    assert v2.importance >= 0.9
    results = await backend.recall("rate limit", project="/api")
    assert [r.memory_id for r in results] == [v3.id]
    old = await backend.get(v1.id)
    assert old is not None and old.superseded_by == v2.id and not old.is_live
    for member in (v1.id, v2.id, v3.id):
        assert [m.id for m in await backend.history(member)] == [v1.id, v2.id, v3.id]
    assert await backend.history("0" * 32) == []
    with pytest.raises(BackendError, match="latest version"):
        await backend.correct(v1.id, "the rate limit is 42")
    with pytest.raises(BackendError, match="no memory"):
        await backend.correct("f" * 32, "nothing to correct")


async def test_a_sessions_digest_has_one_live_version(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """Every backend that stores summaries keeps one live digest a session (31.1): a
    newer version supersedes the older (history kept), an older one saved late stays
    superseded, another session's digest is untouched, and `types` finds them."""
    from memoryd.memory import DIGEST_KIND, SessionSummary

    def digest(session: int, last: int, text: str) -> SessionSummary:
        return SessionSummary(source="claude", session_id=session,
                              session_external_id=f"s{session}", project="/shop",
                              kind=DIGEST_KIND, content=text, first_index=0, last_index=last)

    try:
        first = await backend.save_session_summary(digest(1, 10, "asked to add a discount"))
    except BackendError:
        pytest.skip(f"{backend.name} stores no summaries")
    other = await backend.save_session_summary(digest(2, 5, "asked to fix the login page"))
    clock.advance(60)
    second = await backend.save_session_summary(digest(1, 20, "added a discount, tests pass"))
    late = await backend.save_session_summary(digest(1, 15, "added a discount, tests fail"))
    assert second.created and late.created
    found = await backend.recall("", project="/shop", types=[MemoryType.SESSION_DIGEST])
    assert sorted(r.memory_id for r in found) == sorted([second.id, other.id])
    old = await backend.get(first.id)
    assert old is not None and old.superseded_by == second.id
    assert [m.id for m in await backend.history(second.id)][:2] == [first.id, second.id]
    assert (await backend.get(late.id)).superseded_by == second.id  # type: ignore[union-attr]
    assert found[0].type is MemoryType.SESSION_DIGEST


async def test_an_observation_is_stored_once_and_replaces_only_an_observation(
    backend: MemoryBackend, clock: FakeClock
) -> None:
    """Distillation's items (issue 33): stored once by id, tagged with their kind, and
    superseding (history kept) the observation they name, never a stated fact."""
    from memoryd.memory import DistilledMemory

    def item(content: str, replaces: str | None = None) -> DistilledMemory:
        return DistilledMemory(source="claude", session_id=1, session_external_id="s1",
                               project="/shop", segment="seg1", kind="decision",
                               content=content, first_index=2, last_index=3,
                               message_uuids=("u2", "u3"), replaces=replaces)

    first = await backend.save_distilled_memory(item("Prices are stored in cents."))
    assert first.created
    assert not (await backend.save_distilled_memory(item("Prices are stored in cents."))).created
    stated = await backend.remember("The shop sells in euros.", project="/shop")
    clock.advance(60)
    second = await backend.save_distilled_memory(
        item("Prices are stored in integer cents, never floats.", replaces=first.id))
    third = await backend.save_distilled_memory(item("The shop sells in dollars.",
                                                     replaces=stated.id))
    live = await backend.recall("", project="/shop", types=[MemoryType.OBSERVATION])
    assert sorted(r.memory_id for r in live) == sorted([second.id, third.id])
    assert set(live[0].tags) == {"distilled", "decision"}
    assert [m.id for m in await backend.history(second.id)] == [first.id, second.id]
    kept = await backend.get(stated.id)
    assert kept is not None and kept.is_live
    assert (await backend.get(third.id)).supersedes is None  # type: ignore[union-attr]


async def test_an_observations_evidence_grows(backend: MemoryBackend) -> None:
    """A duplicate the model read again elsewhere adds to what the memory rests on."""
    from memoryd.memory import DistilledMemory
    from memoryd.memory.protocol import EvidenceGrowth

    if not isinstance(backend, EvidenceGrowth):
        pytest.skip(f"{backend.name} keeps the evidence it was saved with")
    saved = await backend.save_distilled_memory(DistilledMemory(
        source="claude", session_id=1, session_external_id="s1", project="/shop",
        segment="seg1", kind="fact", content="Prices are in cents.", first_index=0,
        last_index=1, message_uuids=("u0", "u1")))
    assert await backend.add_evidence(saved.id, ["u1", "v7", "v8"])
    assert not await backend.add_evidence(saved.id, ["v7"])
    assert not await backend.add_evidence("0" * 32, ["v9"])
    grown = await backend.get(saved.id)
    assert grown is not None and grown.provenance.message_uuids == ("u0", "u1", "v7", "v8")


async def test_forget_soft(backend: MemoryBackend, clock: FakeClock) -> None:
    """A soft forget tombstones: never recalled, still shown by get, audited as soft."""
    memory = await backend.remember("my old ssh key passphrase hint is octopus")
    clock.advance(5)
    assert await backend.forget(memory.id)
    assert await backend.recall("octopus") == []
    got = await backend.get(memory.id)
    assert got is not None and got.deleted_at == clock.now() and got.content == memory.content
    (audit,) = await backend.deletions(memory_id=memory.id)
    assert audit.mode is DeletionMode.SOFT and audit.deleted_at == clock.now()
    assert not await backend.forget(memory.id)
    assert not await backend.forget("0" * 32)
    with pytest.raises(BackendError, match="forgotten"):
        await backend.correct(memory.id, "new hint")


async def test_forget_hard(backend: MemoryBackend) -> None:
    """A hard forget deletes the content; an audit record without content remains."""
    memory = await backend.remember("customer card number 4111 1111", project="/shop")
    assert await backend.forget(memory.id, hard=True)
    assert await backend.get(memory.id) is None
    assert await backend.recall("4111") == []
    (audit,) = await backend.deletions(memory_id=memory.id)
    assert audit.mode is DeletionMode.HARD and audit.project == "/shop"
    assert audit.type is MemoryType.FACT
    assert not hasattr(audit, "content")
    assert await export_all(backend) == []
    assert not await backend.forget(memory.id, hard=True)


async def test_hard_forgotten_segment_is_not_saved_again(backend: MemoryBackend) -> None:
    """Re-saving a hard-forgotten segment (e.g. a resync from index 0) does not bring it back."""
    seg = segment("a secret conversation about the merger")
    await backend.save_conversation_segment(seg)
    await backend.forget(seg.id, hard=True)
    again = await backend.save_conversation_segment(seg)
    assert not again.created and again.id == seg.id
    assert await backend.get(seg.id) is None


async def test_forget_covers_the_correction_chain(backend: MemoryBackend) -> None:
    """Forgetting any version forgets every version of the chain."""
    v1 = await backend.remember("the office wifi password is tulip")
    v2 = await backend.correct(v1.id, "the office wifi password is daffodil")
    assert await backend.forget(v2.id)
    assert all(m.deleted_at is not None for m in await backend.history(v1.id))
    assert await backend.forget(v1.id, hard=True)
    assert await backend.get(v1.id) is None and await backend.get(v2.id) is None
    assert {d.memory_id for d in await backend.deletions()} == {v1.id, v2.id}


async def test_forget_where_session_project_all(backend: MemoryBackend) -> None:
    """Bulk forgets by session, by project and of everything report how many they removed."""
    await backend.save_conversation_segment(segment("s1 first part", session_id=1, first=0))
    await backend.save_conversation_segment(segment("s1 second part", session_id=1, first=4,
                                                    last=6))
    await backend.save_conversation_segment(segment("s2 part", session_id=2, project="/other"))
    await backend.remember("fact in app", project="/work/app")
    await backend.remember("global fact")
    assert await backend.forget_where(session_id=1) == 2
    assert await backend.forget_where(session_id=1) == 0
    assert await backend.forget_where(session_external_id="sess-2", hard=True) == 1
    assert await backend.forget_where(project="/work/app") == 1
    assert await backend.forget_where(all=True) == 1
    assert await backend.recall("") == []
    # A hard forget of everything also purges what was only tombstoned.
    assert await backend.forget_where(all=True, hard=True) == 4
    assert await export_all(backend) == []
    with pytest.raises(ValueError):
        await backend.forget_where()
    with pytest.raises(ValueError):
        await backend.forget_where(all=True, project="/x")


async def test_forget_where_memory_ids_takes_exactly_those_versions(
        backend: MemoryBackend) -> None:
    """Retention forgets named versions: only those, not their chains, and records no scope
    (the session's later memories are still saved)."""
    old = await backend.save_conversation_segment(segment("an old talk", session_id=7, first=0))
    new = await backend.save_conversation_segment(segment("a new talk", session_id=7, first=4,
                                                          last=6))
    fact = await backend.remember("kept fact")
    corrected = await backend.correct(fact.id, "kept fact, corrected")
    assert await backend.forget_where(memory_ids=[old.id, fact.id], hard=True) == 2
    assert await backend.get(old.id) is None and await backend.get(fact.id) is None
    assert await backend.get(new.id) is not None and await backend.get(corrected.id) is not None
    later = await backend.save_conversation_segment(segment("later talk", session_id=7,
                                                            first=7, last=9))
    assert later.created
    assert await backend.forget_where(memory_ids=[]) == 0


async def test_segment_save_is_idempotent(backend: MemoryBackend) -> None:
    """Saving the same segment id twice stores it once and reports created=False."""
    seg = segment("we agreed to use uv for packaging")
    first = await backend.save_conversation_segment(seg)
    again = await backend.save_conversation_segment(
        segment("we agreed to use uv for packaging (re-rendered)")
    )
    assert first.created and not again.created and first.id == again.id == seg.id
    assert len(await backend.recall("packaging")) == 1
    assert len(await export_all(backend)) == 1
    stored = await backend.get(seg.id)
    assert stored is not None and stored.content == seg.text


async def test_session_summary_save_is_idempotent(backend: MemoryBackend) -> None:
    """A session summary is stored once by its deterministic id, typed session_summary."""
    summary = SessionSummary(source="claude", session_id=3, session_external_id="s3",
                             project="/work/app", kind="compaction",
                             content="Refactored the tailer into five modules.")
    assert (await backend.save_session_summary(summary)).created
    assert not (await backend.save_session_summary(summary)).created
    (hit,) = await backend.recall("tailer refactored")
    assert hit.memory_id == summary.id and hit.type is MemoryType.SESSION_SUMMARY
    assert hit.provenance.session_external_id == "s3"


async def test_export_sorted_with_schema_version(backend: MemoryBackend) -> None:
    """Export yields every non-deleted memory, sorted by id, each with the schema version."""
    made = [await backend.remember(f"note number {i}", project="/p" if i % 2 else None)
            for i in range(7)]
    v2 = await backend.correct(made[0].id, "note number zero, corrected")
    await backend.forget(made[1].id)
    records = await export_all(backend)
    ids = [r["id"] for r in records]
    assert ids == sorted(ids)
    assert set(ids) == {m.id for m in made} - {made[1].id} | {v2.id}
    assert all(r["schema_version"] == SCHEMA_VERSION for r in records)
    assert {r["id"] for r in await export_all(backend, "/p")} == {
        m.id for i, m in enumerate(made) if i % 2 and i != 1
    }


async def test_import_round_trips_and_is_idempotent(make_backend: BackendFactory,
                                                    clock: FakeClock) -> None:
    """An export imported into a fresh store reproduces it exactly; a second import adds nothing."""
    source = await make_backend("source")
    v1 = await source.remember("ci runs on self-hosted runners", project="/ci", tags=("ci", "x"))
    await source.correct(v1.id, "ci runs on github-hosted runners", reason="migrated")
    await source.save_conversation_segment(segment("we compared runner costs"))
    await source.recall("runners")
    exported = await export_all(source)
    target = await make_backend("target")
    assert await target.import_records(exported) == 3
    assert await export_all(target) == exported
    assert await target.import_records(exported) == 0
    assert await export_all(target) == exported
    correction = next(r["id"] for r in exported if r["supersedes"] == v1.id)
    assert [m.id for m in await target.history(v1.id)] == [v1.id, correction]
    latest = await target.recall("runners", project="/ci", types=[MemoryType.CORRECTION])
    assert [r.content for r in latest] == ["ci runs on github-hosted runners"]


async def test_import_refuses_unknown_schema_version(make_backend: BackendFactory) -> None:
    """A record of an unknown schema version is refused clearly, and nothing is imported."""
    source = await make_backend("source")
    await source.remember("first")
    await source.remember("second")
    records = await export_all(source)
    records[1] = {**records[1], "schema_version": 99}
    target = await make_backend("target")
    with pytest.raises(BackendError, match=r"record 2: unknown export schema_version 99"):
        await target.import_records(records)
    assert await export_all(target) == []
    with pytest.raises(BackendError, match="missing field 'content'"):
        await target.import_records([{k: v for k, v in records[0].items() if k != "content"}])


@pytest.mark.parametrize(
    "query",
    [
        'what\'s "the" deploy-order?',
        "AND OR (",
        "NOT",
        '"unbalanced',
        "col:value ^start NEAR(a b, 3) x*",
        ")))(((",
        "-- ; DROP TABLE memories; --",
        "\x00\x01 weird \u200b bytes",
        "日本語 のテキスト",
        "x" * 5000,
        "a " * 500,
        "",
        "   ",
    ],
)
async def test_hostile_queries_do_not_raise(backend: MemoryBackend, query: str) -> None:
    """Any user text is a valid recall query: FTS5 syntax in it is never interpreted."""
    await backend.remember("what's the deploy order? staging, then production")
    results = await backend.recall(query)
    assert isinstance(results, list)


async def test_quoted_query_still_finds_words(backend: MemoryBackend) -> None:
    """Punctuation and quotes in a query are ignored but its words still match (stemmed)."""
    memory = await backend.remember("Deploying to staging happens before production")
    (hit,) = await backend.recall('what\'s "the" deploy-order?')
    assert hit.memory_id == memory.id


async def test_bad_arguments_raise_value_error(backend: MemoryBackend) -> None:
    """Out-of-range importance, empty content and naive datetimes are refused with ValueError."""
    with pytest.raises(ValueError):
        await backend.remember("x", importance=1.5)
    with pytest.raises(ValueError):
        await backend.remember("   ")
    with pytest.raises(ValueError):
        await backend.recall("x", since=datetime(2025, 1, 1))
    assert await backend.recall("x", limit=0) == []


async def test_time_zones_are_normalised_to_utc(backend: MemoryBackend) -> None:
    """Datetimes in any zone filter correctly and come back in UTC."""
    plus5 = timezone(timedelta(hours=5))
    minus3 = timezone(timedelta(hours=-3))
    start = datetime(2025, 6, 1, 10, 0, tzinfo=plus5)  # 05:00Z
    seg = segment("timezone handling in the scheduler", start=start, minutes=30)
    await backend.save_conversation_segment(seg)
    (hit,) = await backend.recall("scheduler", since=datetime(2025, 6, 1, 2, 20, tzinfo=minus3))
    assert hit.provenance.started_at == start and hit.provenance.started_at.tzinfo == UTC
    assert await backend.recall("scheduler", since=datetime(2025, 6, 1, 2, 31, tzinfo=minus3)) == []


async def test_a_longer_save_of_a_tail_supersedes_the_shorter_one(backend: MemoryBackend
                                                                  ) -> None:
    """A tail saved before a crash and saved again longer leaves one live segment."""
    short = segment("alpha beta gamma tail", first=4, last=6)
    assert (await backend.save_conversation_segment(short)).created
    longer = segment("alpha beta gamma tail and more after the crash", first=4, last=9)
    assert (await backend.save_conversation_segment(longer)).created
    found = await backend.recall("alpha beta gamma")
    assert [r.memory_id for r in found] == [longer.id]
    old = await backend.get(short.id)
    assert old is not None and old.superseded_by == longer.id
    # Other sessions, other starts and earlier segments are left alone.
    other = segment("alpha beta gamma elsewhere", session_id=2, first=4, last=5)
    before = segment("alpha beta gamma before", first=0, last=3)
    for item in (other, before):
        await backend.save_conversation_segment(item)
    again = await backend.save_conversation_segment(longer)
    assert not again.created
    # In time order: ranked by words, one session's segments would count once.
    live = {r.memory_id for r in await backend.recall("alpha beta gamma", limit=10,
                                                      order="recent")}
    assert live == {longer.id, other.id, before.id}


async def test_ranked_recall_gives_a_session_once(backend: MemoryBackend) -> None:
    """Ranked by words, a session's segments and digest come back as its best one, which
    counts them; other sessions follow in rank order, and facts each stand alone even
    when said in the same session (37.1)."""
    from memoryd.memory import DIGEST_KIND

    for first in (0, 4, 8):
        await backend.save_conversation_segment(segment(
            f"the nginx reload broke staging, try {first}", first=first, last=first + 3))
    weaker = segment("staging nginx", session_id=2)
    await backend.save_conversation_segment(weaker)
    try:
        await backend.save_session_summary(SessionSummary(
            source="claude", session_id=1, session_external_id="sess-1", project="/work/app",
            kind=DIGEST_KIND, content="asked why the nginx reload broke staging",
            first_index=0, last_index=11))
        digests = 1
    except BackendError:
        digests = 0  # a backend that keeps conversation only
    said = [await backend.remember(f"nginx reload on staging needs sudo {i}",
                                   project="/work/app",
                                   provenance=Provenance(session_id=1,
                                                         session_external_id="sess-1",
                                                         source="claude"))
            for i in range(2)]
    found = await backend.recall("nginx reload broke staging", project="/work/app", limit=10)
    sessions = [(r.provenance.session_external_id, r.type) for r in found
                if r.type is not MemoryType.FACT]
    assert sessions[:2] == [("sess-1", sessions[0][1]), ("sess-2", MemoryType.CONVERSATION)]
    assert len(sessions) == 2
    matches = {r.provenance.session_external_id: r.session_matches for r in found
               if r.type is not MemoryType.FACT}
    assert matches == {"sess-1": 3 + digests, "sess-2": 1}
    assert {r.memory_id for r in found if r.type is MemoryType.FACT} == {m.id for m in said}
    # Listing by time is not ranked by words: every segment is there.
    listed = await backend.recall("nginx", project="/work/app", limit=10, order="recent",
                                  types=[MemoryType.CONVERSATION])
    assert len(listed) == 4


async def test_forgetting_a_session_sticks(backend: MemoryBackend) -> None:
    """A later segment or summary of a forgotten session, or an old export of it, is never
    saved again (issue 16.2); other sessions are not touched."""
    first = segment("the staging password rotation plan", session_id=7, first=0, last=3)
    await backend.save_conversation_segment(first)
    exported = await export_all(backend)
    assert await backend.forget_where(session_external_id="sess-7") == 1
    later = segment("more on the staging password rotation", session_id=7, first=4, last=9)
    saved = await backend.save_conversation_segment(later)
    assert not saved.created
    assert await backend.import_records(exported) == 0
    other = await backend.save_conversation_segment(
        segment("the staging password rotation, another session", session_id=8))
    assert other.created
    assert [r.memory_id for r in await backend.recall("staging password rotation")] == [
        other.id]


async def test_forgetting_a_project_sticks_for_what_it_held(backend: MemoryBackend,
                                                           clock: FakeClock) -> None:
    """Conversations of a forgotten project that began before the forget never come back;
    one that begins after it is new, and is kept."""
    start = clock.now() - timedelta(days=1)
    await backend.save_conversation_segment(
        segment("old talk about the parser", session_id=3, project="/p", start=start))
    assert await backend.forget_where(project="/p") == 1
    stale = await backend.save_conversation_segment(
        segment("old talk about the parser, its tail", session_id=4, project="/p",
                start=start))
    assert not stale.created
    clock.advance(300)
    fresh = await backend.save_conversation_segment(
        segment("new talk about the parser", session_id=5, project="/p",
                start=clock.now()))
    assert fresh.created


async def test_a_forget_as_of_an_earlier_time_spares_what_came_after(
        backend: MemoryBackend, clock: FakeClock) -> None:
    """A forget replayed later (the chain's outbox) acts as of when it was asked: what was
    stored after that stays, and conversations begun after it may be saved."""
    asked = clock.now()
    before = await backend.remember("the parser was rewritten", project="/p")
    clock.advance(60)
    after = await backend.remember("the parser gets a new cache", project="/p")
    clock.advance(60)
    assert await backend.forget_where(project="/p", as_of=asked + timedelta(seconds=1)) == 1
    assert (await backend.get(before.id)).deleted_at is not None  # type: ignore[union-attr]
    assert (await backend.get(after.id)).deleted_at is None  # type: ignore[union-attr]
    later = await backend.save_conversation_segment(segment(
        "the parser talk that began after the forget", session_id=8, project="/p",
        start=asked + timedelta(seconds=30)))
    assert later.created


# -- isolation ------------------------------------------------------------------------

async def test_private_memories_reach_only_their_agent(
        backend: MemoryBackend, make_backend: BackendFactory) -> None:
    """A memory private to an agent is recalled by that agent only, in every recall path
    (words, no words, time order); corrections stay private; an export keeps the mark."""
    shared = await backend.remember("the build cache lives on the nas", project="/work/app")
    mine = await backend.remember("the nas admin password rotates weekly",
                                  project="/work/app", private_to="Claude")
    assert mine.private_to == "claude"
    for agent in (None, "codex"):
        for query, order in (("nas", "score"), ("", "score"), ("", "time")):
            found = await backend.recall(query, project="/work/app", agent=agent,
                                         order=order)  # type: ignore[arg-type]
            assert [r.memory_id for r in found] == [shared.id], (agent, query, order)
    found = await backend.recall("nas password", project="/work/app", agent="claude")
    assert mine.id in {r.memory_id for r in found}
    assert next(r for r in found if r.memory_id == mine.id).private_to == "claude"
    fixed = await backend.correct(mine.id, "the nas admin password rotates daily")
    assert fixed.private_to == "claude"
    assert await backend.recall("password rotates daily", agent="codex") == []
    saved = dataclasses.replace(segment("codex ran the nightly vacuum on the nas"),
                                private_to="codex")
    await backend.save_conversation_segment(saved)
    assert saved.id in {r.memory_id for r in await backend.recall("nightly vacuum",
                                                                  agent="codex")}
    assert await backend.recall("nightly vacuum", agent="claude") == []
    marks = {r["id"]: r.get("private_to") for r in await export_all(backend)}
    assert marks[fixed.id] == "claude" and marks[saved.id] == "codex"
    assert marks[shared.id] is None
    copy = await make_backend("copy")
    await copy.import_records(await export_all(backend))
    assert [r.memory_id for r in await copy.recall("nas", project="/work/app")] == [shared.id]
    with pytest.raises(ValueError, match="agent"):
        await backend.remember("x", private_to="no spaces allowed")


async def test_a_linked_project_moves_with_its_memories(backend: MemoryBackend) -> None:
    """`relabel_project` moves a renamed folder's memories: recall by the new path finds
    them by words and without, the old path holds none, other projects stay put."""
    if not isinstance(backend, ProjectRelabel):
        pytest.skip(f"{backend.name} keeps memories under the path they were saved with")
    moved = await backend.remember("the ledger uses bankers rounding", project="/work/old")
    await backend.save_conversation_segment(segment("the ledger closes at midnight",
                                                    project="/work/old"))
    other = await backend.remember("the ledger of api b is kept in euros", project="/work/b")
    # A memory already in the new project: both sets are searchable there afterwards.
    there = await backend.remember("the ledger exports to parquet", project="/work/new")
    assert (await backend.relabel_project("/work/old", "/work/new")).moved == 2
    found = await backend.recall("ledger", project="/work/new")
    assert {r.memory_id for r in found} >= {moved.id, there.id}
    assert other.id not in {r.memory_id for r in found}
    assert all(r.project == "/work/new" for r in found)
    assert await backend.recall("ledger", project="/work/old") == []
    listed = await backend.recall("", project="/work/new")
    assert len(listed) == 3
    assert (await backend.get(moved.id)).project == "/work/new"  # type: ignore[union-attr]
    assert (await backend.relabel_project("/work/old", "/work/new")).moved == 0
    with pytest.raises(ValueError):
        await backend.relabel_project("/work/new", "/work/new")
