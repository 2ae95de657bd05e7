"""Property: framing does not depend on how the byte stream is chunked."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.ingest.framing import Line, LineFramer

# Bytes biased towards newlines and CRs, so lines are short, empty, or CRLF-terminated.
_streams = st.lists(
    st.one_of(st.just(b"\n"), st.just(b"\r"), st.binary(min_size=1, max_size=12)),
    max_size=40,
).map(b"".join)


def _reference(stream: bytes, start: int) -> list[Line]:
    """The complete lines of `stream`, computed independently of LineFramer."""
    lines, position = [], 0
    while (newline := stream.find(b"\n", position)) >= 0:
        lines.append(Line(stream[position:newline], start + position, start + newline + 1))
        position = newline + 1
    return lines


@st.composite
def _chunked(draw: st.DrawFn) -> tuple[bytes, list[bytes], int]:
    stream = draw(_streams)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    return stream, chunks, draw(st.integers(0, 10_000))


@settings(max_examples=300, deadline=None)
@given(_chunked())
def test_any_chunking_gives_the_same_complete_lines(case: tuple[bytes, list[bytes], int]) -> None:
    """Whatever the chunking, the framer emits exactly the stream's complete lines and offsets."""
    stream, chunks, start = case
    framer = LineFramer(start)
    emitted: list[Line] = []
    for chunk in chunks:
        emitted += framer.feed(chunk)
    assert emitted == _reference(stream, start)


@settings(max_examples=300, deadline=None)
@given(_chunked())
def test_partial_line_is_never_emitted(case: tuple[bytes, list[bytes], int]) -> None:
    """After every chunk, each emitted line ended at a newline in the stream, and the bytes
    held back are exactly the unterminated tail of what was fed."""
    stream, chunks, start = case
    framer = LineFramer(start)
    fed = b""
    for chunk in chunks:
        for line in framer.feed(chunk):
            fed_end = line.end - start
            assert stream[fed_end - 1 : fed_end] == b"\n"
            assert b"\n" not in line.data
        fed += chunk
        tail = len(fed) - (fed.rfind(b"\n") + 1)
        assert framer.pending == tail
        assert framer.committed_end == start + len(fed) - tail


@settings(max_examples=200, deadline=None)
@given(_streams, st.integers(0, 10_000))
def test_offsets_index_the_stream(stream: bytes, start: int) -> None:
    """Every line's offsets slice its own bytes (plus the newline) out of the stream."""
    framer = LineFramer(start)
    lines = []
    for byte in stream:  # the extreme chunking: one byte at a time
        lines += framer.feed(bytes([byte]))
    for line in lines:
        assert stream[line.offset - start : line.end - start] == line.data + b"\n"
    assert [line.offset for line in lines[1:]] == [line.end for line in lines[:-1]]
