"""sparksync status"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sparksync import api
from sparksync.cli.common import DEFAULT_CONFIG_PATH, ConfigOption, console, handle_errors, load


def _fmt(v) -> str:
    return "-" if v is None else str(v)


def print_partitions(parts: list[dict]) -> None:
    """A filtered publication's partitions: parameters, subscriptions, rows per filtered article."""
    articles = list(parts[0]["rows"]) if parts else []
    t = Table("partition", "host_name", "login", "subscriptions", *[f"{a} rows" for a in articles], box=None)
    for p in parts:
        t.add_row(str(p["partition_id"]), _fmt(p["host_name"]), _fmt(p["login"]),
                  ", ".join(p["subscriptions"]) or "-", *[_fmt(p["rows"][a]) for a in articles])
    console.print(t)


@handle_errors
def status_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Publications, articles and nicknames, subscriptions and their watermarks."""
    topology = load(config)
    st = api.status(topology)
    tx = st.get("transactional") or {}
    if as_json:
        console.print_json(json.dumps(st, default=str))
        if not st["ok"]:
            raise typer.Exit(1)
        return
    p = st["publisher"]
    console.print(f"[bold]Publisher[/] {p['name']} ({p['database']}): {p.get('state')}"
                  + (f", replica nickname {p['replica_nickname']}, open generation {p['open_generation']}"
                     if p.get("state") == "published" else ""), highlight=False)
    if p.get("change_capture"):
        console.print(f"  change capture: {describe_capture(p['change_capture'])}", highlight=False)
    for line in p.get("waiting", []):
        console.print(f"  [yellow]waiting:[/] {line}", highlight=False)
    for pub in st["publications"]:
        if pub.get("state") not in ("published", "damaged", "stopped"):
            console.print(f"[bold]Publication[/] {pub['name']}: {pub['state']}")
            continue
        for problem in pub.get("problems", []):
            console.print(f"  [bold red]damaged:[/] {escape(problem)}", highlight=False)
        console.print(f"[bold]Publication[/] {pub['name']} ({pub['kind']}), snapshot generation "
                      f"{_fmt(pub['snapshot_generation'])} at {_fmt(pub['snapshot_time'])}", highlight=False)
        _print_stopped(f"publication {pub['name']}", "snapshot agent", pub)
        t = Table("article", "nickname", "group", "tracking", "rowguid", "triggers", "rows", box=None)
        for a in pub["articles"]:
            t.add_row(a["name"], str(a["nickname"]), str(a["processing_group"]),
                      "column" if a["column_tracking"] else "row", a["rowguid_column"], str(a["triggers"]), str(a["rows"]))
        console.print(t)
        if pub.get("partitions") is not None:
            print_partitions(pub["partitions"])
    t = Table("subscription", "publication", "type", "priority", "nickname", "status", "sent→ (P.sentgen/S.recgen)",
              "received← (P.recgen/S.sentgen)", "pending ↓", "pending ↑", "oldest ↓/↑", "failed ↓/↑", "last run",
              box=None)
    for s in st["subscriptions"]:
        t.add_row(s["name"], s["publication"],
                  s.get("subscriber_type", "-") + (" (web)" if s.get("transport") == "web" else ""), _fmt(s.get("priority")),
                  _fmt(s.get("nickname")), s.get("status", "-") + (f" ({escape(s['error'])})" if s.get("error") else ""),
                  f"{_fmt(s.get('publisher_sentgen'))}/{_fmt(s.get('subscriber_recgen'))}",
                  f"{_fmt(s.get('publisher_recgen'))}/{_fmt(s.get('subscriber_sentgen'))}",
                  _fmt(s.get("pending_download")), _fmt(s.get("pending_upload")),
                  f"{_age(s.get('oldest_pending_download_age'))}/{_age(s.get('oldest_pending_upload_age'))}",
                  f"{_fmt(s.get('failed_download'))}/{_fmt(s.get('failed_upload'))}", _last_run(s))
    if st["subscriptions"]:
        console.print(t)
    for s in st["subscriptions"]:
        _print_stopped(s["name"], "merge agent", s)
        for problem in s.get("problems", []):
            console.print(f"  [bold red]{s['name']} damaged:[/] {escape(problem)}", highlight=False)
        for line in s.get("waiting", []):
            console.print(f"  [yellow]{s['name']} waiting:[/] {line}", highlight=False)
    if tx:
        _print_transactional(tx)
    if not st["ok"]:
        console.print(f"[bold red]{len(st['problems'])} problem(s):[/]", highlight=False)
        for line in st["problems"]:
            console.print(f"  - {escape(line)}", highlight=False)
        raise typer.Exit(1)


def _age(seconds: float | None) -> str:
    """12s, 5m, 3h, 2d: how long a change has been waiting."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _last_run(entry: dict) -> str:
    run = entry.get("last_run")
    if not run:
        return "-"
    return f"{run['status']} {str(run['time'])[:19].replace('T', ' ')}"


