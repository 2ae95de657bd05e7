"""`memoryd ingest --once` shows a progress bar on a terminal, and none when piped."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

from helpers import daemon_env, lay_out_fixtures, memoryd_command, write_config


def _ingest(tmp_path: Path, name: str, *, tty: bool) -> str:
    roots = lay_out_fixtures(tmp_path / name)
    config = write_config(tmp_path / f"{name}.yaml", tmp_path / f"{name}-state", roots)
    command = memoryd_command("--config", str(config), "ingest", "--once")
    if not tty:
        done = subprocess.run(command, env=daemon_env(tmp_path), capture_output=True,
                              text=True, check=True)
        return done.stderr
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(command, env=daemon_env(tmp_path) | {"COLUMNS": "100"},
                                stdout=subprocess.DEVNULL, stderr=follower)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    """A terminal gets a progress bar reaching 100 %; a pipe gets JSON log lines only."""
    on_terminal = _ingest(tmp_path, "tty", tty=True)
    assert "ingesting" in on_terminal and "100%" in on_terminal
    piped = _ingest(tmp_path, "pipe", tty=False)
    assert "ingesting" not in piped
    assert all(line.startswith("{") for line in piped.splitlines() if line.strip())
