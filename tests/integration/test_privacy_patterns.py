"""`privacy.extra_patterns` through the real CLI: masked in every memory write (remember,
segments from a transcript, corrections, imports), in recall and export, and in logs; a bad
pattern is a configuration error naming the setting."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers import daemon_env, memoryd_command, write_config

PATTERNS = [{"name": "ticket", "pattern": r"ACME-\d{6}"},
            {"name": "customer", "pattern": r"(?i)\bglobex corp\b"}]


def _cli(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          capture_output=True, text=True, timeout=120)


def test_extra_patterns_are_masked_everywhere(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    project = root / "-work-app"
    project.mkdir(parents=True)
    (project / "s1.jsonl").write_text(json.dumps({
        "type": "user", "uuid": "u1", "sessionId": "s1", "cwd": "/work/app",
        "timestamp": "2026-01-02T10:00:00Z",
        "message": {"role": "user", "content": "ACME-654321 broke the Globex Corp import"},
    }) + "\n")
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {"claude": root},
                          privacy={"extra_patterns": PATTERNS}, log_level="debug",
                          log_format="json")
    env = daemon_env(tmp_path)
    outputs = []
    done = None
    for args in (("remember", "ticket ACME-123456 is about globex corp"),
                 ("ingest", "--once"), ("sync",), ("recall", "import broke", "--json"),
                 ("export",)):
        done = _cli(config, env, *args)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    assert done is not None
    exported = [json.loads(line) for line in done.stdout.splitlines()]
    contents = " ".join(r["content"] for r in exported)
    assert "[REDACTED:ticket]" in contents and "[REDACTED:customer]" in contents
    fact = next(r for r in exported if r["type"] == "fact")
    fixed = _cli(config, env, "correct", fact["id"], "now ACME-111111 for GLOBEX CORP")
    assert fixed.returncode == 0, fixed.stderr
    outputs.append(fixed.stdout + fixed.stderr)
    record = dict(fact, id="a" * 32, content="imported ACME-222222")
    (tmp_path / "in.jsonl").write_text(json.dumps(record) + "\n")
    imported = _cli(config, env, "import", str(tmp_path / "in.jsonl"))
    assert imported.returncode == 0, imported.stderr
    final = _cli(config, env, "export")
    outputs += [imported.stdout + imported.stderr, final.stdout + final.stderr]
    everything = "\n".join(outputs)
    for leaked in ("ACME-123456", "ACME-654321", "ACME-111111", "ACME-222222"):
        assert leaked not in everything
    assert "globex corp" not in everything.lower()
    assert final.stdout.count("[REDACTED:ticket]") >= 4


def test_a_bad_pattern_is_a_configuration_error(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {},
                          privacy={"extra_patterns": [{"name": "broken", "pattern": "(["}]})
    done = _cli(config, daemon_env(tmp_path), "status")
    assert done.returncode == 78
    assert "privacy.extra_patterns" in done.stderr and "Traceback" not in done.stderr
