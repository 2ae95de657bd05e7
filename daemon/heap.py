"""Handing freed heap back to the operating system after a burst of work.

glibc keeps the memory Python and SQLite free for its own reuse; after a burst (a
backfill saved, a model released) an idle daemon would keep that peak as its size.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys


def return_freed_memory() -> None:
    """`malloc_trim(0)` on Linux (glibc; a few ms), nothing elsewhere."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
