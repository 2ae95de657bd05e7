"""`memoryd distill --since`: sessions saved before distillation was turned on, costed
first (`--dry-run`), then sent, as a user runs it (no daemon: from the command itself)."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import daemon_env, memoryd_command, write_config

from tests.distill.fake_model import FakeModel, serve
from tests.distill.test_distill_daemon import answer_ports
from tests.integration.test_agents import PROJECT, claude_line


@pytest.fixture
def model() -> Any:
    with serve() as server:
        server.default = answer_ports
        yield server


def test_distill_costs_first_then_sends_older_sessions(tmp_path: Path,
                                                        model: FakeModel) -> None:
    root = tmp_path / "claude"
    project = root / "-home-user-payments-api"
    project.mkdir(parents=True)
    now = datetime.now(UTC)
    for n, age in enumerate((timedelta(days=3), timedelta(days=3), timedelta(days=40))):
        session = f"01d5e551-0000-4000-8000-{n:012d}"
        (project / f"{session}.jsonl").write_text(
            claude_line(session, f"{session}-u", "user",
                        f"Service s{n} listens on port {9000 + n}.", now - age)
            + claude_line(session, f"{session}-a", "assistant", "Noted.",
                          now - age + timedelta(seconds=3)))
    env = {**daemon_env(tmp_path), "HOME": str(tmp_path / "home")}
    off = write_config(tmp_path / "off.yaml", tmp_path / "state", {"claude": root},
                       memory={"embeddings": {"provider": "none"}})
    on = write_config(tmp_path / "on.yaml", tmp_path / "state", {"claude": root},
                      memory={"embeddings": {"provider": "none"},
                              "llm": {"provider": "openai", "base_url": model.url + "/v1",
                                      "model": "small-model", "per_minute": 600}})

    def memoryd(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    memoryd(off, "ingest")
    memoryd(off, "sync")
    refused = subprocess.run(memoryd_command("--config", str(off), "distill", "--since", "30d"),
                             env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 78 and "distillation is off" in refused.stderr

    dry = memoryd(on, "distill", "--since", "30d", "--dry-run")
    assert re.search(r"^2 segments of 2 sessions \(4 messages\) to send to openai small-model:"
                     r" at most about [\d,]+ tokens", dry.stdout), dry.stdout
    assert model.requests == []

    sent = memoryd(on, "distill", "--since", "30d")
    assert "2 observations stored" in sent.stdout, sent.stdout
    assert len(model.requests) == 2
    found = memoryd(on, "recall", "service port", "--type", "observation", "--project",
                    PROJECT, "--json")
    contents = sorted(r["content"] for r in json.loads(found.stdout))
    # The session 40 days old was not asked for.
    assert contents == ["Service s0 listens on port 9000.", "Service s1 listens on port 9001."]

    again = memoryd(on, "distill", "--since", "30d")
    assert again.stdout.startswith("0 segments of 0 sessions")
    assert "messages sent before are left out" in again.stdout
    assert len(model.requests) == 2
