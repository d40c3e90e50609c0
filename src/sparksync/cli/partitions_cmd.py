"""sparksync partitions"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sparksync import api
from sparksync.cli.common import DEFAULT_CONFIG_PATH, ConfigOption, console, handle_errors, load
from sparksync.cli.status_cmd import print_partitions


@handle_errors
def partitions_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    publication: Annotated[str | None, typer.Option("--publication", "-p",
                                                    help="Only this publication.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The partitions of filtered merge publications: parameters, subscriptions, rows per article."""
    out = api.partitions(load(config), publication)
    if as_json:
        console.print_json(json.dumps(out))
        return
    if not out:
        console.print("no filtered merge publication")
    for name, parts in out.items():
        console.print(f"[bold]Publication[/] {name}: {len(parts)} partition(s)")
        print_partitions(parts)
