"""Cutting a memory into retrieval units (chunks) that keep their provenance. Pure: no I/O.

A conversation segment can hold thousands of characters; one fact in it is
found more precisely, and scored more fairly, in a unit of a few messages.
Segment text is one rendered message per line run (`lifecycle/segments.py`:
`user: ...`, `assistant used Bash: ...`, `tool result: ...`), so message starts
are found by those prefixes. When their count equals the segment's message
count, each chunk is a run of whole messages of at most `max_chars` characters
and carries that run's index range and uuids; a message longer than that is
split at whitespace into several chunks of the same message. When the count
does not match (hand-written memories, other renderings) the text is split into
plain windows and every chunk keeps the whole memory's provenance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memoryd.memory.models import MemoryType, Provenance

MAX_CHARS = 1000

_MESSAGE_START = re.compile(
    r"^(?:(?:user|assistant|system|tool|developer|model)(?: thought| used [^\n:]{1,80})?:"
    r"|tool result:|\[conversation compacted\]|\[compacted\] )",
    re.MULTILINE,
)
#: The same after a newline: a literal start, which the regex engine looks for quickly,
#: where `^` is tried at every character.
_LATER_START = re.compile("\n" + _MESSAGE_START.pattern.removeprefix("^"))


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span `[start, end)` of a memory's content and the messages it covers."""

    ordinal: int
    start: int
    end: int
    text: str
    first_index: int | None
    last_index: int | None
    message_uuids: tuple[str, ...]


def _windows(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """[start, end) cut at whitespace into pieces of at most max_chars (never empty)."""
    pieces: list[tuple[int, int]] = []
    while end - start > max_chars:
        cut = text.rfind(" ", start + max_chars // 2, start + max_chars)
        cut = cut if cut > start else start + max_chars
        pieces.append((start, cut))
        start = cut
    if end > start:
        pieces.append((start, end))
    return pieces


def _message_spans(text: str, provenance: Provenance) -> list[tuple[int, int]] | None:
    first, last = provenance.first_index, provenance.last_index
    if first is None or last is None:
        return None
    starts = [m.start() + 1 for m in _LATER_START.finditer(text)]
    if _MESSAGE_START.match(text):
        starts.insert(0, 0)
    if len(starts) != last - first + 1 or not starts or starts[0] != 0:
        return None
    ends = [s - 1 for s in starts[1:]] + [len(text)]  # drop the joining newline
    return list(zip(starts, ends, strict=True))


def chunk_memory(content: str, memory_type: MemoryType | str, provenance: Provenance,
                 *, max_chars: int = MAX_CHARS) -> list[Chunk]:
    """The chunks of one memory, in order, covering all of its content."""
    spans = (_message_spans(content, provenance)
             if str(memory_type) == MemoryType.CONVERSATION.value else None)
    if spans is None:
        return [Chunk(i, s, e, content[s:e], provenance.first_index, provenance.last_index,
                      provenance.message_uuids)
                for i, (s, e) in enumerate(_windows(content, 0, len(content), max_chars))]
    first = provenance.first_index or 0
    uuids = provenance.message_uuids
    per_message = len(uuids) == len(spans)
    chunks: list[Chunk] = []
    run: list[int] = []  # message positions in the current chunk

    def close() -> None:
        if run:
            s, e = spans[run[0]][0], spans[run[-1]][1]
            chunks.append(Chunk(len(chunks), s, e, content[s:e], first + run[0],
                                first + run[-1],
                                tuple(uuids[i] for i in run) if per_message else uuids))
            run.clear()

    for position, (s, e) in enumerate(spans):
        if e - s > max_chars:
            close()
            for ps, pe in _windows(content, s, e, max_chars):
                chunks.append(Chunk(len(chunks), ps, pe, content[ps:pe], first + position,
                                    first + position,
                                    (uuids[position],) if per_message else uuids))
            continue
        if run and e - spans[run[0]][0] > max_chars:
            close()
        run.append(position)
    close()
    return chunks
