"""The Memory Gateway as the primary of a real daemon: it fails, hangs and comes back.

A test gateway (tests/memory/fake_gateway.py) runs on 127.0.0.1 in a thread; memoryd
syncs the fixture transcripts to it through `[gateway, sqlite]`. The gateway answers
503 for a while, then hangs past the client's timeout on an add it applies anyway
(the answer is lost: memoryd parks it and never resends it by itself), then a person
says it arrived (`memoryd memory outbox --applied`). Afterwards every turn of every
session reached the gateway exactly once, and nothing waits in the outbox.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (
    daemon_env,
    lay_out_fixtures,
    memoryd_command,
    unsynced_messages,
    wait_for,
    wait_ready,
    write_config,
)

from tests.memory.fake_gateway import KEY, FakeGateway

pytestmark = pytest.mark.slow


@pytest.fixture
def gateway() -> Iterator[FakeGateway]:
    fake = FakeGateway()
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(fake.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield fake
    asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _outbox(state: Path) -> tuple[int, int]:
    path = state / "outbox.db"
    if not path.exists():
        return 0, 0
    conn = sqlite3.connect(path, timeout=30)
    try:
        row = conn.execute("SELECT COALESCE(SUM(parked = 0), 0), COALESCE(SUM(parked = 1), 0)"
                           " FROM outbox").fetchone()
        return int(row[0]), int(row[1])
    except sqlite3.OperationalError:
        return 0, 0
    finally:
        conn.close()




def _expected_turns(db: Path) -> Counter[tuple[str, str]]:
    """(gateway session, text) of every turn memoryd should send, from its own store."""
    import asyncio as aio

    import aiosqlite

    from memoryd.lifecycle.segments import new_copies, turns_of
    from memoryd.store.sessions import messages_from

    async def read() -> Counter[tuple[str, str]]:
        expected: Counter[tuple[str, str]] = Counter()
        async with aiosqlite.connect(db) as conn:
            async with conn.execute("SELECT id FROM sessions") as cur:
                sessions = list(await cur.fetchall())
            for (session_id,) in sessions:
                # As recovery reads them: a resumed conversation's copies are sent once.
                messages = await messages_from(conn, session_id, 0, 1_000_000,
                                               copies=new_copies())
                for turn in turns_of([m for m in messages if not m.passed_over]):
                    expected[(f"chat:{session_id}", turn.text)] += 1
        return expected

    return aio.run(read())




def test_a_gateway_that_fails_hangs_and_comes_back_gets_every_turn_once(
        tmp_path: Path, gateway: FakeGateway) -> None:
    roots = lay_out_fixtures(tmp_path / "agents")
    state = tmp_path / "state"
    config = write_config(tmp_path / "config.yaml", state, roots, poll_interval="0.2s",
                          sync_delay=0, sync_check_interval="0.1s", segment_max_chars=500,
                          memory={"backends": ["gateway", "sqlite"],
                                  "gateway": {"base_url": gateway.url, "timeout": "1s"}})
    env = daemon_env(tmp_path)
    env["MEMORYD_GATEWAY_KEY"] = KEY
    log = tmp_path / "run.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=out)
    try:
        wait_ready(state, proc.pid)
        wait_for(lambda: len(gateway.adds) > 3, 60, "nothing reached the gateway")
        gateway.fail_with = 503  # down: saves go to SQLite and wait in the outbox
        wait_for(lambda: _outbox(state)[0] > 0, 60, "nothing waited in the outbox")
        time.sleep(1.0)
        hung = len(gateway.adds)
        gateway.delay = 2.0  # hangs past the 1 s timeout, then applies the add anyway
        gateway.fail_with = None
        wait_for(lambda: _outbox(state)[1] > 0, 90, "no add was parked")
        gateway.delay = 0.0
        wait_for(lambda: len(gateway.adds) > hung, 30, "the hung add never landed")
        wait_for(lambda: unsynced_messages(state / "memoryd.db") == 0, 180, "sync did not finish")
        wait_for(lambda: _outbox(state)[0] == 0, 180, "the outbox did not drain")
        _waiting, parked = _outbox(state)
        assert parked > 0
        sent = len(gateway.adds)
        time.sleep(2.0)
        assert len(gateway.adds) == sent  # parked entries are never resent by themselves
        resolved = subprocess.run(memoryd_command("--config", str(config), "memory", "outbox",
                                                  "--applied"),
                                  env=env, capture_output=True, text=True, timeout=60)
        assert resolved.returncode == 0, resolved.stderr
        wait_for(lambda: _outbox(state) == (0, 0), 120, "the outbox did not empty")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    received: Counter[tuple[str, str]] = Counter(
        (add["session_id"], message["content"]) for add in gateway.adds
        for message in add["messages"])
    expected = _expected_turns(state / "memoryd.db")
    assert received == expected, _diff(received, expected)
    assert KEY not in log.read_text()
    assert all(json.dumps(add).count(KEY) == 1 for add in gateway.adds)  # only as user_key


def _diff(received: Counter[tuple[str, str]], expected: Counter[tuple[str, str]]) -> str:
    extra = received - expected
    missing = expected - received
    return (f"{sum(extra.values())} extra, e.g. {list(extra.items())[:3]};"
            f" {sum(missing.values())} missing, e.g. {list(missing.items())[:3]}")
