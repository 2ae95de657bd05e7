"""Hybrid recall on the SQLite backend with a fake embedder of known vectors."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np
import pytest

from memoryd.clock import FakeClock
from memoryd.config_memory import EmbeddingSettings
from memoryd.memory import ConversationSegment, MemoryType, SQLiteMemoryBackend
from memoryd.memory.backends.sqlite.vector_index import VectorIndex
from memoryd.memory.models import Provenance
from memoryd.memory.recall.chunks import chunk_memory
from memoryd.memory.recall.fusion import (
    PARAPHRASE_VECTOR_WEIGHT,
    VECTOR_WEIGHT,
    Candidate,
    fuse_one,
)
from tests.memory.hybrid_helpers import FakeEmbedder

START = datetime(2025, 12, 31, 12, 0, tzinfo=UTC)


async def open_hybrid(tmp_path: Path, clock: FakeClock, embedder: FakeEmbedder | None = None,
                      **options: Any) -> SQLiteMemoryBackend:
    return await SQLiteMemoryBackend.open(tmp_path / "memory.db", clock=clock,
                                          embedder=embedder or FakeEmbedder(), **options)


def conversation(lines: list[str], *, session_id: int = 1, project: str = "/work/app",
                 start: datetime = START) -> ConversationSegment:
    return ConversationSegment(
        source="claude", session_id=session_id, session_external_id=f"s{session_id}",
        project=project, first_index=0, last_index=len(lines) - 1, text="\n".join(lines),
        message_uuids=tuple(f"s{session_id}-m{i}" for i in range(len(lines))),
        started_at=start, ended_at=start + timedelta(minutes=len(lines)),
    )


async def embed_all(backend: SQLiteMemoryBackend) -> int:
    total = 0
    while (done := await backend.embed_pending(limit=64)):
        total += done
    return total


@pytest.fixture
def clock() -> FakeClock:
    """A clock that starts at 2026-01-01T00:00Z and moves only when told."""
    return FakeClock()


async def test_paraphrase_found_by_vector_not_by_keywords(tmp_path: Path,
                                                          clock: FakeClock) -> None:
    """A query sharing no word with the memory is found once vectors exist."""
    async with await open_hybrid(tmp_path, clock) as backend:
        wanted = await backend.remember("deploy to staging before production", project="/p")
        await backend.remember("the espresso machine is broken", project="/p")
        assert await backend.recall("release sequence preprod prod", project="/p") == []
        assert await embed_all(backend) == 2
        results = await backend.recall("release sequence preprod prod", project="/p")
        assert results[0].memory_id == wanted.id


async def test_local_and_remote_embedders_recall_alike(tmp_path: Path, clock: FakeClock) -> None:
    """A local model is awaited before the SQL, a remote one beside it: same results."""
    async with await open_hybrid(tmp_path, clock) as backend:
        for text in ["deploy to staging before production", "the espresso machine is broken",
                     "release notes for the login fix", "production incident: staging skipped"]:
            await backend.remember(text, project="/p")
        await embed_all(backend)
    answers = []
    for on_this_machine in (True, False):
        embedder = FakeEmbedder(on_this_machine=on_this_machine)
        async with await open_hybrid(tmp_path, clock, embedder) as backend:
            results = await backend.recall("release sequence staging prod", project="/p")
        assert embedder.calls == 1
        answers.append([(r.memory_id, round(r.score, 6)) for r in results])
    assert answers[0] == answers[1] and len(answers[0]) >= 2


async def test_exact_identifier_found_by_keywords(tmp_path: Path, clock: FakeClock) -> None:
    """An identifier the embedder knows nothing about still ranks first through BM25."""
    async with await open_hybrid(tmp_path, clock) as backend:
        ticket = await backend.remember("ticket MEM-4711 tracks the flaky login test")
        for i in range(5):
            await backend.remember(f"deploy note {i}: release to production after staging")
        await embed_all(backend)
        results = await backend.recall("what is MEM-4711 about")
        assert results[0].memory_id == ticket.id


async def test_saving_never_calls_the_model(tmp_path: Path, clock: FakeClock) -> None:
    """Saves do not embed; a broken model leaves saving and keyword recall working."""
    embedder = FakeEmbedder()
    embedder.fail = True
    async with await open_hybrid(tmp_path, clock, embedder) as backend:
        memory = await backend.remember("the cache uses LRU eviction")
        await backend.save_conversation_segment(conversation(["user: hello", "assistant: hi"]))
        assert embedder.calls == 0
        assert [r.memory_id for r in await backend.recall("LRU eviction")] == [memory.id]
        with pytest.raises(Exception, match="fake outage"):
            await backend.embed_pending()
        assert await backend.pending_embeddings() == 2


async def test_embed_pending_drains_the_queue_once(tmp_path: Path, clock: FakeClock) -> None:
    """embed_pending stores each chunk's vector once and then has nothing left to do."""
    async with await open_hybrid(tmp_path, clock) as backend:
        for i in range(5):
            await backend.remember(f"fact number {i} about the database")
        assert await backend.pending_embeddings() == 5
        assert await backend.embed_pending(limit=3) == 3
        assert await backend.embed_pending(limit=3) == 2
        assert await backend.embed_pending() == 0
        assert await backend.pending_embeddings() == 0


