"""How fast a background job gets through its backlog, for `status` to say when it ends."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

#: The rate is taken over the work of the last WINDOW seconds of working time.
WINDOW = 120.0


@dataclass
class Throughput:
    """Items done per second of working time (pauses between runs do not count: the
    job runs again on its own schedule, and a rate that fell while idle would make the
    estimate of the end wrong the moment it resumed)."""

    _done: deque[tuple[float, int, float]] = field(default_factory=deque)  # at, n, secs
    working: bool = False

    def add(self, items: int, seconds: float, at: float) -> None:
        self.working = True
        self._done.append((at, items, max(seconds, 1e-6)))
        while self._done and at - self._done[0][0] > WINDOW:
            self._done.popleft()

    def idle(self) -> None:
        self.working = False

    def per_second(self) -> float | None:
        if not self._done:
            return None
        return sum(n for _, n, _s in self._done) / sum(s for _, _n, s in self._done)

    def snapshot(self) -> dict[str, Any]:
        rate = self.per_second()
        return {"per_second": round(rate, 2) if rate is not None else None,
                "working": self.working}


def eta_seconds(waiting: int, snapshot: dict[str, Any] | None) -> float | None:
    """Seconds until `waiting` items are done at the snapshot's rate; None if unknown."""
    if not waiting or not snapshot or not snapshot.get("per_second"):
        return None
    return float(waiting / snapshot["per_second"])
