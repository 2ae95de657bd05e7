"""The Memory Gateway backend against a real HTTP server on 127.0.0.1 (tests/memory/
fake_gateway.py): what is sent, what is kept, and every way the gateway can fail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from memoryd.clock import FakeClock
from memoryd.errors import BackendError, BackendOutcomeUnknown, BackendUnavailable
from memoryd.memory import ConversationSegment, MemoryBackend, SQLiteMemoryBackend
from memoryd.memory.backends.gateway import DOWN_FOR, GatewayConfig, GatewayMemoryBackend
from memoryd.memory.chain import ChainBackend
from memoryd.memory.layers import Layer
from memoryd.memory.models import Turn
from memoryd.memory.outbox import Outbox
from memoryd.memory.protocol import Capability
from memoryd.memory.recall.context import build_context
from tests.memory.fake_gateway import KEY, FakeGateway

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
ALL = frozenset(Capability) - {Capability.VECTORS}


def segment(last: int, *, first: int = 0) -> ConversationSegment:
    turns = tuple(Turn(i, "user" if i % 2 == 0 else "assistant", f"turn {i} about the cache",
                       START + timedelta(seconds=i)) for i in range(first, last + 1))
    text = "\n".join([f"{t.role}: {t.text}" for t in turns] + ["tool result: 42 rows"])
    return ConversationSegment(source="claude", session_id=3, session_external_id="sess-3",
                               project="/p", first_index=first, last_index=last, text=text,
                               started_at=START, ended_at=START + timedelta(minutes=1),
                               turns=turns)


async def gateway_then_sqlite(fake: FakeGateway, tmp_path: Path,
                              clock: FakeClock) -> ChainBackend:
    """The chain `[gateway, sqlite]` with its outbox, as the daemon opens it."""

    async def gw() -> MemoryBackend:
        return await open_gateway(fake, tmp_path, clock)

    async def sqlite() -> MemoryBackend:
        return await SQLiteMemoryBackend.open(tmp_path / "memory.db", clock=clock)

    return ChainBackend([Layer("gateway", gw, clock), Layer("sqlite", sqlite, clock)],
                        await Outbox.open(tmp_path / "outbox.db", clock=clock), clock,
                        {"gateway": GatewayMemoryBackend.capabilities, "sqlite": ALL})


@pytest.fixture
async def gateway() -> AsyncIterator[FakeGateway]:
    fake = FakeGateway()
    await fake.start()
    yield fake
    await fake.stop()


async def open_gateway(fake: FakeGateway, tmp_path: Path, clock: FakeClock, *,
                       key: str = KEY) -> GatewayMemoryBackend:
    return await GatewayMemoryBackend.open(
        GatewayConfig(base_url=fake.url, user_id="alice", user_key=key, timeout=1.0),
        ledger=tmp_path / "gateway.db", clock=clock)


async def test_a_segment_is_one_add_of_words_then_one_flush_and_never_sent_twice(
        gateway: FakeGateway, tmp_path: Path) -> None:
    backend = await open_gateway(gateway, tmp_path, FakeClock())
    try:
        assert (await backend.save_conversation_segment(segment(3))).created
        (add,) = gateway.adds
        assert add["session_id"] == "chat:3" and add["user_id"] == "alice"
        assert (add["app_id"], add["project_id"]) == ("default", "default")
        assert [m["content"] for m in add["messages"]] == [f"turn {i} about the cache"
                                                           for i in range(4)]
        assert [m["role"] for m in add["messages"]] == ["user", "assistant"] * 2
        stamps = [m["timestamp"] for m in add["messages"]]
        assert stamps[0] == int(START.timestamp() * 1000) and stamps == sorted(set(stamps))
        assert [f["session_id"] for f in gateway.flushes] == ["chat:3"]
        # Saved again (a retry, a crash before the sync index moved): nothing is sent.
        assert not (await backend.save_conversation_segment(segment(3))).created
        # A longer save of the same tail sends only the messages the gateway has not had.
        assert (await backend.save_conversation_segment(segment(6))).created
        assert [m["content"][:6] for m in gateway.adds[1]["messages"]] == [
            "turn 4", "turn 5", "turn 6"]
        assert len(gateway.flushes) == 2
    finally:
        await backend.close()


async def test_recall_keeps_only_the_known_fields_and_labels_the_text_untrusted(
        gateway: FakeGateway, tmp_path: Path) -> None:
    gateway.results = [
        {"id": "m1", "session_id": "chat:9", "text": "the cache is warmed at boot",
         "score": 0.83, "source_scope": "all_user_memory", "resource_uri": None,
         "raw": {"secret": "internal"}},
        {"text": "no id: dropped"}, "not an object",
    ]
    backend = await open_gateway(gateway, tmp_path, FakeClock())
    try:
        (hit,) = await backend.recall("cache", limit=5)
        assert (hit.memory_id, hit.content, hit.score) == ("m1", "the cache is warmed at boot",
                                                           0.83)
        assert hit.layer == "gateway" and "internal" not in repr(hit)
        (search,) = gateway.searches
        assert search["scope"] == ["all_user_memory"] and search["top_k"] == 5
        block = build_context([hit], 500).text
        assert "untrusted reference data" in block
        assert await backend.recall("cache", since=START) == []  # no time filters: no answer
    finally:
        await backend.close()


async def test_failures_are_typed_and_never_show_the_key(gateway: FakeGateway,
                                                         tmp_path: Path) -> None:
    clock = FakeClock()
    with capture_logs() as logs:
        refused = await open_gateway(gateway, tmp_path, clock, key="wrong-" + KEY)
        with pytest.raises(BackendError, match="HTTP 401") as caught:
            await refused.save_conversation_segment(segment(2))
        assert not isinstance(caught.value, BackendUnavailable)
        assert gateway.flushes == []  # no flush after a failed add
        await refused.close()
        backend = await open_gateway(gateway, tmp_path, clock)
        gateway.fail_with = 503
        with pytest.raises(BackendUnavailable, match="HTTP 503"):
            await backend.recall("cache")
        assert not await backend.is_available()
        clock.advance(DOWN_FOR + 1)
        assert await backend.is_available()
        gateway.fail_with = None
        gateway.malformed = "<html>oops"
        with pytest.raises(BackendUnavailable, match="not JSON"):
            await backend.recall("cache")
        gateway.malformed = '{"data": []}'
        with pytest.raises(BackendUnavailable, match="no top-level results"):
            await backend.recall("cache")
        gateway.malformed = None
        gateway.delay = 2.0
        with pytest.raises(BackendUnavailable, match="timed out"):
            await backend.recall("cache")
        await backend.close()
    text = repr(logs) + str(caught.value) + repr(GatewayConfig("http://x", "a", KEY))
    assert KEY not in text


async def test_an_add_whose_answer_is_lost_is_parked_never_resent(gateway: FakeGateway,
                                                                  tmp_path: Path) -> None:
    """Applied, then the connection dropped: the chain keeps the segment in its fallback,
    parks it in the outbox, and never sends it again by itself; a person resolves it."""
    clock = FakeClock()

    chain = await gateway_then_sqlite(gateway, tmp_path, clock)
    try:
        gateway.lose_answer_after_add = True
        lost = segment(3)
        assert (await chain.save_conversation_segment(lost)).created  # in SQLite meanwhile
        assert len(gateway.adds) == 1 and gateway.flushes == []
        (depth,) = await chain.depth()
        assert (depth.waiting, depth.parked) == (0, 1)
        for _ in range(3):
            await chain.drain()
            with pytest.raises(BackendOutcomeUnknown):
                await (await chain.primary.get()).save_conversation_segment(segment(5))
        assert len(gateway.adds) == 1  # never resent by itself
        # The person checked the gateway: it has the add. Later messages flow again.
        assert await chain.resolve_parked(applied=True) == 1
        assert await chain.depth() == []
        await chain.save_conversation_segment(segment(5))
        assert [m["content"][:6] for m in gateway.adds[1]["messages"]] == ["turn 4", "turn 5"]
    finally:
        await chain.close()


async def test_a_gateway_that_is_down_then_back_gets_each_segment_once(
        gateway: FakeGateway, tmp_path: Path) -> None:
    clock = FakeClock()

    chain = await gateway_then_sqlite(gateway, tmp_path, clock)
    try:
        gateway.fail_with = 503  # refused, not applied (a 502/504 on an add is "unknown")
        await chain.save_conversation_segment(segment(3))
        fact = await chain.remember("the gateway keeps no single facts")  # straight to sqlite
        assert [r.layer for r in await chain.recall("single facts")] == ["sqlite"]
        gateway.fail_with = None
        clock.advance(DOWN_FOR + 1)
        assert await chain.drain() == 1
        assert await chain.drain() == 0
        assert len(gateway.adds) == 1 and len(gateway.flushes) == 1
        assert chain.cannot(Capability.FORGET) == ["gateway"]
        assert await chain.forget(fact.id)
    finally:
        await chain.close()


async def test_recall_behind_a_gateway_also_finds_the_facts_kept_locally(
        gateway: FakeGateway, tmp_path: Path) -> None:
    """The gateway keeps conversation only; facts live in SQLite. Recall asks both and says
    which layer gave each result."""
    clock = FakeClock()

    chain = await gateway_then_sqlite(gateway, tmp_path, clock)
    try:
        fact = await chain.remember("the cache is flushed every night")
        gateway.results = [{"id": "g1", "text": "we talked about the cache at length",
                            "score": 0.4}]
        found = {(r.memory_id, r.layer) for r in await chain.recall("cache")}
        assert found == {("g1", "gateway"), (fact.id, "sqlite")}
    finally:
        await chain.close()


async def test_an_add_answered_by_a_proxy_error_or_cancelled_is_never_resent(
        gateway: FakeGateway, tmp_path: Path) -> None:
    """502/504 may come from a proxy after the gateway applied the add, and a request cut off
    by cancellation may have arrived: both stay pending, never sent again by themselves."""
    import asyncio

    backend = await open_gateway(gateway, tmp_path, FakeClock())
    try:
        gateway.fail_with = 502
        with pytest.raises(BackendOutcomeUnknown):
            await backend.save_conversation_segment(segment(3))
        assert [s for _, s in await backend.unknown()] == [segment(3).id]
        assert await backend.resolve_unknown(applied=False) == 1
        gateway.fail_with = None
        gateway.delay = 5.0
        task = asyncio.create_task(backend.save_conversation_segment(segment(3)))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gateway.delay = 0.0
        with pytest.raises(BackendOutcomeUnknown):
            await backend.save_conversation_segment(segment(4))
    finally:
        await backend.close()


async def test_every_call_is_an_audit_row_shown_by_memoryd_audit_never_the_key(
        gateway: FakeGateway, tmp_path: Path) -> None:
    """Recall, add and flush, succeeded or failed, are rows of the ledger's audit table;
    `memoryd audit` shows them beside the daemon's own events; they expire with them."""
    import asyncio
    import json
    import subprocess

    from memoryd.memory.backends.gateway import call_events, expire_calls
    from tests.helpers import daemon_env, memoryd_command, write_config

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    clock = FakeClock(START)
    backend = await open_gateway(gateway, state, clock)
    try:
        gateway.results = [{"id": "m1", "session_id": "chat:9", "text": "cache at boot",
                            "score": 0.8}]
        await backend.recall("cache")
        await backend.save_conversation_segment(segment(3))
        gateway.fail_with = 503
        with pytest.raises(BackendUnavailable):
            await backend.save_conversation_segment(segment(5))
        clock.advance(DOWN_FOR + 1)
        gateway.fail_with = None
        gateway.lose_answer_after_add = True
        with pytest.raises(BackendOutcomeUnknown):
            await backend.save_conversation_segment(segment(5))
    finally:
        await backend.close()
    calls = await call_events(state / "gateway.db")
    assert [(c["operation"], c["outcome"], c["status"], c["count"], c["session"])
            for c in calls] == [
        ("search", "ok", 200, 1, None), ("add", "ok", 200, 4, "chat:3"),
        ("flush", "ok", 200, None, "chat:3"), ("add", "failed", 503, 2, "chat:3"),
        ("add", "unknown", None, 2, "chat:3")]

    config = write_config(tmp_path / "c.yaml", state, {})
    env = daemon_env(tmp_path)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                              capture_output=True, text=True, timeout=60)

    done = await asyncio.to_thread(cli, "audit", "--json")
    assert done.returncode == 0, done.stderr
    shown = [(e["interface"], e["action"], e["outcome"]) for e in json.loads(done.stdout)]
    assert shown == [("gateway", "gateway_search", "ok"), ("gateway", "gateway_add", "ok"),
                     ("gateway", "gateway_flush", "ok"), ("gateway", "gateway_add", "failed"),
                     ("gateway", "gateway_add", "unknown")]
    text = (await asyncio.to_thread(cli, "audit")).stdout
    assert "HTTP 503" in text and "cache" not in text and "turn" not in text
    ledger_bytes = (state / "gateway.db").read_bytes()
    assert KEY not in done.stdout + text and KEY.encode() not in ledger_bytes
    # Expired with the audit trail's retention: rows older than the cut go.
    assert await expire_calls(state / "gateway.db", START + timedelta(seconds=1)) == 4
    assert [c["outcome"] for c in await call_events(state / "gateway.db")] == ["unknown"]
