"""File identity: device and inode plus a hash of the first line, and a marker before the offset.

Paths are not identity: files are renamed and moved, and agents replay earlier
messages into new files, so two files may share a first line. A marker (a hash
of the bytes just before the saved offset) notices a file rewritten in place.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

MARKER_BYTES = 64
#: A file modified within this long is still settling: on a file system with coarse
#: timestamps a second change in the same tick would not move its mtime again, so what
#: its size and mtime say is trusted only after it (the tailer's shortcut, the scan's
#: directory check).
SETTLE_NS = 2_000_000_000


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Identity:
    device: int
    inode: int
    head_hash: str
    head_length: int

    def as_text(self) -> str:
        return f"{self.device}:{self.inode}:{self.head_hash}:{self.head_length}"


def marker_span(offset: int) -> tuple[int, int]:
    """The byte range whose hash marks a saved offset."""
    start = max(0, offset - MARKER_BYTES)
    return start, offset


def read_head_hash(fd: int, length: int) -> str | None:
    """The hash of the first `length` bytes, or None when the file is shorter."""
    data = os.pread(fd, length, 0)
    if len(data) < length:
        return None
    return digest(data)


def read_marker(fd: int, offset: int) -> str:
    start, end = marker_span(offset)
    return digest(os.pread(fd, end - start, start))
