"""The layers through the real CLI: `memory copy` into PostgreSQL and JSONL (idempotent,
deletions kept), `status`/`doctor` naming each layer and never the connection string's
password, `memory outbox` while the primary is away."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers import daemon_env, memoryd_command, write_config

from tests.pg import new_database

PASSWORD = "pg-Secret-9876"


def _with_password(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = conninfo_to_dict(dsn)
    return make_conninfo(dsn, password=PASSWORD, user=str(parts.get("user") or "postgres"))


def _cli(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args), env=env,
                          capture_output=True, text=True, timeout=120)


def test_copy_to_postgres_and_jsonl_is_idempotent_and_keeps_deletions(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {})
    env = daemon_env(tmp_path)
    env["MEMORYD_POSTGRES_DSN"] = _with_password(new_database())
    ids = []
    for text in ("the deploy runs at noon", "the cache holds 512 entries",
                 "an old note to forget", "a secret to erase"):
        done = _cli(config, env, "remember", text, "--json")
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["id"])
    assert _cli(config, env, "correct", ids[1], "the cache holds 1024 entries").returncode == 0
    assert _cli(config, env, "forget", ids[2]).returncode == 0
    assert _cli(config, env, "forget", ids[3], "--hard").returncode == 0
    # A forgotten session: nothing of it is stored yet, and nothing of it ever may be.
    assert _cli(config, env, "forget", "--session", "sess-forgotten").returncode == 0
    before = _cli(config, env, "export")
    assert before.returncode == 0, before.stderr
    record = next(r for r in map(json.loads, before.stdout.splitlines()) if r["id"] == ids[0])
    record["id"] = "m-from-the-forgotten-session"
    record["provenance"]["session_external_id"] = "sess-forgotten"
    late = tmp_path / "late.jsonl"
    late.write_text(json.dumps(record) + "\n")

    for target in ("postgres", "jsonl"):
        first = _cli(config, env, "memory", "copy", "--to", target)
        assert first.returncode == 0, first.stderr
        # Two deletion records and the forgotten session.
        assert "copied 3 memories (0 already there) and 3 deletion records" in first.stdout
        again = _cli(config, env, "memory", "copy", "--to", target)
        assert "copied 0 memories (3 already there) and 0 deletion records" in again.stdout
        assert PASSWORD not in first.stdout + first.stderr + again.stdout + again.stderr

    # The copies answer as the original did: same records, and recall finds the correction.
    for backends in (["postgres"], ["jsonl"]):
        other = write_config(tmp_path / f"{backends[0]}.yaml", state, {},
                             memory={"backends": [*backends, "sqlite"]})
        exported = _cli(other, env, "export")
        assert exported.returncode == 0, exported.stderr
        assert exported.stdout == before.stdout
        recalled = _cli(other, env, "recall", "cache entries", "--json")
        (hit, *_) = json.loads(recalled.stdout)
        assert "1024" in hit["content"] and hit["layer"] == backends[0]
        # The forgotten session stays forgotten in the copy: an import never brings it in.
        imported = _cli(other, env, "import", str(late))
        assert imported.returncode == 0, imported.stderr
        assert "imported 0 new memories" in imported.stdout


def test_status_and_doctor_name_each_layer_and_never_the_password(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {},
                          memory={"backends": ["postgres", "sqlite", "jsonl"],
                                  "postgres": {"connect_timeout": 1}})
    env = daemon_env(tmp_path)
    env["MEMORYD_POSTGRES_DSN"] = _with_password(new_database())
    remembered = _cli(config, env, "remember", "status shows every layer")
    assert remembered.returncode == 0, remembered.stderr
    status = _cli(config, env, "status", "--json")
    assert status.returncode == 0, status.stderr
    layers = json.loads(status.stdout)["memory"]["layers"]
    assert [(layer["backend"], layer["available"]) for layer in layers] == [
        ("postgres", True), ("sqlite", True), ("jsonl", True)]
    doctor = _cli(config, env, "doctor")
    assert "memory layer postgres (primary)" in doctor.stdout, doctor.stdout
    assert "outbox" in doctor.stdout
    # Unreachable: the address is shown, the password never.
    env["MEMORYD_POSTGRES_DSN"] = f"postgresql://bob:{PASSWORD}@127.0.0.1:1/memory"
    down = _cli(config, env, "status", "--json")
    memory = json.loads(down.stdout)["memory"]
    assert memory["layers"][0]["available"] is False
    assert memory["layers"][0]["where"] == "127.0.0.1:1/memory"
    saved = _cli(config, env, "remember", "saved while postgres is away")
    assert saved.returncode == 0, saved.stderr
    outbox = _cli(config, env, "memory", "outbox", "--json")
    assert json.loads(outbox.stdout)["depth"][0]["waiting"] == 1, outbox.stdout
    doctor = _cli(config, env, "doctor")
    for text in (down.stdout, down.stderr, saved.stderr, outbox.stdout, doctor.stdout,
                 doctor.stderr, status.stdout):
        assert PASSWORD not in text


def test_forget_and_correct_say_the_gateway_keeps_its_copy(tmp_path: Path) -> None:
    """With the gateway first, single facts go to SQLite; forgetting and correcting act there
    and say that the gateway, which can do neither, keeps its copy."""
    state = tmp_path / "state"
    config = write_config(tmp_path / "c.yaml", state, {},
                          memory={"backends": ["gateway", "sqlite"],
                                  "gateway": {"base_url": "http://127.0.0.1:1",
                                              "timeout": "1s"}})
    env = daemon_env(tmp_path)
    env["MEMORYD_GATEWAY_KEY"] = "gw-key-not-shown"
    made = _cli(config, env, "remember", "the gateway keeps no single facts", "--json")
    assert made.returncode == 0, made.stderr
    memory_id = json.loads(made.stdout)["id"]
    fixed = _cli(config, env, "correct", memory_id, "the gateway keeps conversations only")
    assert fixed.returncode == 0, fixed.stderr
    assert "the gateway layer cannot correct; its copy remains" in fixed.stderr
    new_id = fixed.stdout.split()[-1]
    gone = _cli(config, env, "forget", new_id)
    assert gone.returncode == 0, gone.stderr
    assert "the gateway layer cannot forget; its copy remains" in gone.stderr
    for done in (made, fixed, gone):
        assert "gw-key-not-shown" not in done.stdout + done.stderr
