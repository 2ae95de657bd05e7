"""`memoryd doctor` as a user runs it: real files, real permissions."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import daemon_env, memoryd_command, write_config


def doctor(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = daemon_env(tmp_path) | {"HOME": str(tmp_path / "home")}
    return subprocess.run(memoryd_command("--config", str(config), "doctor"), env=env,
                          capture_output=True, text=True, timeout=60)


def test_healthy_install_passes_with_warnings_only(tmp_path: Path) -> None:
    """A fresh set-up passes: missing roots and an uninstalled unit are warnings, not failures."""
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {"claude": tmp_path / "none"})
    result = doctor(tmp_path, config)
    assert result.returncode == 0, result.stdout
    assert "ok    sqlite: SQLite" in result.stdout
    # The wheel is installed by the project's own files: masking is one scan, every rule.
    scanned = re.search(r"ok    masking: hyperscan \S+: (\d+) of (\d+) patterns", result.stdout)
    assert scanned and scanned.group(1) == scanned.group(2), result.stdout
    assert "warn  source claude" in result.stdout
    assert "0 failed" in result.stdout


def test_loose_state_permissions_fail_with_a_fix(tmp_path: Path) -> None:
    """A state directory others can read fails the check, names the fix, exits non-zero."""
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    config = write_config(tmp_path / "c.yaml", state, {"claude": tmp_path})
    result = doctor(tmp_path, config)
    assert result.returncode == 1
    assert "fail  state directory" in result.stdout
    assert f"chmod 700 {state}" in result.stdout


def test_bad_config_is_reported_and_exits_78(tmp_path: Path) -> None:
    """A bad setting is shown as a failed check and the exit status is 78."""
    config = tmp_path / "c.yaml"
    config.write_text("sources: [{kind: cursor, root: /x}]\n")
    result = doctor(tmp_path, config)
    assert result.returncode == 78
    assert "fail  config" in result.stdout and "sources" in result.stdout


@pytest.mark.skipif(sys.platform != "linux", reason="checks the systemd unit path")
def test_stale_unit_is_a_failure(tmp_path: Path) -> None:
    """An installed unit that runs another executable fails until reinstalled."""
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {"claude": tmp_path})
    unit = tmp_path / "home" / ".config" / "systemd" / "user" / "memoryd.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/opt/old/memoryd run\n")
    result = doctor(tmp_path, config)
    assert result.returncode == 1
    assert "fail  service unit" in result.stdout and "memoryd service install" in result.stdout


@pytest.mark.parametrize("runtime", ["numpy", "onnx"])
def test_embeddings_check_names_the_local_runtime(tmp_path: Path, runtime: str) -> None:
    """With `local` configured, doctor says which runtime runs the model, or why none can."""
    from memoryd.memory.embeddings import bert_onnx, local

    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {"claude": tmp_path},
                          memory={"embeddings": {"provider": "local", "local_runtime": runtime}})
    result = doctor(tmp_path, config)
    line = next(x for x in result.stdout.splitlines() if x.split()[1:2] == ["embeddings:"])
    if not local.available():
        assert line.startswith("warn") and "not installed" in line
    elif runtime == "onnx" and not bert_onnx.available():
        pytest.skip("onnxruntime and onnx are not installed")
    else:
        assert line.startswith("ok") and f"all-MiniLM-L6-v2 in {runtime}" in line


def test_doctor_says_whether_hooks_answer_through_curl(tmp_path: Path) -> None:
    """With curl on PATH the hook client check is ok; without it, a warning that names the
    cost and the fix."""
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {"claude": tmp_path / "none"})
    bare = tmp_path / "bin"
    bare.mkdir()
    env = daemon_env(tmp_path) | {"HOME": str(tmp_path / "home"), "PATH": str(bare)}
    without = subprocess.run(memoryd_command("--config", str(config), "doctor"), env=env,
                             capture_output=True, text=True, timeout=60)
    assert "warn  hook client: no curl: every hook starts Python" in without.stdout
    assert "install curl" in without.stdout
    (bare / "curl").symlink_to("/bin/true")
    found = subprocess.run(memoryd_command("--config", str(config), "doctor"), env=env,
                           capture_output=True, text=True, timeout=60)
    assert "ok    hook client: curl found" in found.stdout
