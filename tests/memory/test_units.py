"""Pure parts of the memory layer: ids, FTS query building, the ranking formula, records."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest

from memoryd.memory import (
    ConversationSegment,
    Memory,
    MemoryType,
    Provenance,
    RequestedMemory,
    memory_to_record,
    record_to_memory,
    segment_id,
    summary_id,
)
from memoryd.memory.backends.sqlite import fts
from memoryd.memory.recall import ranking


def test_segment_id_is_deterministic_and_distinct() -> None:
    """A segment id depends only on (source, session, range), and each part changes it."""
    base = {"source": "claude", "session_external_id": "s", "session_id": 3,
            "first_index": 0, "last_index": 9}
    sid = segment_id(**base)  # type: ignore[arg-type]
    assert sid == segment_id(**base) and len(sid) == 32  # type: ignore[arg-type]
    variants = [
        {**base, "source": "codex"},
        {**base, "session_external_id": "t"},
        {**base, "session_external_id": None},
        {**base, "first_index": 1},
        {**base, "last_index": 10},
    ]
    assert len({sid, *(segment_id(**v) for v in variants)}) == 6  # type: ignore[arg-type]
    # An external id "3" and a session row id 3 are different sessions.
    assert segment_id(source="x", session_external_id="3", session_id=None, first_index=0,
                      last_index=0) != segment_id(source="x", session_external_id=None,
                                                  session_id=3, first_index=0, last_index=0)
    with pytest.raises(ValueError):
        segment_id(source="x", session_external_id=None, session_id=None, first_index=0,
                   last_index=0)


def test_segment_computes_its_id_and_checks_range() -> None:
    """ConversationSegment.id equals segment_id of its fields; a reversed range is refused."""
    seg = ConversationSegment(source="claude", session_id=1, session_external_id=None,
                              project=None, first_index=2, last_index=5, text="t")
    assert seg.id == segment_id(source="claude", session_external_id=None, session_id=1,
                                first_index=2, last_index=5)
    with pytest.raises(ValueError):
        ConversationSegment(source="claude", session_id=1, session_external_id=None,
                            project=None, first_index=5, last_index=2, text="t")


def test_summary_id_hashes_the_whole_content() -> None:
    """Summaries differing only at their end get different ids."""
    common = {"source": "claude", "session_external_id": "s", "session_id": None,
              "kind": "summary"}
    a = summary_id(content="x" * 1000 + "a", **common)  # type: ignore[arg-type]
    b = summary_id(content="x" * 1000 + "b", **common)  # type: ignore[arg-type]
    assert a != b


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('what\'s "the" deploy-order?', '"deploy" OR "order"'),
        ("AND OR (", '"and" OR "or"'),
        ("the", '"the"'),
        ("?!", None),
        ("", None),
        ("Müller straße", '"müller" OR "straße"'),
        ("a a a b", '"b"'),
    ],
)
def test_match_expression_quotes_every_word(text: str, expected: str | None) -> None:
    """Queries are rebuilt from quoted words OR-ed, stopwords dropped while others remain."""
    assert fts.match_expression(text) == expected


def test_match_expression_is_valid_fts5() -> None:
    """Every built expression parses in a real FTS5 table."""
    raw = sqlite3.connect(":memory:")
    raw.execute("CREATE VIRTUAL TABLE f USING fts5(a, tokenize='porter unicode61')")
    for text in ['"', "NEAR(", "a:b", "x*", "^", "AND", 'say "hi" NOT bye', "x" * 300]:
        expression = fts.match_expression(text)
        if expression is not None:
            raw.execute("SELECT * FROM f WHERE f MATCH ?", (expression,)).fetchall()
    assert len(fts.terms(" ".join(f"w{i}" for i in range(100)))) == fts.MAX_TERMS


def test_content_only_match_never_matches_the_scope_column() -> None:
    """A content-only expression, ANDed with a scope as hybrid recall does, finds words in
    `content` only: a word spelled like a scope token does not match the scope column."""
    raw = sqlite3.connect(":memory:")
    raw.execute("CREATE VIRTUAL TABLE f USING fts5(content, scope,"
                " tokenize='porter unicode61 remove_diacritics 2')")
    raw.executemany("INSERT INTO f (rowid, content, scope) VALUES (?, ?, ?)",
                    [(1, "deploy order", "p1"), (2, "deploy p1", "p2"), (3, "deploy", "p0"),
                     (4, "nothing here", "p1")])

    def rows(text: str, scope: str) -> list[int]:
        expression = f'{{scope}} : ("{scope}" OR "p0") AND ' + str(
            fts.match_expression(text, content_only=True))
        return sorted(r[0] for r in raw.execute("SELECT rowid FROM f WHERE f MATCH ?",
                                                (expression,)))

    assert rows("deploy", "p1") == [1, 3]
    assert rows("p1", "p2") == [2]
    assert rows("p2", "p1") == []
    assert rows('AND "NEAR(', "p1") == []


def test_ranking_formula() -> None:
    """Relevance is squashed bm25; facts never decay; conversation halves per half-life."""
    assert ranking.relevance(None) == 1.0
    assert ranking.relevance(-1.0) == pytest.approx(0.5)
    assert ranking.relevance(0.5) == 0.0
    assert ranking.decay(MemoryType.FACT, 3650) == 1.0
    assert ranking.decay(MemoryType.CONVERSATION, ranking.HALF_LIFE_DAYS) == pytest.approx(0.5)
    assert ranking.decay("session_summary", 10_000) == ranking.DECAY_FLOOR
    assert ranking.decay(MemoryType.CONVERSATION, -5) == 1.0
    assert ranking.score(-1.0, 1.0, MemoryType.FACT, 0) == pytest.approx(0.5)
    assert ranking.score(-3.0, 0.5, MemoryType.FACT, 0) > ranking.score(-1.0, 1.0,
                                                                         MemoryType.FACT, 0)


def test_record_round_trip_and_refusals() -> None:
    """A memory survives memory_to_record/record_to_memory; bad records raise ValueError."""
    when = datetime(2025, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    memory = Memory(
        id="a" * 32, content="c", type=MemoryType.CONVERSATION, importance=0.5, project="/p",
        tags=("t",), provenance=Provenance(session_id=1, message_uuids=("u",), started_at=when),
        created_at=when, updated_at=when, access_count=2, last_accessed_at=when,
    )
    record = memory_to_record(memory)
    assert record_to_memory(record) == memory
    assert list(record)[:2] == ["schema_version", "id"]
    for bad in ({**record, "schema_version": 2}, {**record, "importance": 3},
                {**record, "type": "opinion"}, {**record, "created_at": "2025-01-01T00:00:00"},
                {**record, "project": 5}, "not a dict"):
        with pytest.raises(ValueError):
            record_to_memory(bad)  # type: ignore[arg-type]


def test_deterministic_ids_never_change() -> None:
    """Ids already stored in people's databases: a different id would save everything again."""
    assert segment_id(source="claude", session_external_id="abc", session_id=3, first_index=0,
                      last_index=9) == "370b10dccec55169b3493a967f36644f"
    assert summary_id(source=None, session_external_id="x", session_id=None, kind="k",
                      content="c") == "5b617a2e7c185c90b821516493d22450"


def test_requested_memory_id_is_per_message_and_content() -> None:
    def made(index: int, content: str) -> RequestedMemory:
        return RequestedMemory(source="claude", session_id=1, session_external_id="s",
                               project="/p", message_index=index, content=content,
                               message_uuid="u")

    first = made(4, "Remember that the port is 5433.")
    assert first.id == made(4, "Remember that the port is 5433.").id
    assert len({first.id, made(5, first.content).id, made(4, "Remember that it is 5434.").id,
                segment_id(source="claude", session_external_id="s", session_id=1,
                           first_index=4, last_index=4)}) == 4
    assert (first.provenance.first_index, first.provenance.last_index) == (4, 4)
    assert first.provenance.message_uuids == ("u",)
    with pytest.raises(ValueError):
        made(4, "  ")
