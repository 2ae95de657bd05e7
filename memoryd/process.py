"""What the daemon's process (and `memoryd sync`'s) tunes about itself.

- Python's thread switch interval: SQLite runs outside Python's lock on the stores'
  threads, but each statement must take the lock back to return, and waits up to the
  interval (5 ms by default) while the event loop's thread runs Python. A backfill's
  save is a chain of such statements, so a shorter interval shortens it.
- Freed heap handed back: glibc keeps what Python and SQLite free for its own reuse;
  after a burst (a backfill saved, a model released) an idle daemon would keep that
  peak as its size.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys

#: Seconds between Python's forced thread switches in a daemon's process. One long
#: session's backfill (100,000 messages of ~4 KB): 15.1-17.6 s at the default 5 ms,
#: 12.8-13.0 s at 1 ms.
SWITCH_INTERVAL = 0.001


def tune_threads() -> None:
    """Shorten the switch interval (never lengthen one already shorter)."""
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))


def return_freed_memory() -> None:
    """`malloc_trim(0)` on Linux (glibc; a few ms), nothing elsewhere."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
