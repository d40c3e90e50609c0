"""sparksync history"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sparksync import api
from sparksync.cli.common import DEFAULT_CONFIG_PATH, ConfigOption, console, err_console, handle_errors, load
from sparksync.run_history import LIMIT


@handle_errors
def history_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="Runs per agent's history table.")] = LIMIT,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The agents' recent runs, newest first: merge sessions, snapshots, log reader and distribution agent
    runs, failed ones with their error."""
    doc = api.history(load(config), limit)
    if as_json:
        console.print_json(json.dumps(doc, default=str))
    else:
        t = Table("start", "agent", "publication", "subscription", "status", "rows", "seconds", "error", box=None)
        for r in doc["runs"]:
            t.add_row(str(r["start_time"])[:19].replace("T", " "), r["agent"], r["publication"], r["subscription"] or "",
                      "[bold red]failed[/]" if r["status"] == "failed" else "succeeded",
                      "-" if r.get("rows") is None else f"{r['rows']:,}",
                      "-" if r["seconds"] is None else f"{r['seconds']:.2f}",
                      escape(r["message"] or "") if r["status"] == "failed" else "")
        console.print(t)
    for e in doc["errors"]:
        err_console.print(f"[bold red]error:[/] {escape(e)}", highlight=False)
    if doc["errors"]:
        raise typer.Exit(1)
