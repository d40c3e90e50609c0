"""sparksync status"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from ..status import gather_status
from .common import DEFAULT_CONFIG_PATH, ConfigOption, console, handle_errors, load


def _fmt(v) -> str:
    return "-" if v is None else str(v)


@handle_errors
def status_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Publications, articles and nicknames, subscriptions and their watermarks."""
    topology = load(config)
    st = gather_status(topology)
    unreachable = [s for s in st["subscriptions"] if s.get("status") == "unreachable"]
    if as_json:
        console.print_json(json.dumps(st, default=str))
        if unreachable:
            raise typer.Exit(1)
        return
    p = st["publisher"]
    console.print(f"[bold]Publisher[/] {p['name']} ({p['database']}): {p.get('state')}"
                  + (f", replica nickname {p['replica_nickname']}, open generation {p['open_generation']}"
                     if p.get("state") == "published" else ""), highlight=False)
    for pub in st["publications"]:
        if pub.get("state") != "published":
            console.print(f"[bold]Publication[/] {pub['name']}: {pub['state']}")
            continue
        console.print(f"[bold]Publication[/] {pub['name']} ({pub['kind']}), snapshot generation "
                      f"{_fmt(pub['snapshot_generation'])} at {_fmt(pub['snapshot_time'])}", highlight=False)
        t = Table("article", "nickname", "group", "tracking", "rowguid", "triggers", "rows", box=None)
        for a in pub["articles"]:
            t.add_row(a["name"], str(a["nickname"]), str(a["processing_group"]),
                      "column" if a["column_tracking"] else "row", a["rowguid_column"], str(a["triggers"]), str(a["rows"]))
        console.print(t)
    t = Table("subscription", "publication", "type", "priority", "nickname", "status", "sent→ (P.sentgen/S.recgen)",
              "received← (P.recgen/S.sentgen)", "pending ↓", "pending ↑", box=None)
    for s in st["subscriptions"]:
        t.add_row(s["name"], s["publication"], s.get("subscriber_type", "-"), _fmt(s.get("priority")),
                  _fmt(s.get("nickname")), s.get("status", "-") + (f" ({s['error']})" if s.get("error") else ""),
                  f"{_fmt(s.get('publisher_sentgen'))}/{_fmt(s.get('subscriber_recgen'))}",
                  f"{_fmt(s.get('publisher_recgen'))}/{_fmt(s.get('subscriber_sentgen'))}",
                  _fmt(s.get("pending_download")), _fmt(s.get("pending_upload")))
    console.print(t)
    if unreachable:
        raise typer.Exit(1)
