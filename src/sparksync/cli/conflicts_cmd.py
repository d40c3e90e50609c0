"""sparksync conflicts"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..conflict_view import list_conflicts
from .common import DEFAULT_CONFIG_PATH, ConfigOption, console, handle_errors, load


@handle_errors
def conflicts_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    publication: Annotated[Optional[str], typer.Option("--publication", "-p", help="Only this publication.")] = None,
    article: Annotated[Optional[str], typer.Option("--article", "-a", help="Only this article (table).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List logged conflicts: type, reason, loser, winner, and the losing row."""
    topology = load(config)
    rows = list_conflicts(topology, publication, article)
    if as_json:
        console.print_json(json.dumps(rows, default=str))
        return
    t = Table("time", "where", "publication", "article", "type", "subscription", "loser", "winner", "reason", box=None)
    for r in rows:
        t.add_row(str(r["create_time"])[:19], r["logged_at"], r["publication"], r["article"],
                  f"{r['conflict_type']} {r['conflict_type_name']}", r["subscription"], r["origin_datasource"],
                  r["winner"], r["reason_text"])
    console.print(t)
    console.print(f"{len(rows)} conflict(s)")
