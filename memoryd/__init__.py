"""memoryd: a background daemon that gives AI coding agents a durable memory.

`memoryd run` is service.py; every other command is in cli/. Each list runs from the
top of the import order down: a name comes before what it imports.

    cli/              the `memoryd` command line, one module per topic
    hooks/            agent hooks: the fast hook, its fallback, the settings installers
    ui/               the local web viewer (`memoryd ui`)
    api/              the local API: every operation once, on the socket or in-process
    domain/           what memoryd does when asked: recall, the agents' blocks, governance
    briefing/         what a new session in a project is told, from the sessions' digests
    distill/          optional distillation: a model keeps facts and decisions it reads
    lifecycle/        sessions after they are stored: expiry, recovery, digests, retention
    ingest/           transcripts found and followed into the store, exactly once
    memory/           the backend protocol, the backends, recall, privacy, embeddings
    store/            the daemon's SQLite database (`memoryd.db`): schema, commits, queries

    __main__.py       `python -m memoryd`
    entry.py          the `memoryd` executable: the hook and the quick path load first
    service.py        the daemon as one object: lock, store, ingester, jobs, API, stop
    service_jobs.py   the daemon's periodic jobs (expiry, recovery, embedding, audit...)
    doctor.py         `memoryd doctor`: checks of the installation, each with a fix
    mcp_server.py     `memoryd mcp`: memory as MCP tools on stdio
    client.py         how a client reaches memory: the daemon's API, else the stores
    status.py         what `memoryd status` reports, read-only
    logging.py        structlog set-up; log lines masked
    service_units.py  installing memoryd as a systemd or launchd user service
    lock.py           one daemon per state directory: an flock on `memoryd.lock`
    config.py         settings: a YAML file plus MEMORYD_* environment variables
    config_memory.py  the `memory:` settings: layers, embeddings, rerank, distillation model
    config_values.py  what settings are made of: durations (`30m`), paths (`~`, `$VAR`)
    sqlite.py         what both SQLite databases share: open, pragmas, errors, migrations
    files.py          files replaced whole or not at all; private directories
    mcp_protocol.py   the part of MCP a tools-only server speaks (JSON-RPC on stdio)
    repository.py     which project a directory belongs to (its git repository, on disk)
    timephrases.py    `--since`/`--until` phrases read into UTC instants
    localhttp.py      one HTTP/1.1 request to the daemon's socket (standard library only)
    hook_protocol.py  what a hook payload asks of the daemon, and what the agent reads
    errors.py         the one error tree
    clock.py          the injected clock (SystemClock, FakeClock) and UTC times as text
    names.py          the agents memoryd knows and their hook events (standard library)
    locations.py      the default state directory and config file (standard library)
    private.py        `<private>` spans masked in the daemon's archive as they are read
    process.py        what the daemon's process tunes: thread switching, freed heap
    notify.py         systemd's notify protocol: READY, WATCHDOG, STATUS, STOPPING

config.py imports two modules above it, on purpose and commented there: the
crontab check (`lifecycle.scheduling`) and the extra masks (`memory.privacy.redaction`).
"""

__version__ = "0.1.0"
