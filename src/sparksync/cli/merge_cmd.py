"""sparksync merge"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sparksync import api
from sparksync.cli.common import (
    DEFAULT_CONFIG_PATH,
    ConfigOption,
    LockTimeoutOption,
    check_subscriptions,
    console,
    handle_errors,
    load,
    make_spark,
    reporter,
)
from sparksync.locks import DEFAULT_WAIT, LockBusy
from sparksync.merge.session.summary import DEFAULT_GENERATIONS_PER_BATCH, DirectionStats, MergeSummary


def print_summary(summary: MergeSummary) -> None:
    t = Table("subscription", "article", "↑ ins/upd/del", "↑ conflicts", "↓ ins/upd/del", "↓ conflicts", "retries",
              "failed", "seconds", box=None)
    for s in summary.subscriptions:
        articles = list(dict.fromkeys([*s.upload, *s.download]))
        for name in articles:
            up, down = s.upload.get(name, DirectionStats()), s.download.get(name, DirectionStats())
            t.add_row(s.subscription, name, _moved(up), str(up.conflicts), _moved(down), str(down.conflicts),
                      str(up.retries + down.retries), str(up.failed + down.failed), f"{up.seconds + down.seconds:.2f}")
        up, down = s.total("upload"), s.total("download")
        t.add_row(f"[bold]{s.subscription}[/]", "[bold]total[/]", _moved(up), str(up.conflicts), _moved(down),
                  str(down.conflicts), str(up.retries + down.retries), str(up.failed + down.failed),
                  f"[bold]{s.seconds:.1f}[/]", end_section=True)
    console.print(t)
    for c in summary.conflicts:
        console.print(f"  conflict ({c['direction']}, {c['subscription']}): type {c['conflict_type']} on article "
                      f"{c['tablenick']} row {c['rowguid']}: {c['reason_text']}", highlight=False)
    for s in summary.subscriptions:
        for e in s.errors:
            text = str(e).removeprefix(f"{s.subscription}: ")      # a replica's error often names it already
            console.print(f"[bold red]{s.subscription}:[/] {escape(text)}", highlight=False)


def show_summary(summary: MergeSummary, as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(summary.to_dict(), default=str))
    else:
        print_summary(summary)


def keep_running(once: Callable[[], bool], continuous: bool, polling_interval: float, rounds: int) -> bool:
    """``once()`` (True: it succeeded), or with ``--continuous`` again every ``polling_interval`` seconds until
    ``rounds`` runs (0: never stops). Whether every run succeeded."""
    n, ok = 0, True
    while True:
        ok = once() and ok
        n += 1
        if not continuous or (rounds and n >= rounds):
            return ok
        time.sleep(polling_interval)


def _moved(st: DirectionStats) -> str:
    """inserts/updates/deletes, and the rows removed because they left the subscriber's partition."""
    return f"{st.inserts}/{st.updates}/{st.deletes}" + (f" (-{st.removed} out of partition)" if st.removed else "")


@handle_errors
def merge_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    subscription: Annotated[list[str] | None, typer.Option("--subscription", "-s",
                                                              help="Only this subscription (repeatable).")] = None,
    exchange_type: Annotated[str, typer.Option("--exchange-type", help="both | upload | download")] = "both",
    upload_generations_per_batch: Annotated[int, typer.Option(
        min=1, help="Generations per upload batch (a transaction each).")] = DEFAULT_GENERATIONS_PER_BATCH,
    download_generations_per_batch: Annotated[int, typer.Option(
        min=1, help="Generations per download batch (a transaction each).")] = DEFAULT_GENERATIONS_PER_BATCH,
    continuous: Annotated[bool, typer.Option("--continuous",
                                             help="Keep one Spark session warm and sync repeatedly.")] = False,
    polling_interval: Annotated[float, typer.Option("--polling-interval", min=0.0,
                                                    help="Seconds between rounds with --continuous.")] = 60.0,
    rounds: Annotated[int, typer.Option("--rounds", min=0, help="With --continuous: stop after N rounds (0 = never).")] = 0,
    no_cleanup: Annotated[bool, typer.Option("--no-cleanup", help="Skip the retention cleanup at the end of the "
                                                                 "session (see 'sparksync cleanup').")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable session summary.")] = False,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """Synchronize subscriptions: upload their changes, then download the publisher's, resolving conflicts."""
    if exchange_type not in ("both", "upload", "download"):
        raise typer.BadParameter("use both, upload or download", param_hint="--exchange-type")
    topology = load(config)
    check_subscriptions(topology, subscription, "merge", other_command="distribute")
    spark = functools.cache(make_spark(topology))          # one session for every round, started when needed

    def once() -> bool:
        try:
            summary = api.merge(topology, list(subscription) if subscription else None, exchange=exchange_type,
                                spark=spark, progress=reporter if not as_json else None,
                                upload_generations_per_batch=upload_generations_per_batch,
                                download_generations_per_batch=download_generations_per_batch, cleanup=not no_cleanup)
        except LockBusy as e:
            if not continuous:
                raise
            reporter(f"{e.message}; trying again next round")    # another command's turn, not a failure
            return True
        show_summary(summary, as_json)
        return summary.ok

    if not keep_running(once, continuous, polling_interval, rounds):
        raise typer.Exit(1)
