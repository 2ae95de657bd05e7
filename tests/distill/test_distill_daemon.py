"""Distillation in the running daemon (`memoryd run`), against a model server on
127.0.0.1: saved segments reach the model in the background, their items are recallable
through the CLI, `memoryd status` says so, and SIGKILLs at any moment neither lose nor
double an item."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

from tests.distill.fake_model import FakeModel, Reply, items_text, serve
from tests.integration.test_agents import PROJECT, claude_line, quick_daemon

PORT_LINE = re.compile(r"\[(\d+)\] user: (Service \w+ listens on port \d+)\.")


def answer_ports(body: dict[str, Any]) -> Reply:
    """The model: one fact per "Service … listens on port …" the conversation holds."""
    text = str(body["messages"][-1]["content"])
    time.sleep(0.15)  # a model takes a moment: kills land while it thinks, too
    return 200, {}, items_text(*({"type": "fact", "content": f"{found[2]}.",
                                  "evidence": [int(found[1])]}
                                 for found in PORT_LINE.finditer(text)))


def write_sessions(root: Path, count: int) -> list[str]:
    """`count` sessions of one project, each saying where one service listens."""
    project = root / "-home-dev-payments"
    project.mkdir(parents=True, exist_ok=True)
    start = datetime.now(UTC) - timedelta(hours=2)
    facts = []
    for n in range(count):
        session = f"7e57d157-0000-4000-8000-{n:012d}"
        fact = f"Service s{n} listens on port {9000 + n}"
        facts.append(fact + ".")
        (project / f"{session}.jsonl").write_text(
            claude_line(session, f"{session}-u", "user", fact + ".", start)
            + claude_line(session, f"{session}-a", "assistant", "Noted.",
                          start + timedelta(seconds=5)))
    return facts


def observations(state: Path) -> dict[str, int]:
    with sqlite3.connect(state / "memory.db") as db:
        return dict(db.execute("SELECT content, COUNT(*) FROM memories"
                               " WHERE type = 'observation' GROUP BY content").fetchall())


def queue_states(state: Path) -> dict[str, int]:
    try:
        with sqlite3.connect(state / "memoryd.db") as db:
            return dict(db.execute("SELECT state, COUNT(*) FROM distill_queue"
                                   " GROUP BY state").fetchall())
    except sqlite3.OperationalError:
        return {}


@pytest.fixture
def model() -> Any:
    with serve() as server:
        server.default = answer_ports
        yield server


def llm(model: FakeModel) -> dict[str, Any]:
    return {"embeddings": {"provider": "none"},
            "llm": {"provider": "openai", "base_url": model.url + "/v1",
                    "model": "small-model", "per_minute": 600}}


def test_the_daemon_distils_in_the_background(tmp_path: Path, model: FakeModel) -> None:
    with quick_daemon(tmp_path, sync_max_lag="1s", memory=llm(model)) as daemon:
        facts = write_sessions(daemon.claude_root, 2)
        daemon.start()
        wait_for(lambda: queue_states(daemon.state).get("done") == 2, timeout=60,
                 what="both segments distilled")
        found = daemon.cli("recall", "which port does service s1 listen on", "--type",
                           "observation", "--project", PROJECT, "--json")
        assert found.returncode == 0, found.stderr
        assert facts[1] in [r["content"] for r in json.loads(found.stdout)]
        status = daemon.cli("status")
        assert status.returncode == 0, status.stderr
        assert re.search(r"distill: openai small-model: 0 segments waiting, 2 observations"
                         r" stored .* 300 of 200,000 tokens today", status.stdout), status.stdout
        daemon.stop()
    assert len(model.requests) == 2


@pytest.mark.slow
def test_sigkill_at_any_moment_neither_loses_nor_doubles_an_item(
        tmp_path: Path, model: FakeModel) -> None:
    """Killed while the model thinks (its answer never arrives: asked again), and just
    after it answered (the answer committed or not, its items stored or not)."""
    rng = random.Random(33)
    asked, answered = threading.Event(), threading.Event()

    def answer(body: dict[str, Any]) -> Reply:
        asked.set()
        reply = answer_ports(body)
        answered.set()
        return reply

    model.default = answer
    with quick_daemon(tmp_path, sync_max_lag="1s", memory=llm(model)) as daemon:
        facts = write_sessions(daemon.claude_root, 8)
        for moment in ["thinking"] * 3 + ["answered"] * 4:
            asked.clear()
            answered.clear()
            daemon.start()
            wait_for((asked if moment == "thinking" else answered).is_set, timeout=60,
                     what=f"the model {moment}")
            if moment == "answered":
                time.sleep(rng.uniform(0.0, 0.03))
            daemon.kill()
        daemon.start()
        wait_for(lambda: queue_states(daemon.state) == {"done": 8}, timeout=120,
                 what="every segment distilled")
        daemon.stop()
    assert observations(daemon.state) == {fact: 1 for fact in facts}
    # The three answers the kills cut off were asked for again.
    assert len(model.requests) >= 8 + 3


def test_a_model_that_is_down_holds_up_nothing_else(tmp_path: Path, model: FakeModel) -> None:
    """Every call answered 503: segments are still saved and recalled, a session's start
    hook still answers at once, the queue waits, and `memoryd status` says why."""
    model.default = lambda _body: (503, {}, {"error": "overloaded"})
    with quick_daemon(tmp_path, sync_max_lag="1s", memory=llm(model)) as daemon:
        write_sessions(daemon.claude_root, 2)
        daemon.start()
        wait_for(lambda: len(model.requests) >= 3, timeout=60, what="the model asked")
        found = daemon.api("recall", {"query": "service s1 port", "project": PROJECT}).json()
        assert any("9001" in r["content"] for r in found["results"])
        began = time.monotonic()
        started = daemon.hook("claude", "SessionStart", {
            "session_id": "new", "cwd": PROJECT, "hook_event_name": "SessionStart",
            "source": "startup"}, timeout=5)
        assert started.returncode == 0 and time.monotonic() - began < 5
        assert "9001" in started.stdout
        status = daemon.cli("status")
        assert re.search(r"distill: openai small-model: 2 segments waiting, 0 observations"
                         r" stored .*; last error: openai: http://127\.0\.0\.1:\d+/v1/chat/"
                         r"completions: HTTP 503", status.stdout), status.stdout
        daemon.stop()
    assert queue_states(daemon.state) == {"pending": 2}
    # Three tries, then a back-off of 30 s and more: not three calls every few seconds.
    assert 3 <= len(model.requests) <= 6
