"""sparksync logreader | distribute | tracer-token: the transactional replication agents."""

from __future__ import annotations

import functools
import json
import time
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
from sparksync.transactional.delivery.agent import DistributeSummary
from sparksync.transactional.distribution.logreader import READ_BATCH

Continuous = Annotated[bool, typer.Option("--continuous", help="Keep running: a round right after a round that "
                                                                "found work, else after the polling interval.")]
Polling = Annotated[float, typer.Option("--polling-interval", min=0.0,
                                        help="With --continuous: seconds to wait after a round that found nothing.")]
Rounds = Annotated[int, typer.Option("--rounds", min=0, help="With --continuous: stop after N rounds (0 = never).")]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


class _Rounds:
    """The rounds of an agent: one, or (``--continuous``) until stopped or ``rounds`` ran. Like SQL
    Server's continuous agents, the next round starts at once when the last one found work (a backlog
    is worked off without pauses) and after ``polling`` seconds when it found none."""

    def __init__(self, continuous: bool, polling: float, rounds: int):
        self.continuous, self.polling, self.rounds = continuous, polling, rounds
        self.busy = False          # set by the caller: the round just run found work

    def skip(self, busy: LockBusy) -> None:
        """A lock held by another command past the lock timeout: another command's turn, not a failure
        of a continuous agent (it tries again next round); a single run stops with the error."""
        if not self.continuous:
            raise busy
        reporter(f"{busy.message}; trying again next round")

    def __iter__(self):
        n = 0
        while True:
            self.busy = False
            yield n
            n += 1
            if not self.continuous or (self.rounds and n >= self.rounds):
                return
            if not self.busy:
                time.sleep(self.polling)


@handle_errors
def logreader_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    publication: Annotated[list[str] | None, typer.Option("--publication", "-p",
                                                             help="Only this publication (repeatable).")] = None,
    read_batch: Annotated[int, typer.Option("--read-batch", min=1, help="Changes per read (whole transactions).")] =
    READ_BATCH,
    continuous: Continuous = False, polling_interval: Polling = 5.0, rounds: Rounds = 0, as_json: Json = False,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """Move committed transactions from the publisher's log to the distribution database."""
    topology = load(config)
    for p in publication or []:
        topology.publication(p)
    rounds_ = _Rounds(continuous, polling_interval, rounds)
    for _ in rounds_:
        try:
            runs = api.logreader(topology, list(publication) if publication else None, read_batch=read_batch,
                                 progress=reporter if not as_json else None)
        except LockBusy as e:
            rounds_.skip(e)
            continue
        rounds_.busy = any(r.transactions for r in runs)
        if as_json:
            console.print_json(json.dumps([r.to_dict() for r in runs], default=str))
        else:
            for r in runs:
                console.print(f"logreader {r.publication}: {r.transactions:,} transaction(s), {r.commands:,} "
                              f"command(s) in {r.seconds:.1f}s"
                              + (f" (xact_seqno {r.first_seqno} .. {r.last_seqno})" if r.transactions else ""),
                              highlight=False)


def print_distribution(summary: DistributeSummary) -> None:
    t = Table("publication", "subscription", "transactions", "commands", "batches", "on streams", "fallbacks", "skipped",
              "last xact_seqno", "seconds", "status", box=None)
    for s in summary.subscriptions:
        t.add_row(s.publication, s.subscription, f"{s.transactions:,}", f"{s.commands:,}", str(s.batches),
                  str(s.parallel), str(s.fallbacks), str(s.skipped), str(s.last_seqno if s.last_seqno is not None else "-"),
                  f"{s.seconds:.2f}", "ok" if s.ok else "[bold red]error[/]")
    console.print(t)
    for s in summary.subscriptions:
        for e in s.errors:
            if e.get("skipped"):
                console.print(f"  {s.subscription}: skipped transaction {e['xact_seqno']} command {e['command_id']}: "
                              f"error {e['error_code']}: {e['message']}", highlight=False)
        if not s.ok:
            text = s.message.removeprefix(f"{s.subscription}: ")      # a replica's error often names it already
            console.print(f"[bold red]{s.subscription}:[/] {escape(text)}", highlight=False)


