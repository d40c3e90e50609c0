"""sparksync reinit"""

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
def reinit_command(
    subscription: Annotated[str, typer.Option("--subscription", "-s", help="The subscription to re-create.")],
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    upload_first: Annotated[bool, typer.Option("--upload-first", help="Merge its changes to the publisher first, "
                                                                      "so nothing made there is lost.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Discard its changes that were not uploaded.")] = False,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """Re-create a subscription from a snapshot: an expired, damaged or restored subscriber, or one whose
    database was lost or replaced (merge or transactional)."""
    topology = load(config)
    summary = api.reinit(topology, subscription, upload_first=upload_first, discard=yes, spark=make_spark(topology),
                         progress=reporter)
    mine = [r for r in summary.initialized if r.subscription == subscription and r.ok]
    rows = mine[0].rows if mine else 0
    if subscription in summary.caught_up:
        console.print(f"[green]reinitialized[/] {subscription}: {rows} rows from the snapshot, then "
                      f"{summary.caught_up[subscription]} change(s) made since", highlight=False)
        return
    agent = "merge" if topology.publication(topology.subscription(subscription).publication).kind == "merge" \
        else "distribute"
    console.print(f"[green]reinitialized[/] {subscription}: {rows} rows from the snapshot; "
                  f"the next {agent} brings the changes since", highlight=False)
