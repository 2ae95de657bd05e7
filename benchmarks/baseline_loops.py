"""The two baselines of `benchmarks.backfill`, runnable as a process of their own.

    python benchmarks/baseline_loops.py bare|baseline FILES_LIST DB

prints the rows it stored. Only the standard library and orjson are imported, so the
process's start-up is an interpreter's and orjson's, nothing more.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

# -- the loops --------------------------------------------------------------------------

def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(block.get("text") or "")
        elif kind == "thinking":
            parts.append(block.get("thinking") or "")
        elif kind == "tool_result" and isinstance(block.get("content"), str):
            parts.append(block["content"])
    return "\n".join(parts)


def baseline(files: list[Path], db: Path) -> int:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE messages (session TEXT, idx INTEGER, role TEXT, content TEXT,"
                 " raw TEXT)")
    messages = 0
    for path in files:
        session = path.stem
        rows = []
        with open(path, "rb") as handle:
            for line in handle:
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                kind = record.get("type") if isinstance(record, dict) else None
                if kind not in ("user", "assistant") and record.get("subtype") != (
                    "compact_boundary"
                ):
                    continue
                message = record.get("message")
                content = _text(message.get("content") if isinstance(message, dict) else
                                record.get("content"))
                rows.append((session, len(rows), kind, content,
                             line.rstrip(b"\r\n").decode("utf-8", "replace")))
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
        messages += len(rows)
    conn.close()
    return messages


def bare(files: list[Path], db: Path) -> int:
    """The issue's bare loop: every line parsed with orjson and inserted, as it is, with
    one executemany a file into a WAL table. It keeps no message fields, so it writes
    about half the bytes of `baseline` and is the harder bar."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE lines (session TEXT, idx INTEGER, line TEXT)")
    lines = 0
    for path in files:
        session = path.stem
        rows = []
        with open(path, "rb") as handle:
            for line in handle:
                try:
                    orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                rows.append((session, len(rows), line.rstrip(b"\r\n").decode("utf-8", "replace")))
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO lines VALUES (?, ?, ?)", rows)
        conn.execute("COMMIT")
        lines += len(rows)
    conn.close()
    return lines


LOOPS: dict[str, Callable[[list[Path], Path], int]] = {"bare": bare, "baseline": baseline}


if __name__ == "__main__":
    name, listing, database = sys.argv[1:4]
    paths = [Path(p) for p in Path(listing).read_text().splitlines() if p]
    print(LOOPS[name](paths, Path(database)))