async def test_caught_up_queue_looks_only_past_its_mark(tmp_path: Path,
                                                      clock: FakeClock) -> None:
    """Once every chunk has a vector, the background job looks only at newer chunks (a
    check of every chunk is a scan of the store); a vector missing below the mark is
    found by the full check every FULL_VECTOR_CHECK seconds, and new chunks at once."""
    from memoryd.memory import policy

    async with await open_hybrid(tmp_path, clock) as backend:
        for i in range(3):
            await backend.remember(f"fact number {i} about the database")
        assert await backend.embed_pending() == 3
        assert await backend.embed_pending() == 0
        conn = sqlite3.connect(tmp_path / "memory.db")
        with conn:
            conn.execute("DELETE FROM chunk_vectors WHERE chunk_seq = (SELECT MIN(chunk_seq)"
                         " FROM chunk_vectors)")
        conn.close()
        assert await backend.pending_embeddings() == 1
        assert await backend.embed_pending() == 0  # below the mark: not looked at
        await backend.remember("a newer fact about the cache")
        assert await backend.embed_pending() == 1  # the new chunk, at once
        clock.advance(policy.FULL_VECTOR_CHECK)
        assert await backend.embed_pending() == 1  # the gap, at the full check
        assert await backend.pending_embeddings() == 0


async def test_a_reused_seq_above_the_mark_is_embedded(tmp_path: Path, clock: FakeClock) -> None:
    """SQLite gives the highest seq again once the newest chunks are deleted; the mark
    comes down with them, so a chunk that takes the seq back still gets its vector."""
    async with await open_hybrid(tmp_path, clock) as backend:
        await backend.remember("the first fact about the database")
        last = await backend.remember("the second fact about the queue")
        assert await backend.embed_pending() == 2
        assert await backend.forget(last.id, hard=True)
        assert await backend.embed_pending() == 0
        await backend.remember("a third fact about the scheduler")
        assert await backend.embed_pending() == 1
        assert await backend.pending_embeddings() == 0


async def test_vectors_survive_reopening(tmp_path: Path, clock: FakeClock) -> None:
    """Stored vectors are read back into the index when the store is opened again."""
    async with await open_hybrid(tmp_path, clock) as backend:
        wanted = await backend.remember("my kitten sleeps all day")
        await embed_all(backend)
    embedder = FakeEmbedder()
    async with await open_hybrid(tmp_path, clock, embedder) as backend:
        results = await backend.recall("feline")
        assert [r.memory_id for r in results] == [wanted.id]
        assert await backend.pending_embeddings() == 0


