"""What `status`, `sessions` and `recall` print, as lines: shared by the full command line
and its quick path (`cli.quick`), so both print the same. Standard library only."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from typing import Any, TextIO

#: An API refusal's HTTP status -> the command's exit status.
EXIT_FOR_STATUS = {400: 2, 403: 1, 404: 66, 503: 69, 504: 69}


def terminal_width(stream: TextIO, environ: dict[str, str] | os._Environ[str]) -> int | None:
    """The width lines must fit: the terminal's (or `COLUMNS`); None when the output goes
    to a pipe or a file without `COLUMNS`, where whole lines serve scripts better."""
    if "COLUMNS" not in environ and not stream.isatty():
        return None
    return max(40, shutil.get_terminal_size().columns)


def fit(line: str, width: int | None) -> str:
    """`line` cut to `width` with an ellipsis (full values are in `--json`)."""
    if width is None or len(line) <= width:
        return line
    return line[:width - 1] + "…"


def fit_left(text: str, room: int) -> str:
    """`text` (a path) cut from its start: its end is what tells paths apart."""
    return text if len(text) <= room else "…" + text[len(text) - room + 1:]


def wrap(line: str, width: int | None, indent: str) -> list[str]:
    """`line` wrapped to `width`, later lines under `indent`."""
    if width is None or len(line) <= width:
        return [line]
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=True) or [line]


def when(stamp: str | None) -> str:
    """An ISO timestamp as a column: minutes, UTC."""
    return stamp[:16].replace("T", " ") if stamp else "-"


def json_text(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)


def size(n_bytes: int) -> str:
    value = float(n_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def result_lines(results: list[dict[str, Any]], width: int | None = None,
                 query: str | None = None) -> list[str]:
    """Recall results, best first, with where each came from (wrapped to `width`)."""
    if not results:
        # One line: recall returns nothing rather than what merely shares a stray word.
        return ["nothing in memory is relevant to this query" if query and query.strip()
                else "no memories found"]
    lines = []
    for r in results:
        p = r["provenance"]
        where = f"session {p['session_id']}" if p.get("session_id") is not None else "explicit"
        if p.get("first_index") is not None:
            where += f" messages {p['first_index']}-{p['last_index']}"
        when = p.get("ended_at") or r["created_at"] or "?"
        lines.append(fit(f"[{r['score']:.3f}] {r['type']} {when[:16]} {where} {r['memory_id']}"
                         f"{' ' + r['project'] if r.get('project') else ''}", width))
        # The excerpt is the matching part of a long memory (its chunk).
        text = str(r.get("excerpt") or r["content"]).strip()
        text = text if len(text) <= 600 else text[:599] + "…"
        for part in text.split("\n"):
            lines += (textwrap.wrap(part, width, initial_indent="    ", subsequent_indent="    ",
                                    break_on_hyphens=False) or ["    "]) if width else [
                "    " + part]
    return lines


def session_lines(rows: list[dict[str, Any]], width: int | None = None) -> list[str]:
    if not rows:
        return ["no sessions yet"]
    head = (f"{'ID':>5} {'SOURCE':<6} {'STATUS':<6} {'MSGS':>6} {'SUB':>3} {'UNSYNCED':>8} "
            f"{'GIVEN':>5} {'LAST MESSAGE (UTC)':<18} ")
    room = max(12, width - len(head)) if width else None
    lines = [head + "PROJECT"]
    for r in rows:
        project = r["project"] or "-"
        lines.append(fit(f"{r['id']:>5} {r['source']:<6} {r['status']:<6} "
                         f"{r['message_count']:>6} {r.get('subagents') or '':>3}"
                         f" {r['unsynced_messages']:>8} "
                         f"{r['context_blocks_given']:>5} {when(r['last_message_at']):<18} "
                         f"{fit_left(project, room) if room else project}", width))
    return lines


def _period(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} days" if days >= 1 else duration(seconds)


def status_lines(report: dict[str, Any], width: int | None = None) -> list[str]:
    return [fit(line, width) for line in _status_lines(report)]


def _status_lines(report: dict[str, Any]) -> list[str]:
    out = []
    d = report["daemon"]
    if d["running"]:
        out.append(f"daemon: running (pid {d['pid']}, up {duration(d['uptime_seconds'])})")
        out.append(f"api: {d['api_socket']}"
                   + ("" if d["api_listening"] else " (not listening yet)"))
    elif d["pid"]:
        out.append(f"daemon: not running; `memoryd {d['command']}` holds the lock"
                   f" (pid {d['pid']})")
    else:
        out.append("daemon: not running")
    out.append(f"state:  {report['state_dir']}")
    db = report["database"]
    if db.get("detail"):
        out.append(f"store:  {db['path']} ({db['detail']}: its creation did not finish;"
                   " see `memoryd doctor`)")
    else:
        out.append(f"store:  {db['path']} ({size(db['size_bytes'])})" if db["exists"]
                   else f"store:  {db['path']} (not created yet)")
    for s in report["sources"]:
        where = "" if s["exists"] else " (not found)"
        state = "" if s["enabled"] else " [disabled]"
        out.append(f"source {s['kind']:<6} {s['root']}{where}{state}: {s['files']} files, "
                   f"{s['sessions']} sessions, {s['messages']} messages")
    memory = report["memory"]
    state = "available" if memory["available"] else f"unavailable ({memory.get('detail', '?')})"
    out.append(f"memory: {memory['backend']} {memory['path']}: {state}"
               f" (user {memory['user']})")
    for layer in memory.get("layers", [])[1:]:
        answer = "available" if layer["available"] else (
            f"unavailable ({layer.get('detail', '?')})")
        out.append(f"  then: {layer['backend']} {layer['where']}: {answer}")
    for depth in memory.get("outbox", []):
        out.append(f"outbox for {depth['layer']}: {depth['waiting']} waiting"
                   + (f", {depth['parked']} parked" if depth["parked"] else "")
                   + (f", oldest {depth['oldest']}" if depth["oldest"] else ""))
    if memory["available"] and memory["embedder"] is None:
        out.append("vectors: none (keyword recall only)")
    elif memory["available"]:
        weights = memory.get("model_weights")
        pace = memory.get("embedding_per_second")
        done_in = memory.get("embedding_done_in_seconds")
        out.append(f"vectors: {memory['embedder']}, {memory['chunks_waiting_for_vector']}"
                   " chunks waiting for one"
                   + (f" (model weights {weights}: keyword recall until then)"
                      if weights not in (None, "present") else "")
                   + (f", {pace:g} a second, done in about {duration(done_in)}"
                      if pace and done_in is not None else ""))
    distill = report.get("distill")
    if distill is not None:
        out.append(_distill_line(distill))
    retention = report.get("retention")
    if retention is not None:
        expires = retention["expires"]
        out.append("retention: " + ("deletes nothing by age (no period set)" if not expires
                                    else ", ".join(
                                        f"{name.replace('_', ' ')} after {_period(seconds)}"
                                        for name, seconds in expires.items())
                                    + (" (dry run only)" if retention["dry_run"] else "")
                                    + " (see doctor)"))
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(report["sessions_by_status"].items()))
    out.append(f"sessions: {report['sessions']}" + (f" ({by_status})" if by_status else ""))
    out.append(f"messages: {report['messages']} stored, {report['unsynced_messages']} "
               "not yet in memory")
    out.append(f"ingestion lag: {size(report['ingestion_lag_bytes'])} not yet stored")
    for held in report.get("ingestion_held_back") or []:
        out.append(f"  {size(held['bytes'])} held back: {held['reason']} in {held['path']}")
    if report["rejected_lines"]:
        out.append(f"rejected lines: {report['rejected_lines']} (kept in table rejected_lines)")
    if report["last_error"]:
        out.append(f"last error: {report['last_error']} at {report['last_error_at']}")
    return out


def _distill_line(d: dict[str, Any]) -> str:
    """Distillation's provider, queue, what it stored and spent today, its last error."""
    if d["provider"] == "none":
        head = "distill: off"
    else:
        head = f"distill: {d['provider']}" + (f" {d['model']}" if d["model"] else "")
    line = (f"{head}: {d['waiting']} segments waiting, {d['stored']} observations stored"
            f" ({d['duplicates']} duplicates avoided, {d['skipped']} segments skipped),"
            f" {d['tokens_today']:,} of {d['daily_tokens']:,} tokens today")
    if d.get("last_error"):
        line += f"; last error: {d['last_error']} at {d['last_error_at']}"
    return line
