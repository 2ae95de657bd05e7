"""Bytes to complete lines. No I/O: the tailer feeds what it read, in any chunking."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line: its bytes without the newline, where it starts, where the next starts."""

    data: bytes
    offset: int
    end: int


class LineFramer:
    """Splits a byte stream that starts at `start` into newline-terminated lines.

    A trailing partial line is held back until its newline arrives; it is never
    emitted, so an offset taken from `Line.end` always sits just past a newline.
    """

    __slots__ = ("_buffer", "_buffer_offset")

    def __init__(self, start: int = 0) -> None:
        self._buffer = bytearray()
        self._buffer_offset = start

    @property
    def pending(self) -> int:
        """Bytes held back because their line is not complete yet."""
        return len(self._buffer)

    @property
    def committed_end(self) -> int:
        """The offset just past the last complete line emitted."""
        return self._buffer_offset

    def feed(self, chunk: bytes) -> list[Line]:
        newline = chunk.find(b"\n")
        if newline < 0:
            self._buffer += chunk  # (a long line read in many chunks grows in place)
            return []
        # Lines are cut from one bytes object: the chunk itself when it starts on a
        # line boundary (the usual case), else the held-back partial line joined to it.
        data = chunk
        if self._buffer:
            newline += len(self._buffer)
            data = b"".join((self._buffer, chunk))
        lines: list[Line] = []
        base = self._buffer_offset
        start = 0
        while newline >= 0:
            lines.append(Line(data[start:newline], base + start, base + newline + 1))
            start = newline + 1
            newline = data.find(b"\n", start)
        self._buffer = bytearray(data[start:])
        self._buffer_offset = base + start
        return lines