async def test_recall_never_waits_for_a_large_index_to_load(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a million vectors back takes tens of seconds: recall does not wait for it
    (past INDEX_WAIT it answers by keywords), and uses vectors once they are in memory."""
    import asyncio

    from memoryd.memory.backends.sqlite import vectors

    async with await open_hybrid(tmp_path, clock) as backend:
        wanted = await backend.remember("my kitten sleeps all day")
        await backend.remember("kitten food is on the shelf")
        await embed_all(backend)
    monkeypatch.setattr(vectors, "INDEX_WAIT", 0.0)
    real_add = vectors._add_rows

    def slow_add(*args: Any) -> None:
        import time

        time.sleep(0.5)  # a page of a large index, read in a worker thread
        real_add(*args)

    monkeypatch.setattr(vectors, "_add_rows", slow_add)
    async with await open_hybrid(tmp_path, clock) as backend:
        assert await backend.recall("feline") == []  # keywords only, meanwhile
        await asyncio.sleep(1.0)
        results = await backend.recall("feline")
        assert [r.memory_id for r in results][:1] == [wanted.id]


async def test_filters_apply_before_ranking(tmp_path: Path, clock: FakeClock) -> None:
    """Another project's, another type's, an out-of-span or a forgotten memory never comes back."""
    async with await open_hybrid(tmp_path, clock) as backend:
        mine = await backend.remember("deploy to staging first", project="/mine")
        await backend.remember("deploy to staging first, exactly", project="/theirs")
        gone = await backend.remember("release to preprod then prod", project="/mine")
        await backend.save_conversation_segment(conversation(
            ["user: we deploy to staging first"], project="/mine",
            start=START - timedelta(days=40)))
        await embed_all(backend)
        await backend.forget(gone.id)
        results = await backend.recall("deploy staging", project="/mine",
                                       types=[MemoryType.FACT])
        assert [r.memory_id for r in results] == [mine.id]
        since = await backend.recall("deploy staging", project="/mine",
                                     since=START - timedelta(days=1))
        assert all(r.type is MemoryType.FACT for r in since)
        assert {r.memory_id for r in since} == {mine.id}


async def test_corrected_memory_is_not_recalled(tmp_path: Path, clock: FakeClock) -> None:
    """After a correction only the new version is found, even through its old vector."""
    async with await open_hybrid(tmp_path, clock) as backend:
        old = await backend.remember("we ship on fridays")
        await embed_all(backend)
        new = await backend.correct(old.id, "we ship on tuesdays")
        await embed_all(backend)
        assert [r.memory_id for r in await backend.recall("release day")] == [new.id]


async def test_near_duplicates_are_dropped(tmp_path: Path, clock: FakeClock) -> None:
    """Two memories with the same text come back once; a different one still comes back."""
    async with await open_hybrid(tmp_path, clock) as backend:
        first = await backend.remember("the database runs on postgres 16")
        await backend.remember("The database runs on Postgres 16!")
        other = await backend.remember("the sqlite database is the default store")
        await embed_all(backend)
        ids = [r.memory_id for r in await backend.recall("database postgres")]
        assert len(ids) == 2
        assert other.id in ids
        assert ids.count(first.id) + (len(ids) - 1 - ids.count(first.id)) >= 1


async def test_long_segment_is_recalled_by_its_chunk(tmp_path: Path, clock: FakeClock) -> None:
    """One result per segment, its excerpt and provenance narrowed to the matching messages."""
    lines = [f"user: filler message {i} about nothing in particular " + "x" * 150
             for i in range(20)]
    lines[13] = "user: my cat knocked the espresso cup off the desk"
    lines[17] = "assistant: your kitten again? poor espresso"
    segment = conversation(lines)
    async with await open_hybrid(tmp_path, clock) as backend:
        await backend.save_conversation_segment(segment)
        await embed_all(backend)
        results = await backend.recall("cat espresso")
        assert [r.memory_id for r in results] == [segment.id]
        hit = results[0]
        assert hit.content == segment.text
        assert hit.excerpt is not None and "knocked the espresso" in hit.excerpt
        assert "s1-m13" in hit.provenance.message_uuids
        assert "s1-m0" not in hit.provenance.message_uuids
        assert hit.provenance.first_index is not None and hit.provenance.first_index > 0


async def test_recent_conversation_beats_old_at_equal_relevance(tmp_path: Path,
                                                                clock: FakeClock) -> None:
    """Importance and recency still order results after fusion."""
    async with await open_hybrid(tmp_path, clock) as backend:
        old = conversation(["user: the cache eviction policy, first pass"], session_id=1,
                           start=clock.now() - timedelta(days=90))
        await backend.save_conversation_segment(old)
        clock.advance(90 * 86400)
        new = conversation(["user: the cache eviction policy, second look"], session_id=2,
                           start=clock.now() - timedelta(hours=1))
        await backend.save_conversation_segment(new)
        await embed_all(backend)
        results = await backend.recall("cache eviction policy")
        assert [r.memory_id for r in results] == [new.id, old.id]


async def test_hard_forget_removes_chunks_and_vectors(tmp_path: Path, clock: FakeClock) -> None:
    """A hard forget leaves no chunk, chunk index row or vector behind."""
    async with await open_hybrid(tmp_path, clock) as backend:
        memory = await backend.remember("my secret painting of a cat")
        await embed_all(backend)
        await backend.forget(memory.id, hard=True)
        assert await backend.recall("painting") == []
    async with aiosqlite.connect(tmp_path / "memory.db") as conn:
        for table in ("memory_chunks", "chunk_vectors"):
            async with conn.execute(f"SELECT COUNT(*) FROM {table}") as cur:
                assert (await cur.fetchone()) == (0,)


async def test_import_chunks_new_memories(tmp_path: Path, clock: FakeClock) -> None:
    """Imported memories are chunked, so hybrid recall finds them."""
    async with await open_hybrid(tmp_path / "a", clock) as source:
        memory = await source.remember("the canary release goes first")
        records = [r async for r in source.export()]
    async with await open_hybrid(tmp_path / "b", clock) as target:
        assert await target.import_records(records) == 1
        assert await embed_all(target) == 1
        assert [r.memory_id for r in await target.recall("rollout")] == [memory.id]


def test_weighted_fusion_weights() -> None:
    """Weighted fusion is w * vector + (1 - w) * keyword, w 0.1 by default; a chunk without a
    vector keeps its keyword."""
    assert VECTOR_WEIGHT == 0.1
    both = Candidate(1, 1, keyword=0.5, keyword_rank=1, vector=0.8, vector_rank=2, has_vector=True)
    assert fuse_one(both, "weighted", True) == pytest.approx(0.1 * 0.8 + 0.9 * 0.5)
    assert fuse_one(both, "weighted", True, vector_weight=0.6) == pytest.approx(
        0.6 * 0.8 + 0.4 * 0.5)
    fresh = Candidate(2, 2, keyword=0.5, keyword_rank=1)
    assert fuse_one(fresh, "weighted", True) == pytest.approx(0.5)
    assert fuse_one(fresh, "weighted", True, vector_weight=0.9) == pytest.approx(0.5)
    assert fuse_one(both, "rrf", True) == pytest.approx((1 / 61 + 1 / 62) / (2 / 61))


def test_the_settings_default_weight_is_the_backends() -> None:
    """config.py cannot import the memory package (imports flow one way), so the default
    is written in both places; this keeps them equal."""
    assert EmbeddingSettings().vector_weight == VECTOR_WEIGHT


@pytest.mark.parametrize(("weight", "first"), [(0.0, "keyword"), (0.9, "vector")])
async def test_vector_weight_decides_between_the_channels(tmp_path: Path, clock: FakeClock,
                                                          weight: float, first: str) -> None:
    """One memory matches the query's rare word, another its meaning; the weight picks."""
    async with await open_hybrid(tmp_path, clock, vector_weight=weight,
                                 fusion="weighted") as backend:
        by_keyword = await backend.remember("zx81 emulator notes, unrelated", project="/p")
        by_vector = await backend.remember("release to preprod before prod", project="/p")
        await embed_all(backend)
        results = await backend.recall("deployment staging production zx81", project="/p")
        assert results[0].memory_id == {"keyword": by_keyword.id, "vector": by_vector.id}[first]


async def test_vectors_lead_when_the_querys_words_are_not_found(tmp_path: Path,
                                                                clock: FakeClock) -> None:
    """Default (adaptive) fusion: a query matching one incidental word of a memory finds the
    paraphrase; a query whose words a memory holds finds that memory, as keywords rank it."""
    async with await open_hybrid(tmp_path, clock) as backend:
        incidental = await backend.remember("zx81 emulator notes, unrelated", project="/p")
        paraphrase = await backend.remember("release to preprod before prod", project="/p")
        await embed_all(backend)
        results = await backend.recall("deployment staging production zx81", project="/p")
        assert [r.memory_id for r in results] == [paraphrase.id, incidental.id]
        results = await backend.recall("zx81 emulator notes", project="/p")
        assert results[0].memory_id == incidental.id
    async with await open_hybrid(tmp_path, clock, paraphrase_vector_weight=0.0) as backend:
        results = await backend.recall("deployment staging production zx81", project="/p")
        assert results[0].memory_id == incidental.id


def test_the_settings_default_paraphrase_weight_is_the_backends() -> None:
    assert EmbeddingSettings().paraphrase_vector_weight == PARAPHRASE_VECTOR_WEIGHT


async def test_vector_weight_outside_0_to_1_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match=r"vector_weight 1\.5 is outside 0\.\.1"):
        await open_hybrid(tmp_path, clock, vector_weight=1.5)
    assert not (tmp_path / "memory.db").exists()


