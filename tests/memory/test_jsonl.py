"""The JSONL last-resort backend: what is on disk, reopening, crashes mid-line, hard forgets.
The protocol itself is checked by test_contract on every backend."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.clock import FakeClock
from memoryd.memory import ConversationSegment, DistilledMemory, MemoryType
from memoryd.memory.backends.jsonl import JsonlMemoryBackend
from memoryd.memory.backends.jsonl_files import NO_PROJECT


def segment(last: int, text: str = "we picked the blue green rollout") -> ConversationSegment:
    return ConversationSegment(source="claude", session_id=1, session_external_id="s1",
                               project="/work/app", first_index=0, last_index=last, text=text)


def lines_of(directory: Path) -> list[str]:
    """Every line of every file: human-readable, one JSON object per line."""
    return [line for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


async def test_reopening_reads_back_every_event(tmp_path: Path) -> None:
    """Remember, correct, soft forget, use, grown evidence and a superseded tail all
    survive a reopen."""
    clock = FakeClock()
    backend = await JsonlMemoryBackend.open(tmp_path, clock=clock)
    fact = await backend.remember("the cache holds 512 entries", project="/work/app")
    fixed = await backend.correct(fact.id, "the cache holds 1024 entries")
    gone = await backend.remember("a note to forget")
    await backend.forget(gone.id)
    await backend.record_use([fixed.id])
    observed = await backend.save_distilled_memory(DistilledMemory(
        source="claude", session_id=1, session_external_id="s1", project="/work/app",
        segment="seg1", kind="fact", content="Prices are in cents.", first_index=0,
        last_index=1, message_uuids=("u0", "u1")))
    assert await backend.add_evidence(observed.id, ["u1", "v7"])
    await backend.save_conversation_segment(segment(3))
    longer = segment(5)
    await backend.save_conversation_segment(longer)
    await backend.close()

    again = await JsonlMemoryBackend.open(tmp_path, clock=clock)
    assert [m.id for m in await again.history(fact.id)] == [fact.id, fixed.id]
    assert [r.memory_id for r in await again.recall("cache entries")] == [fixed.id]
    assert (await again.get(gone.id)).deleted_at is not None  # type: ignore[union-attr]
    assert (await again.get(fixed.id)).access_count == 1  # type: ignore[union-attr]
    grown = await again.get(observed.id)
    assert grown is not None and grown.provenance.message_uuids == ("u0", "u1", "v7")
    assert [r.memory_id for r in await again.recall("rollout")] == [longer.id]
    assert all(isinstance(json.loads(line), dict) for line in lines_of(tmp_path))


async def test_hard_forget_leaves_no_content_on_disk(tmp_path: Path) -> None:
    backend = await JsonlMemoryBackend.open(tmp_path, clock=FakeClock())
    secret = await backend.remember("the launch codename is bluebird")
    kept = await backend.remember("the office opens at nine")
    assert await backend.forget(secret.id, hard=True)
    raw = "\n".join(lines_of(tmp_path)).encode()
    assert b"bluebird" not in raw and b"nine" in raw
    again = await JsonlMemoryBackend.open(tmp_path, clock=FakeClock())
    assert await again.get(secret.id) is None and await again.get(kept.id) is not None
    assert [d.memory_id for d in await again.deletions()] == [secret.id]
    assert await again.import_records([{**(await anext(again.export())), "id": secret.id}]) == 0


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=1, max_value=400), more=st.text(min_size=1, max_size=40)
       .filter(lambda t: t.strip() != ""))
async def test_a_line_cut_by_a_crash_is_dropped_and_later_appends_stay_whole(
        cut: int, more: str) -> None:
    """Whatever prefix of the last line a crash left, reopening keeps every complete event and
    the next append is read back whole."""
    import tempfile

    directory = Path(tempfile.mkdtemp())
    clock = FakeClock()
    backend = await JsonlMemoryBackend.open(directory, clock=clock)
    first = await backend.remember("first fact about the cache")
    second = await backend.remember("second fact about the queue")
    path = directory / NO_PROJECT
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[:last_start + min(cut, len(data) - last_start - 1)])
    reopened = await JsonlMemoryBackend.open(directory, clock=clock)
    assert await reopened.get(first.id) is not None
    assert await reopened.get(second.id) is None  # its line never ended: never acknowledged
    third = await reopened.remember(more, type=MemoryType.FACT)
    final = await JsonlMemoryBackend.open(directory, clock=clock)
    assert (await final.get(third.id)) is not None
    assert {r["id"] async for r in final.export()} == {first.id, third.id}
