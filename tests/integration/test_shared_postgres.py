"""Two memoryds (two state directories stand for two machines) syncing into one PostgreSQL:
no segment twice, each recalls the other's memories, corrections and forgetting apply to both."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers import daemon_env, memoryd_command, write_config

from tests.pg import new_database


def _session(root: Path, name: str, words: str) -> None:
    project = root / "-work-app"
    project.mkdir(parents=True, exist_ok=True)
    lines = [{"type": "user", "uuid": f"{name}-{i}", "sessionId": name, "cwd": "/work/app",
              "timestamp": f"2026-01-0{i + 1}T10:00:00Z",
              "message": {"role": "user", "content": f"{words} (note {i})"}} for i in range(3)]
    (project / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_two_machines_share_one_database(tmp_path: Path) -> None:
    dsn = new_database()
    machines = {}
    for name, words in (("laptop", "the laptop decided on blue green deployments"),
                        ("desktop", "the desktop picked postgres for the billing ledger")):
        root = tmp_path / name / "claude"
        _session(root, f"{name}-session", words)
        config = write_config(tmp_path / name / "c.yaml", tmp_path / name / "state",
                              {"claude": root}, memory={"backends": ["postgres"]})
        env = daemon_env(tmp_path / name)
        env["MEMORYD_POSTGRES_DSN"] = dsn
        machines[name] = (config, env)

    def cli(name: str, *args: str) -> subprocess.CompletedProcess[str]:
        config, env = machines[name]
        return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                              capture_output=True, text=True, timeout=120)

    for name in machines:
        for _ in range(2):  # a second sync saves nothing twice
            assert cli(name, "ingest", "--once").returncode == 0
            synced = cli(name, "sync")
            assert synced.returncode == 0, synced.stderr
    exported = [json.loads(line) for line in cli("laptop", "export").stdout.splitlines()]
    covered = sorted((r["provenance"]["session_external_id"], i) for r in exported
                     if r["type"] == "conversation"
                     for i in range(r["provenance"]["first_index"],
                                    r["provenance"]["last_index"] + 1))
    assert sorted(r["provenance"]["session_external_id"] for r in exported
                  if r["type"] == "session_digest") == ["desktop-session", "laptop-session"]
    assert covered == [(f"{name}-session", i) for name in ("desktop", "laptop")
                       for i in range(3)]
    (hit, *_) = json.loads(cli("laptop", "recall", "billing ledger", "--json").stdout)
    assert "desktop" in hit["content"] and hit["layer"] == "postgres"
    (hit, *_) = json.loads(cli("desktop", "recall", "blue green", "--json").stdout)
    assert "laptop" in hit["content"]
    fact = json.loads(cli("laptop", "remember", "the release train leaves on tuesdays",
                          "--json").stdout)["id"]
    fixed = cli("desktop", "correct", fact, "the release train leaves on thursdays")
    assert fixed.returncode == 0, fixed.stderr
    (hit, *_) = json.loads(cli("laptop", "recall", "release train", "--json").stdout)
    assert "thursdays" in hit["content"]
    assert cli("desktop", "forget", "--session", "laptop-session").returncode == 0
    assert json.loads(cli("laptop", "recall", "blue green", "--json").stdout) == []
    # Forgetting sticks on the other machine too: its later sync does not bring it back.
    assert cli("laptop", "sync").returncode == 0
    assert json.loads(cli("laptop", "recall", "blue green", "--json").stdout) == []
