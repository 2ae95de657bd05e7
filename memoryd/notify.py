"""systemd's notify protocol without a dependency: datagrams to `$NOTIFY_SOCKET`.

`READY=1` once the store is open and the sources are watched, `WATCHDOG=1` from
the loop that does the work, `STATUS=` one line for `systemctl status`,
`STOPPING=1` on shutdown. With the variable unset (not under systemd, or
launchd) every call does nothing. An address starting with `@` is an abstract
socket (a leading NUL byte on Linux).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger("memoryd.notify")


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self._address: str | bytes | None = None
        if address.startswith("@"):
            self._address = b"\0" + address[1:].encode()
        elif address.startswith("/"):
            self._address = address
        self._socket: socket.socket | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        watchdog_for_us = usec.isdigit() and (not pid or pid == str(os.getpid()))
        #: How often systemd wants a WATCHDOG=1 (half its timeout), or None.
        self.watchdog_interval = int(usec) / 2e6 if watchdog_for_us else None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, *fields: str) -> bool:
        """Send `KEY=value` fields in one datagram; False when not under systemd or it failed."""
        if self._address is None:
            return False
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.sendto("\n".join(fields).encode(), self._address)
        except OSError as exc:
            log.warning("notify_failed", error=exc.strerror)
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=stopping")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