@handle_errors
def distribute_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    subscription: Annotated[list[str] | None, typer.Option("--subscription", "-s",
                                                              help="Only this subscription (repeatable).")] = None,
    continuous: Continuous = False, polling_interval: Polling = 5.0, rounds: Rounds = 0, as_json: Json = False,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """Deliver queued commands to the subscriptions of transactional publications."""
    topology = load(config)
    check_subscriptions(topology, subscription, "transactional", other_command="merge")
    spark = functools.cache(make_spark(topology))        # one session for every round, started when needed
    failed = False
    rounds_ = _Rounds(continuous, polling_interval, rounds)
    for _ in rounds_:
        try:
            summary = api.distribute(topology, list(subscription) if subscription else None, spark=spark,
                                     progress=reporter if not as_json else None)
        except LockBusy as e:
            rounds_.skip(e)
            continue
        rounds_.busy = summary.ok and any(s.transactions for s in summary.subscriptions)
        failed = failed or not summary.ok
        if as_json:
            console.print_json(json.dumps(summary.to_dict(), default=str))
        else:
            print_distribution(summary)
    if failed:
        raise typer.Exit(1)


def _seconds(v: float | None) -> str:
    return "pending" if v is None else f"{v:.3f}s"


@handle_errors
def tracer_token_command(
    publication: Annotated[str, typer.Option("--publication", "-p", help="The publication (merge or transactional).")],
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    wait: Annotated[float, typer.Option("--wait", min=0.0, help="Seconds to wait for the token to reach every "
                                                               "subscriber (the agents must be running).")] = 30.0,
    history: Annotated[bool, typer.Option("--history", help="List recent tokens instead of posting one.")] = False,
    as_json: Json = False,
) -> None:
    """Post a tracer token and report latency publisher -> distributor -> each subscriber."""
    topology = load(config)
    if history:
        reports = api.tracer_tokens(topology, publication)
    else:
        said = (lambda line: None) if as_json else (lambda line: console.print(line, highlight=False))
        reports = [api.tracer_token(topology, publication, wait=wait, progress=said)]
    if as_json:
        console.print_json(json.dumps([r.to_dict() for r in reports], default=str))
        return
    t = Table("tracer token", "subscription", "publisher -> distributor", "distributor -> subscriber", "total",
              box=None)
    for r in reports:
        for s, at in (r.subscribers.items() or [("-", None)]):
            total = None if at is None or r.publisher_commit is None else (at - r.publisher_commit).total_seconds()
            t.add_row(r.tracer_id[:8], s, _seconds(r.publisher_to_distributor), _seconds(r.distributor_to(s)),
                      _seconds(total))
    console.print(t)


@handle_errors
def schema_change_command(
    publication: Annotated[str, typer.Option("--publication", "-p", help="The publication (merge or transactional).")],
    article: Annotated[str, typer.Option("--article", "-a", help="The published table.")],
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    add_column: Annotated[str | None, typer.Option("--add-column", help="'Name type': add a nullable column.")] = None,
    drop_column: Annotated[str | None, typer.Option("--drop-column", help="Drop this column.")] = None,
    alter_column: Annotated[str | None, typer.Option(
        "--alter-column", help="'Name [type] [NOT NULL | NULL] [DEFAULT value | DROP DEFAULT]': a type of the same "
        "family (a narrowing only when every replica's values fit), the nullability, the default.")] = None,
    rename_column: Annotated[str | None, typer.Option("--rename-column", help="'Old New': rename a column.")] = None,
    lock_timeout: LockTimeoutOption = DEFAULT_WAIT,
) -> None:
    """Add, drop, alter or rename a column of a published table; the change reaches subscribers in order with the
    data."""

    topology = load(config)
    merge = topology.publication(publication).kind == "merge"
    for line in api.schema_change(topology, publication, article, add_column=add_column, drop_column=drop_column,
                                  alter_column=alter_column, rename_column=rename_column):
        console.print(f"{line} at the publisher; " + ("each subscriber's next merge replays it (triggers regenerated)"
                      if merge else "the distribution agent applies it at each subscriber (procedures regenerated)"),
                      highlight=False)