def _print_stopped(name: str, agent: str, entry: dict) -> None:
    """An entry whose agent's last run failed: since when, how many runs, and the error."""
    if not entry.get("stopped_since"):
        return
    console.print(f"  [bold red]{escape(name)} stopped:[/] the {agent} has failed {entry['failed_runs']} run(s) since "
                  f"{str(entry['stopped_since'])[:19].replace('T', ' ')} UTC; last error: "
                  f"{escape(str(entry.get('last_error')))}", highlight=False)


def _print_transactional(tx: dict) -> None:
    d = tx["distributor"]
    console.print(f"[bold]Distributor[/] {d['database']}: {d.get('state')}"
                  + (f" ({d['error']})" if d.get("error") else ""), highlight=False)
    for pub in tx["publications"]:
        if pub.get("state") not in ("published", "stopped"):
            console.print(f"[bold]Publication[/] {pub['name']} (transactional): {pub['state']}")
            continue
        held = (f"slot {pub['slot']} holds {_fmt(pub.get('slot_lag_bytes'))} bytes of log" if pub["source"] ==
                "postgresql" else f"{pub.get('log_rows', 0)} change(s) in the capture log")
        if pub.get("oldest_unread_age") is not None:
            held += f", the oldest unread for {_age(pub['oldest_unread_age'])}"
        console.print(f"[bold]Publication[/] {pub['name']} (transactional, {pub['source']}): log reader at xact_seqno "
                      f"{_fmt(pub['logreader_seqno'])}, {held}; {pub['queued_transactions']:,} transaction(s) / "
                      f"{pub['queued_commands']:,} command(s) queued", highlight=False)
        t = Table("article", "id", "columns", "filter", "ins / upd / del", box=None)
        for a in pub["articles"]:
            t.add_row(a["name"], str(a["article_id"]), str(a["columns"]), a["filter"] or "-", " / ".join(a["commands"]))
        console.print(t)
        _print_stopped(f"publication {pub['name']}", "log reader", pub)
        if pub.get("partitions") is not None:
            print_partitions(pub["partitions"])
    t = Table("subscription", "publication", "status", "streams", "delivered", "at subscriber", "pending", "oldest",
              "last run", box=None)
    for s in tx["subscriptions"]:
        t.add_row(s["name"], s["publication"], s["status"] + (f" ({s.get('error') or s.get('message')})"
                                                              if s.get("error") or s.get("message") else ""),
                  str(s["streams"]), _fmt(s.get("delivered_seqno")), _fmt(s.get("subscriber_seqno")),
                  _fmt(s.get("pending_transactions")), _age(s.get("oldest_pending_age")), _last_run(s))
    console.print(t)
    for s in tx["subscriptions"]:
        _print_stopped(s["name"], "distribution agent", s)


def describe_capture(c: dict) -> str:
    """``triggers``, or ``log (slot NAME, 1.2 MB of write-ahead log retained)``."""
    if c.get("mode") != "log":
        return str(c.get("mode"))
    kept = c.get("retained_wal_bytes")
    return f"log (slot {c.get('slot')}, " + ("slot missing" if kept is None else f"{kept / 1e6:,.1f} MB of "
                                             "write-ahead log retained") + ")"
