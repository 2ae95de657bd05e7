"""What the benchmarks share: an isolated environment for memoryd, configs, machine facts."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
#: The fixtures and datasets beside the checkout (`SHARED_DIR` elsewhere, as the tests read it).
SHARED = Path(os.environ.get("SHARED_DIR", REPO.parent / "shared"))
MB = 1 << 20


def isolated_env(xdg_config_home: Path) -> dict[str, str]:
    """The environment without MEMORYD_* (any that is not a setting is an error) and with a
    config home of its own, so no user config leaks into a measurement."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    xdg_config_home.mkdir(parents=True, exist_ok=True)
    env["XDG_CONFIG_HOME"] = str(xdg_config_home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def isolate_this_process(xdg_config_home: Path) -> None:
    """The same isolation for in-process runs (load_settings reads os.environ)."""
    for name in [k for k in os.environ if k.startswith("MEMORYD_")]:
        del os.environ[name]
    xdg_config_home.mkdir(parents=True, exist_ok=True)
    os.environ["XDG_CONFIG_HOME"] = str(xdg_config_home)


def write_config(path: Path, state_dir: Path, claude_root: Path, **settings: Any) -> Path:
    data: dict[str, Any] = {
        "state_dir": str(state_dir),
        "sources": [{"kind": "claude", "root": str(claude_root)}],
        "log_format": "json",
    }
    data.update(settings)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def memoryd_command(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "memoryd", "--config", str(config), *args]


def machine() -> str:
    return (f"nproc {os.cpu_count()}, Python {platform.python_version()}, "
            f"SQLite {sqlite3.sqlite_version}, {platform.system()} {platform.release()} "
            f"{platform.machine()}")


def startup_seconds(env: dict[str, str]) -> float:
    """How long `python -m memoryd --help` takes: the fixed cost inside a subprocess timing."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "memoryd", "--help"], env=env, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def db_size(path: Path) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            total += side.stat().st_size
    return total


def sql_value(db: Path, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row `sql` gives on the database at `db`, read-only;
    None when there is no row, or the file or a table does not exist yet (a daemon
    still starting)."""
    if not db.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            row = conn.execute(sql, params).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def count_rows(db: Path, table: str) -> int:
    """Rows in `table` of the database at `db` (0 while it does not exist yet)."""
    return int(sql_value(db, f"SELECT COUNT(*) FROM {table}") or 0)


@contextlib.contextmanager
def workspace(name: str, *, keep: bool = False) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A fresh work directory with a default-settings config over an empty Claude root
    (`memory.embeddings.fetch_model: false`: no model download in a benchmark), and the
    isolated environment to run memoryd in: (work, config, env). Removed afterwards
    unless `keep`."""
    work = Path(tempfile.mkdtemp(prefix=f"memoryd-bench-{name}-"))
    claude = work / "claude"
    claude.mkdir()
    config = write_config(work / "config.yaml", work / "state", claude,
                          memory={"embeddings": {"fetch_model": False}})
    try:
        yield work, config, isolated_env(work / "xdg")
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


#: Lines (messages) in each of `earlier_sessions`.
EARLIER_LINES = 12


def add_model_down_options(parser: argparse.ArgumentParser, *, earlier: bool = True) -> None:
    """`--llm-down` (and `--earlier N`, which it sets to 20 when not given: see
    `earlier_of`)."""
    if earlier:
        parser.add_argument("--earlier", type=int, default=0,
                            help="finished sessions saved at start-up (20 with --llm-down)")
    parser.add_argument("--llm-down", action="store_true",
                        help="distillation on, its model down (a port that never answers)")


def earlier_of(args: argparse.Namespace) -> int:
    """`--earlier`, or 20 with `--llm-down`: sessions to fill the model's queue."""
    return int(args.earlier or (20 if args.llm_down else 0))


@contextlib.contextmanager
def model_down(enabled: bool) -> Iterator[dict[str, Any]]:
    """Settings (`{"memory": {"llm": ...}}`, for `write_config` or `load_settings`) naming
    a model that is down the worst way (`--llm-down`): a port on 127.0.0.1 that takes
    connections and never answers, so each call waits out its timeout while the
    distillation queue stays full. `{}` (no model) when not `enabled`."""
    if not enabled:
        yield {}
        return
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4096)  # never accepted: connected, then silence
        port = listener.getsockname()[1]
        yield {"memory": {"llm": {"provider": "openai", "model": "down", "timeout": 5.0,
                                  "base_url": f"http://127.0.0.1:{port}/v1"}}}


def earlier_sessions(root: Path, count: int, *, seed: int = 7) -> None:
    """`count` Claude Code sessions of two days ago under `root`, each a few thousand
    characters: the daemon saves them at start-up, and with a model configured queues
    their segments for it (what `--llm-down` keeps waiting)."""
    from benchmarks.gen_corpus import Pools, SessionWriter

    rng = random.Random(seed)
    pools = Pools(rng, text_chars=1 << 18)
    cwd = "/home/dev/code/earlier"
    folder = root / cwd.replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        session = f"eeeeeeee-0000-4000-8000-{n:012d}"
        writer = SessionWriter(rng, pools, cwd=cwd, session_id=session,
                               start=datetime.now(UTC) - timedelta(days=2))
        lines = b"".join(writer.user_text(300) + writer.assistant_text(900)
                         for _turn in range(EARLIER_LINES // 2))
        (folder / f"{session}.jsonl").write_bytes(lines)


def distillation_report(db: Path) -> str:
    """What distillation did during a run (`--llm-down`): its queue and the calls it
    tried, from the store and the audit trail."""
    queued = sql_value(db, "SELECT COUNT(*) FROM distill_queue") or 0
    stored = sql_value(db, "SELECT COUNT(*) FROM distill_queue WHERE state = 'done'") or 0
    failed = sql_value(db, "SELECT COUNT(*) FROM audit_events WHERE action = 'distill'"
                           " AND outcome != 'ok'") or 0
    error = sql_value(db, "SELECT error FROM distill_queue WHERE error IS NOT NULL"
                          " LIMIT 1")
    return (f"distillation, model down: {queued} segments queued, {failed} calls failed so"
            f" far ({error or 'the first still waiting'}), {stored} extracted")
