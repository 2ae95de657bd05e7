"""`memoryd memory ...`: the layers of memory themselves: the chain's outbox, copying a store.

    memoryd memory outbox [--json] [--retry | --applied]
    memoryd memory copy --to postgres [--from sqlite]

These open the stores directly (they are maintenance, not something an agent asks
for): stop the daemon first, or expect the daemon to hold on to what it has open.
"""

from __future__ import annotations

from typing import Any, cast

import click

from memoryd.cli.common import config_option, fail, main, print_json, run_async, settings_for
from memoryd.clock import SystemClock
from memoryd.config import Settings
from memoryd.config_memory import BackendKind
from memoryd.errors import BackendError
from memoryd.memory.chain import ChainBackend
from memoryd.memory.draining import describe_depth
from memoryd.memory.models import DeletionRecord, ForgottenScope
from memoryd.memory.opening import is_chain, open_memory_backend, opener
from memoryd.memory.protocol import Capability, MemoryBackend, require

COPY_BATCH = 500
KINDS = ("sqlite", "postgres", "jsonl", "gateway")


@main.group("memory")
def memory_group() -> None:
    """The layers memory lives in: the chain's outbox, copying a store to another layer."""


@memory_group.command("outbox")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--retry", is_flag=True,
              help="Send the parked entries again (their answers were lost and you found"
                   " the primary does not have them).")
@click.option("--applied", is_flag=True,
              help="Drop the parked entries (you found the primary has them after all).")
@config_option
@click.pass_context
def outbox(ctx: click.Context, as_json: bool, retry: bool, applied: bool) -> None:
    """What waits in the chain's outbox for the primary layer, and what is parked."""
    settings = settings_for(ctx)
    if retry and applied:
        raise click.UsageError("give --retry or --applied, not both")
    if not is_chain(settings):
        fail("memory.backends has one layer: there is no outbox", 1)

    async def work() -> dict[str, Any]:
        backend = await open_memory_backend(settings, SystemClock(), vectors=False)
        try:
            chain = cast(ChainBackend, backend)
            resolved = None
            if retry or applied:
                resolved = await chain.resolve_parked(applied=applied)
            parked = await chain.outbox.parked()
            return {
                "depth": describe_depth(await chain.depth(), SystemClock().now()),
                "parked": [{"seq": e.seq, "layer": e.layer, "op": e.op, "key": e.key,
                            "created_at": e.created_at.isoformat(), "attempts": e.attempts,
                            "last_error": e.last_error} for e in parked],
                "resolved": resolved,
            }
        finally:
            await backend.close()

    report = run_async(work())
    if as_json:
        print_json(report)
        return
    if report["resolved"] is not None:
        click.echo(f"{report['resolved']} parked entries "
                   + ("dropped (applied)" if applied else "will be sent again"))
    if not report["depth"]:
        click.echo("the outbox is empty")
    for depth in report["depth"]:
        click.echo(f"{depth['layer']}: {depth['waiting']} waiting, {depth['parked']} parked"
                   + (f", oldest {depth['oldest']}" if depth["oldest"] else ""))
    for entry in report["parked"]:
        click.echo(f"  parked #{entry['seq']} {entry['op']} {entry['key']}"
                   f" since {entry['created_at']}: {entry['last_error']}")


@memory_group.command("copy")
@click.option("--to", "target", type=click.Choice(KINDS), required=True,
              help="The layer to copy into (configured under memory.<layer>).")
@click.option("--from", "source", type=click.Choice(KINDS), default="sqlite",
              show_default=True, help="The layer to copy from.")
@config_option
@click.pass_context
def copy(ctx: click.Context, target: str, source: str) -> None:
    """Copy every memory (superseded versions, provenance, corrections), every deletion
    record and every forgotten session and project from one layer into another.
    Idempotent: run it again to resume or to catch up; memories the target has (by id)
    are left as they are, hard-deleted ids never return."""
    settings = settings_for(ctx)
    if target == source:
        raise click.UsageError("--to and --from name the same layer")
    copied, present, deletions = run_async(_copy(settings, cast(BackendKind, source),
                                                 cast(BackendKind, target)))
    click.echo(f"copied {copied} memories ({present} already there) and {deletions}"
               f" deletion records from {source} to {target}")


async def _copy(settings: Settings, source_kind: BackendKind,
                target_kind: BackendKind) -> tuple[int, int, int]:
    clock = SystemClock()
    source = await opener(source_kind, settings, clock, None)()
    try:
        target = await opener(target_kind, settings, clock, None)()
    except BaseException:
        await source.close()
        raise
    try:
        require(source, Capability.EXPORT)
        require(target, Capability.EXPORT)
        copied = seen = 0
        batch: list[dict[str, Any]] = []
        async for record in source.export():
            batch.append(record)
            if len(batch) >= COPY_BATCH:
                copied += await target.import_records(batch)
                seen += len(batch)
                click.echo(f"  {seen} memories read, {copied} copied", err=True)
                batch = []
        copied += await target.import_records(batch)
        seen += len(batch)
        deletions = await _copy_deletions(source, target)
        deletions += await _copy_forgotten_scopes(source, target)
        return copied, seen - copied, deletions
    finally:
        await target.close()
        await source.close()


async def _copy_forgotten_scopes(source: MemoryBackend, target: MemoryBackend) -> int:
    """Forgotten sessions and projects stay forgotten in the target: a later sync or
    import into it never brings them back."""
    reader = getattr(source, "forgotten_scopes", None)
    scopes: list[ForgottenScope] = await reader() if reader is not None else []
    if not scopes:
        return 0
    importer = getattr(target, "import_forgotten_scopes", None)
    if importer is None:
        raise BackendError("cannot keep forgotten sessions and projects", backend=target.name)
    return int(await importer(scopes))


async def _copy_deletions(source: MemoryBackend, target: MemoryBackend) -> int:
    records: list[DeletionRecord] = await source.deletions()
    importer = getattr(target, "import_deletions", None)
    if not records:
        return 0
    if importer is None:
        raise BackendError("cannot keep deletion records", backend=target.name)
    return int(await importer(records))
