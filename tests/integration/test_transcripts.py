"""The raw archive's lifecycle through the real CLI (issue 16.6): archive, mask and
delete-raw by session, project or age, each with a report listing the memories derived
from the sessions (never deleting them) and an audit record; a legal hold keeps its
sessions as they are; `show --view` gives masked views for a person, a model and export."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

from helpers import daemon_env, memoryd_command, write_config

KEY = "sk-ant-api03-" + "Q" * 40
MAIL = "dana.scully@example.org"


def _cli(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          capture_output=True, text=True, timeout=120)


def _session(root: Path, name: str, cwd: str, day: str) -> None:
    project = root / cwd.replace("/", "-")
    project.mkdir(parents=True, exist_ok=True)
    (project / f"{name}.jsonl").write_text("".join(json.dumps({
        "type": kind, "uuid": f"{name}-{i}", "sessionId": name, "cwd": cwd,
        "timestamp": f"{day}T10:0{i}:00Z",
        "message": {"role": kind, "content": f"{name} note {i}: write to {MAIL}"}})
        + "\n" for i, kind in enumerate(["user", "assistant"])))


def _set_up(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    root = tmp_path / "claude"
    _session(root, "s-old", "/work/app", "2025-01-10")
    _session(root, "s-new", "/work/app", "2026-11-20")
    _session(root, "s-other", "/work/lib", "2025-02-01")
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {"claude": root})
    env = daemon_env(tmp_path)
    for args in (("ingest", "--once"), ("sync",)):
        assert _cli(config, env, *args).returncode == 0
    return config, env, state


def _raw_contents(config: Path, env: dict[str, str], session: str) -> str:
    done = _cli(config, env, "show", session, "--view", "raw", "--json")
    assert done.returncode == 0, done.stderr
    return " ".join(m["content"] for m in json.loads(done.stdout)["messages"])


def test_views_mask_what_a_person_or_a_model_sees(tmp_path: Path) -> None:
    config, env, _state = _set_up(tmp_path)
    assert MAIL in _raw_contents(config, env, "s-old")
    person = _cli(config, env, "show", "s-old")
    assert "[REDACTED:email]" in person.stdout and MAIL not in person.stdout
    model = _cli(config, env, "show", "s-old", "--view", "model").stdout.splitlines()
    assert model == ["user: s-old note 0: write to [REDACTED:email]",
                     "assistant: s-old note 1: write to [REDACTED:email]"]
    exported = [json.loads(line) for line in
                _cli(config, env, "show", "s-old", "--view", "export").stdout.splitlines()]
    assert [e["message_index"] for e in exported] == [0, 1]
    assert all(MAIL not in e["content"] for e in exported)
    as_json = _cli(config, env, "show", "s-old", "--json").stdout
    assert MAIL not in as_json


def test_archive_mask_and_delete_raw_report_and_keep_memories(tmp_path: Path) -> None:
    config, env, state = _set_up(tmp_path)
    # Archive everything quiet for over a year: the two old sessions, as gzip files.
    done = _cli(config, env, "transcripts", "archive", "--older-than", "365d", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["sessions"], report["messages"]) == (2, 4)
    for path in map(Path, report["files"]):
        assert path.is_relative_to(state / "archive") and path.stat().st_mode & 0o777 == 0o600
        lines = gzip.decompress(path.read_bytes()).decode().splitlines()
        assert [json.loads(line)["sessionId"] for line in lines] == [path.name.split(".")[0]] * 2
    assert len(report["memory_ids"]) == 4  # one segment and one digest each, listed

    # Mask the project's sessions in place; the raw lines stay valid JSON.
    masked = _cli(config, env, "transcripts", "mask", "--project", "/work/app")
    assert masked.returncode == 0, masked.stderr
    assert "masked 4 messages in 2 sessions" in masked.stdout
    assert MAIL not in _raw_contents(config, env, "s-new")
    assert MAIL in _raw_contents(config, env, "s-other")

    # A hold keeps its session; delete-raw clears the rest, memory keeps its copies.
    assert _cli(config, env, "hold", "add", "--session", "s-other").returncode == 0
    cleared = _cli(config, env, "transcripts", "delete-raw", "--older-than", "365d",
                   "--json")
    assert cleared.returncode == 0, cleared.stderr
    report = json.loads(cleared.stdout)
    assert (report["sessions"], report["held"], report["messages"]) == (2, 1, 2)
    assert "s-old note" not in _raw_contents(config, env, "s-old")
    assert MAIL in _raw_contents(config, env, "s-other")
    recalled = _cli(config, env, "recall", "s-old note", "--project", "/work/app", "--json")
    assert "s-old note" in recalled.stdout  # derived memories are listed, not deleted

    trail = [e["action"] for e in json.loads(_cli(config, env, "audit", "--json").stdout)]
    assert trail.count("transcripts") == 3
    bad = _cli(config, env, "transcripts", "mask")
    assert bad.returncode == 2 and "choose sessions" in bad.stderr
    missing = _cli(config, env, "transcripts", "mask", "--session", "nope")
    assert missing.returncode == 66
    wrong = _cli(config, env, "transcripts", "archive", "--older-than", "soon")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
