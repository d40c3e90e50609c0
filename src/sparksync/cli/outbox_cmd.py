"""sparksync outbox: a device's local changes and what became of each (its outbox, read from the file alone)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from sparksync import api
from sparksync.cli.common import KeyEnvOption, KeyFileOption, console, device_key, handle_errors

DatabaseOption = Annotated[str, typer.Option("--database", help="The device's database: a SQLite file path, or a "
                                                                "sqlite:/// or postgresql:// URL.")]


@handle_errors
def outbox_command(
    database: DatabaseOption = "",
    pending: Annotated[bool, typer.Option("--pending", help="Only the changes the publisher has not accepted "
                                                            "yet.")] = False,
    ack: Annotated[list[int] | None, typer.Option("--ack", metavar="ID", help="Acknowledge these answered changes "
                                                  "(they leave the outbox); repeat for more.")] = None,
    ack_all: Annotated[bool, typer.Option("--ack-all",
                                          help="Acknowledge every applied, replaced or refused change.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list, one object per local change.")] = False,
    key_file: KeyFileOption = None,
    key_env: KeyEnvOption = None,
) -> None:
    """On a device: its local changes not yet acknowledged, each with its state: pending (not yet accepted by
    the publisher), applied, replaced (a business logic handler at the publisher applied a row of its own instead),
    lost (a conflict; the winning row), refused or failed (sent again at every sync)."""
    if not database:
        raise typer.BadParameter("required", param_hint="--database")
    device = api.Device(api.database_url(database), key=device_key(key_file, key_env))
    if ack or ack_all:
        n = device.acknowledge(None if ack_all else list(ack or []))
        console.print(f"{n} change(s) acknowledged", highlight=False)
        return
    changes = device.outbox(pending=pending)
    before = device.replaced()
    if before and not as_json:
        console.print(f"this file replaced {before}, set aside with everything it held: the changes made before are "
                      f"there (sparksync outbox --database {before})", highlight=False)
    if as_json:
        console.print_json(json.dumps([c.as_json() for c in changes], default=str))
        return
    t = Table("id", "article", "key", "operation", "state", "generation", "detail", box=None)
    for c in changes:
        detail = c.reason or ""
        if c.state == "failed":
            detail = f"{detail} (tries: {c.tries})"
        t.add_row("-" if c.change_id is None else str(c.change_id), c.article,
                  json.dumps(c.key, default=str) if c.key else c.rowguid, c.operation, c.state,
                  "" if c.generation is None else str(c.generation), detail)
    console.print(t)
    waiting = sum(1 for c in changes if c.state == "pending")
    console.print(f"{waiting} change(s) not yet accepted by the publisher; "
                  f"{sum(1 for c in changes if c.state in ('lost', 'failed', 'refused'))} need attention",
                  highlight=False)
