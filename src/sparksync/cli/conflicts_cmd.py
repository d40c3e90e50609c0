"""sparksync conflicts"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from sparksync import api
from sparksync.cli.common import (
    DEFAULT_CONFIG_PATH,
    ConfigOption,
    KeyEnvOption,
    KeyFileOption,
    LockTimeoutOption,
    console,
    device_key,
    handle_errors,
    load,
)
from sparksync.locks import DEFAULT_WAIT


@handle_errors
def conflicts_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    publication: Annotated[str | None, typer.Option("--publication", "-p", help="Only this publication.")] = None,
    article: Annotated[str | None, typer.Option("--article", "-a", help="Only this article (table).")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="List the failed changes waiting to be tried again "
                                                         "instead (row key, column, value, reason, attempts).")] = False,
    resolve: Annotated[str | None, typer.Option("--resolve", metavar="ID",
                                                help="Resolve this conflict again (ID from --json) with --keep.")] = None,
    keep: Annotated[str | None, typer.Option("--keep", help="With --resolve: winner (confirm) | loser (make the "
                                                            "losing version the winner everywhere).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
    database: Annotated[str | None, typer.Option("--database", help="On a device: its conflict inbox (the "
                                                 "conflicts its changes lost), from its database alone.")] = None,
    change_id: Annotated[int | None, typer.Argument(metavar="[ID]", help="With --database and --keep: the lost "
                                                    "change to settle (its id in the inbox).")] = None,
    key_file: KeyFileOption = None,
    key_env: KeyEnvOption = None,
) -> None:
    """List logged conflicts: type, reason, loser, winner, and the losing row; or resolve one again. On a device
    (--database): the conflicts its changes lost; --keep mine|theirs ID settles one."""
    if database is not None:
        _device(api.Device(api.database_url(database), key=device_key(key_file, key_env)), keep, change_id, as_json)
        return
    topology = load(config)
    if resolve is not None or keep is not None:
        if resolve is None or keep not in ("winner", "loser"):
            raise typer.BadParameter("give --resolve ID with --keep winner or --keep loser", param_hint="--keep")
        done = api.resolve_conflict(topology, resolve, keep)
        if as_json:
            console.print_json(json.dumps(done, default=str))
        elif keep == "loser":
            console.print(f"conflict {done['conflict_id']}: the losing version of {done['article']} row {done['row']} "
                          f"is now the winner ({done['written_at_publisher']} at the publisher); the next merge "
                          "sends it everywhere", highlight=False)
        else:
            console.print(f"conflict {done['conflict_id']}: the winner is kept", highlight=False)
        return
    if failed:
        _failed(api.failed_changes(topology, publication, article), as_json)
        return
    rows = api.conflicts(topology, publication, article)
    if as_json:
        console.print_json(json.dumps(rows, default=str))
        return
    t = Table("time", "where", "publication", "article", "type", "subscription", "loser", "winner", "reason", box=None)
    for r in rows:
        t.add_row(str(r["create_time"])[:19], r["logged_at"], r["publication"], r["article"],
                  f"{r['conflict_type']} {r['conflict_type_name']}", r["subscription"], r["origin_datasource"],
                  r["winner"], r["reason_text"] + (f" (resolved: {r['resolution']} kept)" if r.get("resolution") else ""))
    console.print(t)
    console.print(f"{len(rows)} conflict(s)")
    waiting = api.failed_changes(topology, publication, article)
    if waiting:
        console.print(f"{len(waiting)} failed change(s) waiting to be tried again at the next merge "
                      "(sparksync conflicts --failed)")


def _failed(rows: list[dict], as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(rows, default=str))
        return
    t = Table("where", "direction", "subscription", "article", "row", "column", "value", "attempts", "reason", box=None)
    for r in rows:
        t.add_row(r["where"], r["direction"], r["subscription"], r["article"], r["row_key"] or r["rowguid"],
                  r["column_name"] or "", r["value"] or "", str(r["attempts"]), r["reason"])
    console.print(t)
    console.print(f"{len(rows)} failed change(s)")


def _device(device: api.Device, keep: str | None, change_id: int | None, as_json: bool) -> None:
    """A device's conflict inbox, or one of its conflicts settled."""
    if keep is not None or change_id is not None:
        if keep not in ("mine", "theirs") or change_id is None:
            raise typer.BadParameter("give --keep mine or --keep theirs and the change's ID", param_hint="--keep")
        done = device.keep(change_id, "mine" if keep == "mine" else "theirs")
        if as_json:
            console.print_json(json.dumps(done.as_json(), default=str))
        elif keep == "mine":
            console.print(f"change {change_id}: your version of {done.article} row {done.key or done.rowguid} is "
                          "written again; the next sync uploads it", highlight=False)
        else:
            console.print(f"change {change_id}: the winner ({done.winner_replica}) is kept", highlight=False)
        return
    inbox = device.conflicts()
    if as_json:
        console.print_json(json.dumps([c.as_json() for c in inbox], default=str))
        return
    t = Table("id", "article", "key", "operation", "winner", "reason", "mine", "theirs", box=None)
    for c in inbox:
        t.add_row(str(c.change_id), c.article, json.dumps(c.key, default=str) if c.key else c.rowguid, c.operation,
                  c.winner_replica or "", c.reason or "", json.dumps(c.mine, default=str) if c.mine else "-",
                  json.dumps(c.winner, default=str) if c.winner else "(deleted)")
    console.print(t)
