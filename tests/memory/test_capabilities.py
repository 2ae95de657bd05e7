"""Backends declare what they can do; callers ask before they call."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.api.registry import ApiError, MemoryOps
from memoryd.clock import FakeClock
from memoryd.errors import BackendUnsupported
from memoryd.memory import Capability, SQLiteMemoryBackend, require
from memoryd.store import connect, migrate
from tests.helpers import write_config
from tests.memory.hybrid_helpers import FakeEmbedder


class ForgetlessBackend(SQLiteMemoryBackend):
    """The embedded store declaring less: what a backend that cannot forget looks like."""

    @property
    def capabilities(self) -> frozenset[Capability]:
        return super().capabilities - {Capability.FORGET, Capability.CORRECT}


async def test_the_embedded_backend_declares_everything(tmp_path: Path) -> None:
    clock = FakeClock()
    async with await SQLiteMemoryBackend.open(tmp_path / "m.db", clock=clock) as backend:
        assert backend.capabilities == frozenset(Capability) - {Capability.VECTORS}
        require(backend, Capability.FORGET)
    async with await SQLiteMemoryBackend.open(tmp_path / "m.db", clock=clock,
                                              embedder=FakeEmbedder()) as backend:
        assert Capability.VECTORS in backend.capabilities


async def test_an_operation_the_backend_cannot_do_is_refused_not_pretended(
        tmp_path: Path) -> None:
    clock = FakeClock()
    from memoryd.config import load_settings

    settings = load_settings(write_config(tmp_path / "c.yaml", tmp_path / "state", {}))
    backend = await ForgetlessBackend.open(tmp_path / "m.db", clock=clock)
    conn = await connect(tmp_path / "d.db")
    try:
        await migrate(conn)
        memory = await backend.remember("kept, since this backend cannot forget")
        with pytest.raises(BackendUnsupported, match="cannot forget"):
            require(backend, Capability.FORGET)
        ops = MemoryOps(settings, clock, conn, backend, runtime=None)  # type: ignore[arg-type]
        for op, args in (("forget", {"memory_id": memory.id}),
                         ("correct", {"memory_id": memory.id, "content": "new"})):
            with pytest.raises(ApiError) as refused:
                await ops.run(op, args)
            assert refused.value.status == 501
        assert (await backend.get(memory.id)) is not None
    finally:
        await conn.close()
        await backend.close()


def test_a_gateways_declared_capabilities_are_its_own() -> None:
    """`opening.DECLARED` writes the gateway's out so its module loads only when used."""
    from memoryd.memory.backends.gateway import GatewayMemoryBackend
    from memoryd.memory.opening import DECLARED

    assert DECLARED["gateway"] == GatewayMemoryBackend.capabilities


def test_the_daemon_with_default_settings_loads_no_http_client(tmp_path: Path) -> None:
    """httpx (12 MB of the daemon's memory with what it pulls in) is for a gateway, an
    OpenAI-compatible embedder or a reranker: the default daemon's modules and its opened
    memory do without it."""
    import subprocess
    import sys

    from helpers import daemon_env

    config = write_config(tmp_path / "config.yaml", tmp_path / "state",
                          {"claude": tmp_path / "claude"})
    probe = (
        "import asyncio, sys\n"
        "import memoryd.service, memoryd.api.server, memoryd.ingest.ingester\n"
        "from memoryd.clock import SystemClock\n"
        "from memoryd.config import load_settings\n"
        "from memoryd.memory.opening import open_memory_backend\n"
        f"settings = load_settings({str(config)!r})\n"
        "async def main():\n"
        "    backend = await open_memory_backend(settings, SystemClock())\n"
        "    await backend.recall('anything')\n"
        "    await backend.close()\n"
        "asyncio.run(main())\n"
        "print('httpx' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env=daemon_env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
