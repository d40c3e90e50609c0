"""sparksync snapshot"""

from __future__ import annotations

from typing import Annotated

import typer

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


@handle_errors
def snapshot_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    publication: Annotated[list[str] | None, typer.Option("--publication", "-p",
                                                             help="Only this publication (repeatable).")] = None,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """(Re)write the publication's snapshot: each article as Parquet, plus the rows' lineage."""
    topology = load(config)
    out = api.snapshot(topology, publication, spark=make_spark(topology), progress=reporter)
    for name, path in out.items():
        console.print(f"[green]snapshot[/] {name}: {path}")
