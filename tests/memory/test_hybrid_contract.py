"""The memory backend contract, again, on the SQLite backend with hybrid (chunk + vector) recall."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memoryd.clock import FakeClock
from memoryd.memory import MemoryBackend, SQLiteMemoryBackend
from tests.memory.conftest import BackendFactory
from tests.memory.hybrid_helpers import FakeEmbedder
from tests.memory.test_contract import *  # noqa: F403  (the same tests, this module's fixture)


@pytest.fixture
async def make_backend(tmp_path: Path, clock: FakeClock) -> AsyncIterator[BackendFactory]:
    """Opens hybrid SQLite stores (fake embedder); closes them afterwards."""
    opened: list[SQLiteMemoryBackend] = []

    async def make(label: str = "main") -> MemoryBackend:
        directory = tmp_path / label
        directory.mkdir(exist_ok=True)
        backend = await SQLiteMemoryBackend.open(directory / "memory.db", clock=clock,
                                                 embedder=FakeEmbedder())
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        await backend.close()


@pytest.mark.skip(reason="hybrid recall drops the second, identical text as a near-duplicate,"
                  " by design; test_hybrid_recall checks recency ordering on distinct texts")
async def test_recent_beats_old_for_decaying_types() -> None:
    """Skipped here: two memories with identical text are one result under hybrid recall."""
