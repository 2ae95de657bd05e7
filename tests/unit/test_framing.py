"""LineFramer: bytes in any chunking to complete lines with their offsets."""

from __future__ import annotations

from memoryd.ingest.framing import Line, LineFramer


def test_complete_lines_with_offsets() -> None:
    """Each line comes out without its newline, with where it starts and where the next starts."""
    framer = LineFramer()
    assert framer.feed(b"ab\ncde\n") == [Line(b"ab", 0, 3), Line(b"cde", 3, 7)]
    assert framer.committed_end == 7
    assert framer.pending == 0


def test_partial_line_is_held_back_until_its_newline() -> None:
    """A line without its newline is not emitted; it comes out whole once the newline arrives."""
    framer = LineFramer()
    assert framer.feed(b"ab\ncd") == [Line(b"ab", 0, 3)]
    assert framer.pending == 2
    assert framer.committed_end == 3
    assert framer.feed(b"e") == []
    assert framer.feed(b"f\n") == [Line(b"cdef", 3, 8)]
    assert framer.pending == 0


def test_start_offset_is_respected() -> None:
    """A framer started at a saved offset reports offsets in the file, not in the chunk."""
    framer = LineFramer(100)
    assert framer.feed(b"x\n\ny\n") == [Line(b"x", 100, 102), Line(b"", 102, 103),
                                        Line(b"y", 103, 105)]


def test_crlf_and_empty_chunks() -> None:
    """A CR stays with its line (the tailer strips it); empty chunks change nothing."""
    framer = LineFramer()
    assert framer.feed(b"") == []
    assert framer.feed(b"a\r") == []
    assert framer.feed(b"\n") == [Line(b"a\r", 0, 3)]


def test_long_line_in_many_chunks() -> None:
    """A line far longer than any chunk is assembled whole."""
    framer = LineFramer()
    out: list[Line] = []
    for _ in range(1000):
        out += framer.feed(b"z" * 1000)
    out += framer.feed(b"\n")
    assert out == [Line(b"z" * 1_000_000, 0, 1_000_001)]
