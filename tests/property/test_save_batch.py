"""A batch of segments saved in a few statements stores what saving each alone does.

A batch's memories and chunks are inserted as many rows a statement (one step outside
Python's lock), cut where the limit on bound values falls. Any text (NUL, quotes,
backslashes, escapes, characters outside the BMP), uuids orjson refuses, a segment
given twice, one saved before and one whose id was hard-forgotten must come out of a
batch (cut in statements of a few rows, or not cut) and of single saves alike, column
for column, and as given.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.clock import FakeClock
from memoryd.memory import ConversationSegment, SQLiteMemoryBackend
from memoryd.memory.backends.sqlite import bulk

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300) | \
    st.sampled_from(['"\\u0000"', "a\x00b", "\\", '{"x": [1, 2.5]}', "\U0001f600 é",
                     "[REDACTED:email]", "'; DROP TABLE memories; --"])


def _segment(n: int, text: str, uuids: tuple[str, ...]) -> ConversationSegment:
    return ConversationSegment(
        source="claude", session_id=3, session_external_id="s-3",
        project=None if n % 3 == 0 else f"/p/{text[:5]}", first_index=n * 10,
        last_index=n * 10 + 9, text=text, message_uuids=uuids)


def _rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        memories = db.execute("SELECT * FROM memories ORDER BY seq").fetchall()
        # The uuids as values: orjson and json.dumps write some characters differently.
        chunks = [(*row[:-1], json.loads(row[-1])) for row in db.execute(
            "SELECT seq, memory_seq, ordinal, start_char, end_char, content, first_index,"
            " last_index, scope, message_uuids FROM memory_chunks ORDER BY seq")]
        projects = db.execute("SELECT * FROM memory_projects ORDER BY id").fetchall()
    return [*memories, *chunks, *projects]


async def _save(path: Path, segments: list[ConversationSegment], *, mode: str
                ) -> tuple[list[bool], list[tuple[Any, ...]]]:
    async with await SQLiteMemoryBackend.open(path, clock=FakeClock()) as backend:
        # One saved before, then hard-forgotten: its id is never stored again.
        await backend.save_conversation_segment(segments[0])
        await backend.forget(segments[0].id, hard=True)
        # One saved before and kept: not created again.
        await backend.save_conversation_segment(segments[1])
        with pytest.MonkeyPatch.context() as patch:
            if mode == "single":
                saved = [await backend.save_conversation_segment(s) for s in segments]
            else:
                if mode == "cut":  # two memories, or six chunks, a statement
                    patch.setattr(bulk, "MAX_VARIABLES", 60)
                saved = await backend.save_conversation_segments(segments)
    return [r.created for r in saved], _rows(path)


_runs = itertools.count()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(_TEXT, min_size=3, max_size=6),
       # A transcript's uuid may hold a lone surrogate (stored as JSON text).
       uuids=st.lists(st.text(st.characters(blacklist_categories=()), min_size=1,
                              max_size=8), max_size=3).map(tuple),
       again=st.integers(0, 5))
def test_a_batch_saves_what_single_saves_do(tmp_path: Path, texts: list[str],
                                            uuids: tuple[str, ...], again: int) -> None:
    segments = [_segment(n, text, uuids) for n, text in enumerate(texts)]
    # The same segment twice in a batch: only the first is created.
    segments.append(segments[2 + again % (len(segments) - 2)])
    run = next(_runs)
    single = asyncio.run(_save(tmp_path / f"single-{run}.db", segments, mode="single"))
    cut = asyncio.run(_save(tmp_path / f"cut-{run}.db", segments, mode="cut"))
    batched = asyncio.run(_save(tmp_path / f"batch-{run}.db", segments, mode="batch"))
    assert batched == single and cut == single
    created, rows = batched
    stored = {row[1]: row for row in rows if len(row) > 10}  # memories by id
    for segment in segments[1:]:
        assert stored[segment.id][3] == segment.text  # content, NUL and all
        assert stored[segment.id][5] == segment.project
    # Each chunk is its memory's text between its offsets, scoped to its project.
    by_seq = {row[0]: row for row in stored.values()}
    scopes = {f"p{row[0]}": row[1] for row in rows if len(row) == 2}
    chunks = [row for row in rows if len(row) == 10]
    assert {row[1] for row in chunks} == set(by_seq)
    for _seq, memory_seq, _ordinal, start, end, content, _f, _l, scope, listed in chunks:
        memory = by_seq[memory_seq]
        assert content == memory[3][start:end] and content
        assert scopes.get(scope) == memory[5]
        assert listed == [u for u in json.loads(memory[14]) if u in listed]
    assert created[:2] == [False, False]  # forgotten; saved before
    assert created[2:-1] == [True] * (len(texts) - 2) and created[-1] is False
