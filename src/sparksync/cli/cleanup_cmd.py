"""sparksync cleanup"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from sparksync import api
from sparksync.cli.common import DEFAULT_CONFIG_PATH, ConfigOption, LockTimeoutOption, console, handle_errors, load, reporter
from sparksync.locks import DEFAULT_WAIT
from sparksync.merge.maintenance.cleanup import CleanupSummary


def _print(summary: CleanupSummary) -> None:
    tables = sorted({t for r in summary.replicas for t in r.removed})
    t = Table("replica", "through generation", *tables, "held by", box=None,
              caption=("rows that would be removed (dry run)" if summary.dry_run else "rows removed"))
    for r in summary.replicas:
        if r.error is not None:
            t.add_row(r.replica, "", *[""] * len(tables), f"[bold red]{r.error}[/]")
            continue
        t.add_row(r.replica, str(r.horizon), *[str(r.removed.get(n, 0)) for n in tables], r.held_by or "")
    console.print(t)


@handle_errors
def cleanup_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    publication: Annotated[str | None, typer.Option("--publication", "-p",
                                                    help="Only the replicas of this merge publication.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be removed; remove nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """Remove merge metadata that no replica needs any more: tombstones, generation history and partition
    mappings older than the publication's retention and received by every subscription that has not
    expired; conflicts and merge history older than retention. The merge agent does the same at the end of
    each session. Exit code 1 when a replica could not be cleaned."""
    topology = load(config)
    summary = api.cleanup(topology, publication, dry_run=dry_run, progress=None if as_json else reporter)
    if as_json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        _print(summary)
    if not summary.ok:
        raise typer.Exit(1)
