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
        if not chunk:
            return []
        search_from = len(self._buffer)
        self._buffer += chunk
        newline = self._buffer.find(b"\n", search_from)
        if newline < 0:
            return []
        lines: list[Line] = []
        buffer = self._buffer
        base = self._buffer_offset
        start = 0
        while newline >= 0:
            lines.append(Line(bytes(buffer[start:newline]), base + start, base + newline + 1))
            start = newline + 1
            newline = buffer.find(b"\n", start)
        del buffer[:start]
        self._buffer_offset = base + start
        return lines
