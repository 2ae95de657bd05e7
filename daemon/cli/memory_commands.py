"""Commands about memories: recall, and (issue 4) remember, correct, forget, export, import."""

from __future__ import annotations

import json
import sys
from datetime import datetime

import click

from daemon.cli.common import (
    config_option,
    iso_or_none,
    json_option,
    main,
    print_json,
    project_path,
    result_json,
    run_async,
    settings_for,
    when_option,
)
from daemon.clock import SystemClock
from daemon.memory import RecallResult
from daemon.service import open_memory_backend


@main.command()
@click.argument("query", required=False)
@click.option("--project", help="Prefer and keep this project's memories (its directory).")
@click.option("--all-projects", is_flag=True, help="Search every project.")
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--since", callback=when_option,
              help="Only memories from then on (ISO date, 'yesterday', '2 weeks ago').")
@click.option("--until", callback=when_option, help="Only memories before then.")
@click.option("--stdin", "from_stdin", is_flag=True,
              help="Read one query per line; print one JSON list per line (needs --json).")
@json_option
@config_option
@click.pass_context
def recall(ctx: click.Context, query: str | None, project: str | None, all_projects: bool,
           limit: int, since: datetime | None, until: datetime | None, from_stdin: bool,
           as_json: bool) -> None:
    """Find memories for QUERY, best first, with where each came from."""
    if from_stdin and not as_json:
        raise click.UsageError("--stdin prints JSON lines: add --json")
    if from_stdin == (query is not None):
        raise click.UsageError("give a QUERY or --stdin, not both" if query is not None
                               else "missing QUERY (or --stdin)")
    settings = settings_for(ctx)
    wanted_project = project_path(project)

    async def _recall() -> None:
        backend = await open_memory_backend(settings, SystemClock())
        try:
            async def one(text: str) -> list[RecallResult]:
                return await backend.recall(text, project=wanted_project, limit=limit,
                                            since=since, until=until,
                                            all_projects=all_projects)
            if from_stdin:
                for line in sys.stdin:
                    results = await one(line.rstrip("\n"))
                    click.echo(json.dumps([result_json(r) for r in results],
                                          ensure_ascii=False, sort_keys=True))
                return
            assert query is not None
            results = await one(query)
            if as_json:
                print_json([result_json(r) for r in results])
                return
            if not results:
                click.echo("no memories found")
            for r in results:
                p = r.provenance
                where = f"session {p.session_id}" if p.session_id is not None else "explicit"
                if p.first_index is not None:
                    where += f" messages {p.first_index}-{p.last_index}"
                when = iso_or_none(p.ended_at or r.created_at) or "?"
                click.echo(f"[{r.score:.3f}] {r.type.value} {when[:16]} {where}"
                           f"{' ' + r.project if r.project else ''}")
                text = r.content.strip().replace("\n", "\n    ")
                click.echo("    " + (text if len(text) <= 600 else text[:599] + "…"))
        finally:
            await backend.close()

    run_async(_recall())