def test_chunks_keep_message_provenance() -> None:
    """Chunks are runs of whole messages with their own index range and uuids."""
    text = "user: short one\nassistant: a reply\nwith two lines\nuser: " + "word " * 200
    prov = Provenance(first_index=10, last_index=12, message_uuids=("a", "b", "c"))
    chunks = chunk_memory(text, MemoryType.CONVERSATION, prov, max_chars=300)
    assert (chunks[0].first_index, chunks[0].last_index) == (10, 11)
    assert chunks[0].message_uuids == ("a", "b")
    assert all(c.message_uuids == ("c",) for c in chunks[1:]) and len(chunks) > 2
    assert "".join(text[c.start:c.end] for c in chunks).replace("\n", "") == \
        text.replace("\n", "")


def test_vector_index_search_is_exact_under_a_filter() -> None:
    """The index returns the best allowed chunks by cosine, never a filtered-out one."""
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(500, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex(8)
    index.add(list(range(500)), [i % 10 for i in range(500)], vectors)
    query = vectors[7]
    found = index.search(query, 5, np.array([7, 3]))
    allowed = [i for i in range(500) if i % 10 in (3, 7)]
    expected = sorted(allowed, key=lambda i: -float(vectors[i] @ query))[:5]
    assert [c for c, _, _ in found] == expected
    # The same filter again (its gathered vectors kept), then after vectors are added
    # (the index grows and its kept rows are no longer the filter's): still exact.
    assert index.search(query, 5, np.array([7, 3])) == found
    more = rng.normal(size=(2000, 8)).astype(np.float32)
    more /= np.linalg.norm(more, axis=1, keepdims=True)
    index.add(list(range(500, 2500)), [i % 10 for i in range(500, 2500)], more)
    every = np.concatenate([vectors, more])
    allowed = [i for i in range(2500) if i % 10 in (3, 7)]
    expected = sorted(allowed, key=lambda i: -float(every[i] @ query))[:5]
    again = index.search(query, 5, np.array([7, 3]))
    assert [c for c, _, _ in again] == expected
    assert all(isinstance(c, int) and isinstance(m, int) and isinstance(s, float)
               for c, m, s in again)


async def test_memories_without_chunks_are_chunked_at_open(tmp_path: Path,
                                                           clock: FakeClock) -> None:
    """Memories stored before chunks existed (schema v1) are chunked when the store opens."""
    async with await open_hybrid(tmp_path, clock) as backend:
        memory = await backend.remember("the canary goes first")
    async with aiosqlite.connect(tmp_path / "memory.db") as conn:
        await conn.execute("DELETE FROM memory_chunks")
        await conn.commit()
    async with await open_hybrid(tmp_path, clock) as backend:
        assert [r.memory_id for r in await backend.recall("canary")] == [memory.id]


async def test_keyword_channel_stays_inside_the_project(tmp_path: Path, clock: FakeClock) -> None:
    """Project recall MATCHes the project's scope token and p0: its own and project-less
    memories are found, another project's never, even with no vectors at all."""
    async with await SQLiteMemoryBackend.open(tmp_path / "memory.db", clock=clock) as backend:
        mine = await backend.remember("the flaky parser test", project="/mine")
        everywhere = await backend.remember("parser rule for every project")
        for i in range(30):
            await backend.remember(f"parser note {i}", project="/theirs")
        found = await backend.recall("parser", project="/mine", limit=50)
        assert {r.memory_id for r in found} == {mine.id, everywhere.id}
        unknown = await backend.recall("parser", project="/never/seen", limit=50)
        assert [r.memory_id for r in unknown] == [everywhere.id]
        tiers = await backend.recall("parser", project="/mine", all_projects=True, limit=50)
        assert len(tiers) == 32
        assert {r.memory_id for r in tiers[:2]} == {mine.id, everywhere.id}
    async with aiosqlite.connect(tmp_path / "memory.db") as conn:
        scopes = dict(await conn.execute_fetchall(
            "SELECT m.id, c.scope FROM memories m JOIN memory_chunks c ON c.memory_seq = m.seq"))
        (project_id,) = await (await conn.execute(
            "SELECT id FROM memory_projects WHERE project = '/mine'")).fetchone()
    assert scopes[mine.id] == f"p{project_id}"
    assert scopes[everywhere.id] == "p0"


async def test_version_2_store_gets_scopes(tmp_path: Path, clock: FakeClock) -> None:
    """A store written before scopes existed (v2) is migrated: existing chunks get their
    project's scope and the rebuilt index finds them, and new ones are scoped too."""
    from memoryd.memory.backends.sqlite.schema import MIGRATIONS
    from memoryd.sqlite import statements as _statements

    path = tmp_path / "memory.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                    " description TEXT NOT NULL, applied_at TEXT NOT NULL)")
        for number, description, script in MIGRATIONS[:2]:
            for statement in _statements(script):
                raw.execute(statement)
            raw.execute("INSERT INTO schema_migrations VALUES (?, ?, 'then')",
                        (number, description))
        for seq, (text, project) in enumerate([("the canary deploy", "/a"),
                                               ("canary everywhere", None),
                                               ("canary for b", "/b")], 1):
            raw.execute("INSERT INTO memories (seq, id, type, content, importance, project,"
                        " tags, tags_text, created_at, updated_at) VALUES"
                        " (?, ?, 'fact', ?, 0.5, ?, '[]', '', ?, ?)",
                        (seq, f"m{seq}", text, project, "2025-12-31T00:00:00Z",
                         "2025-12-31T00:00:00Z"))
            raw.execute("INSERT INTO memory_chunks (memory_seq, ordinal, start_char, end_char,"
                        " content) VALUES (?, 0, 0, ?, ?)", (seq, len(text), text))
    async with await SQLiteMemoryBackend.open(path, clock=clock) as backend:
        assert {r.memory_id for r in await backend.recall("canary", project="/a")} == \
            {"m1", "m2"}
        added = await backend.remember("canary too", project="/b")
        assert {r.memory_id for r in await backend.recall("canary", project="/b")} == \
            {"m2", "m3", added.id}
