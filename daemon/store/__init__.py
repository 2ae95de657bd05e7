"""The only code that speaks the daemon's SQL."""

from daemon.store.connection import connect, transaction
from daemon.store.migrations import migrate

__all__ = ["connect", "migrate", "transaction"]
