"""Memory backend fixtures: every contract test runs against each backend listed here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from memoryd.clock import FakeClock
from memoryd.memory import MemoryBackend, SQLiteMemoryBackend

BackendFactory = Callable[[str], Awaitable[MemoryBackend]]


async def _sqlite(path: Path, clock: FakeClock) -> MemoryBackend:
    return await SQLiteMemoryBackend.open(path / "memory.db", clock=clock)


async def _postgres(path: Path, clock: FakeClock) -> MemoryBackend:
    from memoryd.memory.backends.postgres import Owner, PostgresMemoryBackend
    from tests.pg import new_database

    return await PostgresMemoryBackend.open(
        new_database(), owner=Owner(user="tester", origin="origin-a"), clock=clock)


async def _jsonl(path: Path, clock: FakeClock) -> MemoryBackend:
    from memoryd.memory.backends.jsonl import JsonlMemoryBackend

    return await JsonlMemoryBackend.open(path / "memory-jsonl", clock=clock)


# (id, opener taking a private directory and the clock): every contract test runs on each.
BACKENDS: list[tuple[str, Callable[[Path, FakeClock], Awaitable[MemoryBackend]]]] = [
    ("sqlite", _sqlite),
    ("postgres", _postgres),
    ("jsonl", _jsonl),
]


@pytest.fixture
def clock() -> FakeClock:
    """A clock that starts at 2026-01-01T00:00Z and moves only when told."""
    return FakeClock()


@pytest.fixture(params=[opener for _, opener in BACKENDS], ids=[name for name, _ in BACKENDS])
async def make_backend(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[BackendFactory]:
    """Opens fresh, independent stores of the backend under test; closes them afterwards."""
    opener: Callable[[Path, FakeClock], Awaitable[MemoryBackend]] = request.param
    opened: list[MemoryBackend] = []

    async def make(label: str = "main") -> MemoryBackend:
        directory = tmp_path / label
        directory.mkdir(exist_ok=True)
        backend = await opener(directory, clock)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        await backend.close()


@pytest.fixture
async def backend(make_backend: BackendFactory) -> MemoryBackend:
    """One fresh store of the backend under test."""
    return await make_backend("main")
