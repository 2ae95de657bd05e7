"""The memory backend contract, again, on PostgreSQL opened with an embedder: hybrid recall
over chunks, as the daemon opens it, before the background job has added vectors (exact result
sets, which the contract asserts, are not what vector search gives; test_postgres checks the
vector channel through pgvector)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memoryd.clock import FakeClock
from memoryd.memory import MemoryBackend
from tests.memory.conftest import BackendFactory
from tests.memory.hybrid_helpers import FakeEmbedder
from tests.memory.test_contract import *  # noqa: F403  (the same tests, this module's fixture)


@pytest.fixture
async def make_backend(tmp_path: Path, clock: FakeClock) -> AsyncIterator[BackendFactory]:
    from memoryd.memory.backends.postgres import Owner, PostgresMemoryBackend
    from tests.pg import new_database

    opened: list[PostgresMemoryBackend] = []

    async def make(label: str = "main") -> MemoryBackend:
        backend = await PostgresMemoryBackend.open(
            new_database(), owner=Owner(user="tester", origin="origin-a"), clock=clock,
            embedder=FakeEmbedder())
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        await backend.close()
