"""systemd readiness and watchdog, received on a real Unix datagram socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from helpers import daemon_env, memoryd_command, write_config

from memoryd.notify import Notifier


def _receive_until(sock: socket.socket, wanted: str, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(4096).decode()
        except TimeoutError:
            break
        seen.extend(data.split("\n"))
        if wanted in seen:
            return seen
    raise AssertionError(f"{wanted} not received; got {seen}")


def test_notifier_without_socket_does_nothing() -> None:
    """With NOTIFY_SOCKET unset nothing is sent and nothing fails."""
    notifier = Notifier({})
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.watchdog() is False


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_daemon_speaks_the_notify_protocol(tmp_path: Path, abstract: bool) -> None:
    """READY=1 after start, WATCHDOG=1 from the work loop, STOPPING=1 on SIGTERM."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = f"memoryd-test-{uuid.uuid4().hex}"
        sock.bind(b"\0" + name.encode())
        address = "@" + name
    else:
        address = str(tmp_path / "notify.sock")
        sock.bind(address)
    roots = {"claude": tmp_path / "claude"}
    roots["claude"].mkdir()
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", roots,
                          poll_interval="0.2s")
    env = daemon_env(tmp_path) | {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "2000000"}
    with (tmp_path / "run.log").open("wb") as log:
        proc = subprocess.Popen(memoryd_command("--config", str(config), "run"), env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        seen = _receive_until(sock, "READY=1", timeout=30)
        assert any(field.startswith("STATUS=") for field in seen)
        assert f"MAINPID={proc.pid}" in seen
        _receive_until(sock, "WATCHDOG=1", timeout=10)
        proc.send_signal(signal.SIGTERM)
        _receive_until(sock, "STOPPING=1", timeout=10)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
        if not abstract:
            os.unlink(address)
