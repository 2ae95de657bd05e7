"""One HTTP/1.1 request to the daemon's Unix socket, with the standard library only.

The hook and the quick CLI path start a process per call: importing http.client
(email, ssl) or httpx would cost more than their whole time budget, so they speak
the little HTTP they need here: one request, `Connection: close`, read to the end.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from memoryd.errors import Unreachable

MAX_ANSWER_BYTES = 32 << 20


def request(socket_path: str, method: str, path: str, body: bytes | None,
            deadline: float) -> tuple[int, Any]:
    """The answer's status and JSON. `Unreachable` when nothing listens; other errors
    (too slow, a broken answer) mean a daemon is there: never bypass it then."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            sock.connect(socket_path)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
            raise Unreachable(str(exc)) from None
        data = body or b""
        chunks: list[bytes] = []
        size = 0
        try:
            sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: memoryd\r\n".encode()
                         + (b"Content-Type: application/json\r\n" if body is not None
                            else b"")
                         + b"Connection: close\r\nContent-Length: " + str(len(data)).encode()
                         + b"\r\n\r\n" + data)
        except (ConnectionResetError, BrokenPipeError) as exc:
            raise Unreachable(f"the daemon closed the connection ({exc})") from None
        while True:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError as exc:
                # Refused at the door (every connection busy) or stopped mid-answer.
                raise Unreachable(f"the daemon closed the connection ({exc})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise ValueError("answer too large")
    finally:
        sock.close()
    head, _, payload = b"".join(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError("the daemon sent no HTTP answer")
    if b"transfer-encoding: chunked" in head.lower():
        payload = _unchunk(payload)
    return int(status_line[1]), json.loads(payload)


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2:]
    return bytes(out)


def ask_daemon(socket_path: str, body: bytes, deadline: float) -> dict[str, Any]:
    """POST /v1/session_event on the socket; the answer's JSON.

    `Unreachable` when nothing listens there; any other error (a daemon too slow
    for the deadline) must not send the caller to the stores beside a live daemon.
    """
    status, answer = request(socket_path, "POST", "/v1/session_event", body, deadline)
    if status != 200:
        raise ValueError(f"daemon answered {status}")
    if not isinstance(answer, dict) or not answer.get("ok"):
        raise ValueError("daemon refused the event")
    return answer
