"""The one error tree of memoryd.

    MemorydError
    ├── ConfigError          bad or unknown setting (exit status 78)
    ├── AlreadyRunningError  another memoryd holds the state directory lock
    ├── StateDirError        the state directory cannot be created or written (exit 73)
    ├── IngestError          a transcript could not be read
    ├── StoreError           the daemon's SQLite store failed
    │   ├── StoreBusy        locked database, full disk: transient, retried
    │   └── StoreDamaged     not a database, or malformed: never written again (exit 74)
    ├── BackendError         a memory backend failed
    │   ├── BackendUnavailable  transient, retried
    │   ├── BackendUnsupported  the backend cannot do this (its capabilities)
    │   ├── BackendOutcomeUnknown  a write may or may not have been applied (never resent)
    │   ├── BackendDamaged   the memory database is not a database, or malformed (exit 74)
    │   │   └── MemoryLost   the embedded memory holds nothing the archive says it held
    │   ├── StoreOwnedElsewhere  the memory store belongs to another user
    │   ├── GatewayError     a Memory Gateway call failed
    │   │   ├── GatewayUnavailable  (also BackendUnavailable) try later
    │   │   └── GatewayUnknown      (also BackendOutcomeUnknown) an add's answer was lost
    │   └── EmbeddingError   an embedder failed
    │       └── EmbeddingUnavailable  (also BackendUnavailable) rate limit, 5xx, timeout
    │           └── EmbeddingLoading      the model loads in the background: keywords now
    ├── DistillError         the distillation model failed (`distill`)
    │   ├── DistillUnavailable  429, 5xx, timeout, refused: transient, retried later
    │   ├── DistillRefused      this request refused (400, 413, 422): counted against it
    │   └── DistillAnswerError  the model's answer is not the items asked for
    ├── Refused              a request memoryd will not carry out (the domain's; the API
    │   │                    gives each its HTTP status)
    │   ├── BadRequest       an argument is missing, empty or wrong
    │   ├── NotFound         what the request names does not exist
    │   ├── Conflict         a legal hold, or a memory no longer live, stands in the way
    │   ├── NotPermitted     not for this caller (another user, an agent's tools)
    │   └── NotSupported     the memory backend cannot do this
    ├── ApiError             an answer of the local API's that is an error (its HTTP status)
    ├── DaemonUnreachable    no daemon answers on the socket (clients fall back)
    └── SettingsFileError    an agent's settings file memoryd will not touch

    OSError
    ├── NotARegularFile      a path named like a transcript is a FIFO, socket or device
    └── Unreachable          nothing listens on the daemon's socket (the hook's and quick
                             commands' own client; `DaemonUnreachable` above is the API's)
    ValueError
    └── WhenError            a time phrase memoryd does not understand (`--since`)
    ToolError                a refused MCP tool call: its one line is what the model reads

Private signals (`hooks.fast._Usage`, `cli.quick._Fallback`, `store.offsets._NotWritten`)
stay beside the code that raises and catches them: they never leave their module.

Third-party exceptions are translated into these at the boundary that calls the
library. Errors carry fields (path, offset, backend) and never secrets.
"""

from __future__ import annotations

EX_CONFIG = 78
EX_ALREADY_RUNNING = 75
EX_DAMAGED = 74
EX_CANTCREAT = 73

# What SQLite says of a file that is not, or no longer, a sound database.
DAMAGE_MARKERS = ("file is not a database", "database disk image is malformed",
                  "malformed database schema", "file is encrypted")


#: What a request that needs code or files replaced under the running daemon answers
#: (`pip install` again): only a restart mends that.
FILES_REPLACED = ("memoryd's files changed under the running daemon (reinstalled?); restart it"
                  " (`memoryd service restart`, or stop and start `memoryd run`)")


def is_damage(message: str) -> bool:
    """Whether an SQLite error message says the database file is damaged."""
    text = message.lower()
    return any(marker in text for marker in DAMAGE_MARKERS)


class MemorydError(Exception):
    """Base of every error memoryd raises on purpose."""

    transient: bool = False
    #: The file behind it is damaged: writing on would make it worse; repair first.
    damaged: bool = False


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


class StateDirError(MemorydError):
    """The state directory (or a store's directory) cannot be created, used or written."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"state directory {path}: {problem}")
        self.path = path


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


class StoreDamaged(StoreError):
    """The daemon's database is not a database or is malformed (see docs/operations.md)."""

    damaged = True


