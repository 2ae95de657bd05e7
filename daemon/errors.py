"""The one error tree of memoryd.

    MemorydError
    ├── ConfigError          bad or unknown setting (exit status 78)
    ├── AlreadyRunningError  another memoryd holds the state directory lock
    ├── IngestError          a transcript could not be read
    ├── StoreError           the daemon's SQLite store failed
    │   └── StoreBusy        locked database, full disk: transient, retried
    └── BackendError         a memory backend failed
        └── BackendUnavailable  transient, retried

Third-party exceptions are translated into these at the boundary that calls the
library. Errors carry fields (path, offset, backend) and never secrets.
"""

from __future__ import annotations

EX_CONFIG = 78
EX_ALREADY_RUNNING = 75


class MemorydError(Exception):
    """Base of every error memoryd raises on purpose."""

    transient: bool = False


class ConfigError(MemorydError):
    """A setting is missing, unknown or has a bad value."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config: {key}: {problem}")
        self.key = key
        self.problem = problem


class AlreadyRunningError(MemorydError):
    """Another memoryd process holds the lock on this state directory."""

    def __init__(self, state_dir: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"already running on {state_dir} ({who}); "
            "stop it first or use another state_dir"
        )
        self.state_dir = state_dir
        self.pid = pid


class IngestError(MemorydError):
    """A transcript file could not be read."""

    def __init__(self, message: str, *, path: str, offset: int | None = None) -> None:
        super().__init__(f"{message} ({path}" + (f" @ {offset})" if offset is not None else ")"))
        self.path = path
        self.offset = offset


class StoreError(MemorydError):
    """The daemon's SQLite store failed."""


class StoreBusy(StoreError):
    """The database is locked or the disk is full; the operation may succeed later."""

    transient = True


class BackendError(MemorydError):
    """A memory backend failed."""

    def __init__(self, message: str, *, backend: str) -> None:
        super().__init__(f"{backend}: {message}")
        self.backend = backend


class BackendUnavailable(BackendError):
    """A memory backend cannot be reached right now."""

    transient = True
