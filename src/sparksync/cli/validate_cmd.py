"""sparksync validate"""

from __future__ import annotations

import functools
import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from sparksync import api
from sparksync.cli.common import (
    DEFAULT_CONFIG_PATH,
    ConfigOption,
    LockTimeoutOption,
    console,
    handle_errors,
    load,
    make_spark,
    reporter,
)
from sparksync.locks import DEFAULT_WAIT
from sparksync.validation.report import ValidationReport

SHOWN = 20          # differing rows printed per article (--json lists them all)


def _print(report: ValidationReport) -> None:
    t = Table("subscription", "article", "rows", *(["checksum", "diff"] if report.checksum else []), "", box=None,
              caption="rows: at the publisher (the subscriber's partition) / at the subscriber"
                      + ("; diff: missing / extra / changed rows" if report.checksum else ""))
    blank = [""] * (2 if report.checksum else 0)
    for s in report.subscriptions:
        if s.error is not None:
            t.add_row(s.subscription, "", "", *blank, f"[bold red]{s.error}[/]", end_section=True)
            continue
        for i, a in enumerate(s.articles):
            checks = [("equal" if a.publisher_checksum == a.subscriber_checksum else "differs"),
                      f"{a.count('missing')}/{a.count('extra')}/{a.count('changed')}"] if report.checksum else []
            t.add_row(s.subscription, a.article, f"{a.publisher_rows}/{a.subscriber_rows}", *checks,
                      "[green]ok[/]" if a.ok else "[bold red]differs[/]", end_section=i == len(s.articles) - 1)
    console.print(t)
    for s in report.subscriptions:
        for a in s.articles:
            for d in a.differences[:SHOWN]:
                console.print(f"  {s.subscription} {a.article}: {d.kind} row {d.key}"
                              + (f" (rowguid {d.rowguid})" if d.rowguid else ""), highlight=False)
            if len(a.differences) > SHOWN or a.more:
                console.print(f"  {s.subscription} {a.article}: ... and more (--json lists them)", highlight=False)
        if not s.ok and s.error is None and s.pending:
            what = (f"{s.pending_upload or 0} to upload, {s.pending_download or 0} to download): run 'sparksync merge'"
                    if s.kind == "merge" else f"{s.pending_download} transaction(s)): run 'sparksync logreader' and "
                    "'sparksync distribute'")
            console.print(f"[yellow]{s.subscription} has changes not delivered yet ({what} and validate again[/]",
                          highlight=False)


@handle_errors
def validate_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    subscription: Annotated[list[str] | None, typer.Option("--subscription", "-s",
                                                              help="Only this subscription (repeatable).")] = None,
    publication: Annotated[str | None, typer.Option("--publication", "-p", help="Only this publication.")] = None,
    checksum: Annotated[bool, typer.Option("--checksum", help="Also compare an order-independent checksum of the "
                                                              "published columns (computed on Spark) and list the "
                                                              "rows that differ.")] = False,
    repair_: Annotated[bool, typer.Option("--repair", help="Write the rows that differ at a merge subscriber from "
                                                           "the publisher (publisher wins); implies --checksum.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --repair: do not ask.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """Check that subscribers hold the publisher's rows (a merge subscriber: its partition of them): row
    counts and, with --checksum, checksums and the rows that differ. Exit code 1 when any differs."""
    topology = load(config)
    quiet = (lambda m: None) if as_json else reporter
    spark = functools.cache(make_spark(topology))
    subs = list(subscription) if subscription else None
    report = api.validate(topology, publication, subs, checksum=checksum or repair_, spark=spark, progress=quiet)
    if repair_ and not report.ok:
        if not as_json:
            _print(report)
        rows = sum(len(a.differences) for s in report.subscriptions for a in s.articles)
        if not yes:
            if as_json or not sys.stdin.isatty():
                raise typer.BadParameter("repairing needs confirmation: pass --yes", param_hint="--repair")
            if not typer.confirm(f"Write {rows} row(s) at the subscribers from the publisher?"):
                raise typer.Exit(1)
        repaired = api.repair(topology, report, progress=quiet)
        done = {s.subscription: s.repaired for s in repaired.subscriptions}
        left = {s.subscription: s.skipped for s in repaired.subscriptions}
        report = api.validate(topology, publication, subs, checksum=True, spark=spark, progress=quiet)
        for s in report.subscriptions:
            s.repaired, s.skipped = done.get(s.subscription, 0), left.get(s.subscription, [])
        if not as_json:
            skipped = [(name, x) for name, xs in left.items() for x in xs]
            console.print(f"repaired {sum(done.values())} row(s)"
                          + (f"; left {len(skipped)} row(s) as they are (the reason below)" if skipped else "")
                          + "; validated again:", highlight=False)
            for name, x in skipped[:SHOWN]:
                console.print(f"  {name} {x.article}: row {x.key} left: {x.reason}", highlight=False)
            if len(skipped) > SHOWN:
                console.print(f"  ... and {len(skipped) - SHOWN} more (--json lists them)", highlight=False)
    if as_json:
        console.print_json(json.dumps(report.to_dict(), default=str))
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(1)