class BackendError(MemorydError):
    """A memory backend failed."""

    def __init__(self, message: str, *, backend: str) -> None:
        super().__init__(f"{backend}: {message}")
        self.backend = backend
        self.detail = message


class BackendUnavailable(BackendError):
    """A memory backend cannot be reached right now."""

    transient = True


class BackendDamaged(BackendError):
    """The memory database is not a database or is malformed (see docs/operations.md)."""

    damaged = True


class MemoryLost(BackendDamaged):
    """The embedded memory holds nothing while the archive says sessions were saved to it
    (moved, deleted, made anew): `memoryd rebuild-memory` saves them again."""


class BackendOutcomeUnknown(BackendError):
    """A write was sent but its answer was lost: it may have been applied. Sending it again
    could store it twice, so it is kept aside for a person to decide (`memoryd memory
    outbox`), never retried by itself."""


class BackendUnsupported(BackendError):
    """The backend does not offer this operation (see its `capabilities`)."""


class StoreOwnedElsewhere(BackendError):
    """The memory store belongs to another user (`memory.user`): memories never cross
    users, so it is not opened."""


class GatewayError(BackendError):
    """A gateway call failed: operation, path and status, never the key or a body."""

    def __init__(self, operation: str, path: str, problem: str,
                 status: int | None = None) -> None:
        self.operation, self.path, self.status = operation, path, status
        shown = f"HTTP {status}" if status is not None else problem
        super().__init__(f"{operation} {path}: {shown}" + (
            f" ({problem})" if status is not None and problem else ""), backend="gateway")


class GatewayUnavailable(GatewayError, BackendUnavailable):
    """Not reachable, timed out before an answer to a read, or a 5xx/429: try later."""


class GatewayUnknown(GatewayError, BackendOutcomeUnknown):
    """An add whose answer was lost: it may have been applied."""


class EmbeddingError(BackendError):
    """An embedder failed; the message names the provider, never a credential."""

    def __init__(self, message: str, *, provider: str) -> None:
        super().__init__(message, backend=f"embeddings:{provider}")
        self.provider = provider


class EmbeddingUnavailable(EmbeddingError, BackendUnavailable):
    """A transient embedder failure (rate limit, server error, timeout)."""


class EmbeddingLoading(EmbeddingUnavailable):
    """The model is being loaded in the background: keywords answer meanwhile (no failure)."""


class DistillError(MemorydError):
    """The model that distils segments failed; the message names the provider and the
    status, never a key or the text sent."""

    def __init__(self, message: str, *, provider: str, retry_after: float | None = None
                 ) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider
        #: Seconds the provider asked to wait (HTTP Retry-After), if it said.
        self.retry_after = retry_after


class DistillUnavailable(DistillError):
    """Rate-limited, a server error, a timeout, a refused connection: try later."""

    transient = True


class DistillRefused(DistillError):
    """The provider refused this one request, or answered it in an unexpected shape."""


class DistillAnswerError(DistillRefused):
    """The answer is not JSON of the schema asked for (retried once, then skipped)."""


class Refused(MemorydError):
    """A request memoryd will not carry out: the message is the one line that says why."""


class BadRequest(Refused):
    """An argument is missing, empty or not what the operation takes."""


class NotFound(Refused):
    """The memory, session, hold or link the request names does not exist."""


class Conflict(Refused):
    """Something stands in the way: a legal hold, a memory no longer live."""


class NotPermitted(Refused):
    """Not for this caller: another user's memories, forgetting everything from a tool."""


class NotSupported(Refused):
    """The memory backend cannot do what is asked (see its capabilities)."""


class ApiError(MemorydError):
    """A request the API answers with an error: `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DaemonUnreachable(MemorydError):
    """No daemon answers on the socket (not running, or not yet listening)."""


class SettingsFileError(MemorydError):
    """An agent's settings file that memoryd will not touch (it does not parse)."""


class NotARegularFile(OSError):
    """A path named like a transcript is a FIFO, socket or device: never read. An OSError,
    so that every path that reads files treats it as a file it cannot read."""


class Unreachable(OSError):
    """No daemon to connect to on the socket (as opposed to one that is slow to answer)."""


class WhenError(ValueError):
    """The text is not a time memoryd understands."""


class ToolError(Exception):
    """A refused tool call: its message (one line) is what the model reads."""
